"""udev rule rendering, pure: golden files, lint, injection, glob and size grammar, properties.

Golden files live in tests/golden/udev/<profile>.rules. After an intended change
to the renderer or a profile, regenerate them and review the diff:

    UPDATE_GOLDEN=1 python3 -m pytest -q tests/unit/udev/test_udev_rules.py -k golden
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import fnmatch
import os
import re
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakesys import FakeKernel, FakeTree
from tests.harness import REPO, run_cli
from tests.udevsim import MiniUdev, apply_plan, build_tree, exact_case, profile_data, queue_state, valid_profile
from tunectl.attributes import QUEUE
from tunectl.context import Context
from tunectl.devices.classes import CLASS_TABLE, CLASSES, classify
from tunectl.profile.checks import glob_problem
from tunectl.profile.resolve import Profile, load_profile, normalise
from tunectl.system import udevadm
from tunectl.udev import install as udev_commands
from tunectl.udev.lint import lint, parse_rule
from tunectl.udev.match import int_globs, range_globs
from tunectl.udev.render import (
    RULES_FILE,
    RenderError,
    render,
    render_rules,
)

ROOT = REPO
GOLDEN = ROOT / "tests" / "golden" / "udev"
DATA = ROOT / "tests" / "data"
TUNECTL = "/usr/sbin/tunectl"


def _golden_cases() -> list:
    shipped = sorted((ROOT / "profiles").glob("*.yaml"))
    data = sorted(DATA.glob("udev-*.yaml"))
    return [pytest.param(p, id=f"shipped/{p.stem}") for p in shipped] + [pytest.param(p, id=f"data/{p.stem}") for p in data]


def _load(path: Path) -> Profile:
    return load_profile(str(path), [ROOT / "profiles"])


def _render_file(path: Path) -> str:
    # A fixed profile path, so the golden RUN lines do not depend on the checkout's location.
    return render(_load(path), TUNECTL, profile_path=f"/etc/tunectl/profiles/{path.name}")


@pytest.mark.parametrize("path", _golden_cases())
def test_golden(path: Path) -> None:
    text = _render_file(path)
    assert lint(text) == []
    golden = GOLDEN / f"{path.stem}.rules"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"no golden file {golden}; generate it with UPDATE_GOLDEN=1 (see this file's docstring)"
    assert text == golden.read_text(), f"{golden} differs; if the change is intended, regenerate with UPDATE_GOLDEN=1"


def test_every_data_profile_has_a_golden_file_and_no_stale_ones() -> None:
    expected = {p.values[0].stem for p in _golden_cases()}
    present = {p.stem for p in GOLDEN.glob("*.rules")}
    assert not present - expected, f"golden files without a profile: {sorted(present - expected)}"


def test_render_is_pure_and_has_no_timestamp() -> None:
    path = DATA / "udev-every-class.yaml"
    first, second = _render_file(path), _render_file(path)
    assert first == second
    assert not re.search(r"\b20\d\d-\d\d-\d\d|\d\d:\d\d:\d\d", first)
    head = first.splitlines()[:3]
    assert "'udev-every-class'" in head[0] and re.match(r"# digest sha256:[0-9a-f]{64}, ", head[1])


def test_structure_of_rendered_rules() -> None:
    text = _render_file(DATA / "udev-every-class.yaml")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[:3] == ['SUBSYSTEM!="block", GOTO="tunectl_end"', 'ACTION!="add|change", GOTO="tunectl_end"',
                         'ENV{DEVTYPE}!="disk", GOTO="tunectl_end"']
    first_sched = min(i for i, line in enumerate(lines) if 'ATTR{queue/scheduler}="' in line)
    knob_writes = [i for i, line in enumerate(lines) if 'ATTR{queue/iosched/' in line and '"=' not in line]
    assert knob_writes and min(knob_writes) > first_sched
    assert not any("RUN" in line for line in lines), "plain settings never start a process"
    assert "$" not in text and "%" not in text


CLASS_MATCH = tuple((c.name, c.udev_match) for c in CLASS_TABLE)


CLASS_MATCH = tuple((c.name, c.udev_match) for c in CLASS_TABLE)


def test_class_order_matches_classify() -> None:
    assert [c for c, _ in CLASS_MATCH] == list(CLASSES)
    names = ["dm-0", "dm-12", "md0", "md127", "loop0", "zram0", "nvme0n1", "nvme1n12", "nvme0", "mmcblk0", "mmcblk0boot0",
             "vda", "xvdb", "sda", "sdz", "hda", "mdx", "nbd0", "sr0", "vdx", "nvmeX"]
    for name in names:
        for rot in (True, False):
            assert _udev_class(name, rot) == classify(name, rot), name


def _udev_class(name: str, rotational: bool) -> str:
    for cls, key in CLASS_MATCH:
        if key is None:
            return cls
        m = re.fullmatch(r'(KERNEL|ATTR\{queue/rotational\})=="(.*)"', key)
        assert m
        if m.group(1) == "KERNEL":
            if any(fnmatchcase(name, alt) for alt in m.group(2).split("|")):
                return cls
        elif ("1" if rotational else "0") == m.group(2):
            return cls
    raise AssertionError("unreachable")


# --- notes, reporting and refusal ----------------------------------------------------------------------------


def _profile(data: dict, name: str = "t", file: str = "/etc/tunectl/profiles/t.yaml") -> Profile:
    data = dict(data, name=name)
    return Profile(name, "", [file], normalise(data), {})


def test_empty_size_range_is_reported_not_dropped() -> None:
    rendered = render_rules(_load(DATA / "udev-overrides.yaml"), TUNECTL)
    assert any("devices[8]" in n and "matches no device" in n for n in rendered.notes)
    assert "# skipped: its size range holds no whole 512-byte sector count" in rendered.text


def test_below_needs_an_executable_and_runs_only_for_stacked_devices() -> None:
    profile = _load(DATA / "udev-below.yaml")
    with pytest.raises(RenderError, match="tunectl executable"):
        render_rules(profile, None)
    rendered = render_rules(profile, TUNECTL, profile_path="/etc/tunectl/profiles/udev-below.yaml")
    assert rendered.runs_tunectl and any("below:" in n for n in rendered.notes)
    runs = [line for line in rendered.text.splitlines() if "RUN" in line]
    cmd = 'RUN+="/usr/sbin/tunectl apply -p /etc/tunectl/profiles/udev-below.yaml --stack $kernel -q"'
    # the stacked device's event, and the event of a device under a stack (whose below: values only tunectl knows)
    assert runs == [f'ENV{{TUNECTL_BELOW}}=="1", TEST=="slaves/*/dev", {cmd}', f'ENV{{TUNECTL_UNDER}}=="1", {cmd}']
    assert 'TEST=="holders/*/dev", ENV{TUNECTL_UNDER}="1"' in rendered.text
    assert 'ENV{ID_PART_TABLE_TYPE}=="?*", ENV{TUNECTL_UNDER}="1"' in rendered.text
    assert lint(rendered.text) == []


def test_the_rules_keep_the_originals_of_what_below_sets() -> None:
    """#34: a stack made after `udev install` gets below: from the RUN, on a disk no tunectl command journalled:
    the rules keep the disk's originals of what below: sets as well as of what they write themselves."""
    profile = _profile({"classes": {"mmc": {"read_ahead_kb": 256}},
                        "devices": [{"match": {"class": "dm"}, "below": {"scheduler": "bfq", "queue": {"nomerges": 1}}}]},
                       file="/etc/tunectl/profiles/late.yaml")
    text = render(profile, TUNECTL, capture=True)
    kept = set(re.findall(r'IMPORT\{db\}="(TUNECTL_ORIG_[A-Z_]+)"', text))
    # the scheduler, nr_requests (a switch resets it) and nomerges from below:, read_ahead_kb from the class
    assert kept == {f"TUNECTL_ORIG_{a}" for a in ("SCHEDULER", "NR_REQUESTS", "NOMERGES", "READ_AHEAD_KB")}, kept
    # kept, never written by the rules: the RUN writes them
    assert "ATTR{queue/scheduler}=" not in text and "ATTR{queue/nomerges}=" not in text
    assert lint(text) == []
    assert "IMPORT{db}" not in render(profile, TUNECTL)  # `udev render` without capture: unchanged


def test_loop_and_zram_only_when_named() -> None:
    text = render(_profile({"classes": {"ssd": {"read_ahead_kb": 256}}}), None)
    assert 'ENV{TUNECTL_CLASS}=="loop|zram", GOTO="tunectl_end"' in text
    text = render(_profile({"classes": {"ssd": {"read_ahead_kb": 256}},
                            "devices": [{"match": {"class": "loop"}, "read_ahead_kb": 64}]}), None)
    assert 'ENV{TUNECTL_CLASS}=="zram", GOTO="tunectl_end"' in text
    assert 'TEST!="loop/backing_file"' in text


def test_scope_restricts_to_callers_devices() -> None:
    text = render(_profile({"classes": {"loop": {"read_ahead_kb": 64}}}), None, only_kernels=["loop5", "loop6"],
                  only_loop_backing="/tmp/x/udev-*.img")
    assert 'KERNEL!="loop5|loop6", GOTO="tunectl_end"' in text
    assert 'ATTR{loop/backing_file}!="/tmp/x/udev-*.img", GOTO="tunectl_end"' in text
    assert lint(text) == []
    with pytest.raises(RenderError):
        render(_profile({"classes": {"loop": {"read_ahead_kb": 64}}}), None, only_loop_backing="relative/*.img")
    with pytest.raises(RenderError, match="only_kernels: 'loop5|loop6': character '|'"):
        render(_profile({"classes": {"loop": {"read_ahead_kb": 64}}}), None, only_kernels=["loop5|loop6"])


# --- injection ------------------------------------------------------------------------------------------------
# What a profile could smuggle into a rule is refused by the profile checks (tests/unit/profile/test_profile_errors.py);
# what the caller passes (executable and profile paths, the scope) is checked here.

@pytest.mark.parametrize("exe, path", [("/usr/bin/tune ctl", "/p.yaml"), ("tunectl", "/p.yaml"), ("/x/$HOME", "/p.yaml"),
                                       (TUNECTL, "/etc/%k.yaml"), (TUNECTL, "relative.yaml"), (TUNECTL, "/a'b.yaml")])
def test_run_paths_are_checked(exe: str, path: str) -> None:
    profile = _profile({"classes": {"dm": {"below": {"read_ahead_kb": 64}}}}, file=path)
    with pytest.raises(RenderError):
        render(profile, exe)


# --- lint -----------------------------------------------------------------------------------------------------

GUARD = 'SUBSYSTEM!="block", GOTO="e"\nACTION!="add|change", GOTO="e"\nENV{DEVTYPE}!="disk", GOTO="e"\n'


@pytest.mark.parametrize("body, problem", [
    ('FOO=="x", ENV{A}="1"\n', "unknown key FOO"),
    ('KERNEL="sda", ENV{A}="1"\n', "operator = is not valid for KERNEL"),
    ('KERNEL=="sda" ENV{A}="1"\n', "missing ','"),
    ("KERNEL==sda, ENV{A}=\"1\"\n", "cannot parse"),
    ('KERNEL=="sda", ENV{A}="1",\n', "trailing ','"),
    ('ENV="x", ENV{A}="1"\n', "ENV needs an attribute"),
    ('KERNEL{x}=="a", ENV{A}="1"\n', "KERNEL takes no {attribute}"),
    ('KERNEL=="sda"\n', "no effect"),
    ('KERNEL=="sda", GOTO="nowhere"\n', "has no LABEL"),
    ('ENV{A}="$env{B}"\n', "substitution"),
    ('ATTR{queue/read_ahead_kb}="%k"\n', "substitution"),
    ('ENV{A}="a\\"b"\n', "backslash"),
    ('ATTRS{queue/rotational}=="1", ENV{A}="1"\n', "ATTRS{queue/...}"),
    ('ATTR{queue/iosched/read_expire}="150", ATTR{queue/scheduler}="mq-deadline"\n', "scheduler written after"),
    ('ATTR{../x}="1"\n', "without .."),
    ('ENV{A}="\x01"\n', "non-printable"),
    ('RUN+="/bin/sh -c \'x\'"\n', "quote"),
])
def test_lint_finds(body: str, problem: str) -> None:
    problems = lint(GUARD + body + 'LABEL="e"\n')
    assert any(problem in p.message for p in problems), problems


def test_lint_order_and_guards() -> None:
    assert any("before the SUBSYSTEM" in p.message for p in lint('ATTR{queue/scheduler}="bfq"\n'))
    text = GUARD + 'ATTR{queue/iosched/slice_idle}="0"\nATTR{queue/scheduler}="bfq"\nLABEL="e"\n'
    assert [p.line for p in lint(text) if "scheduler written after" in p.message] == [5]
    back = GUARD + 'LABEL="x"\nGOTO="x"\nLABEL="e"\n'
    assert any("backwards" in p.message for p in lint(back))
    dup = GUARD + 'LABEL="e"\nLABEL="e"\n'
    assert any("already defined" in p.message for p in lint(dup))
    assert any("newline" in p.message for p in lint(GUARD + 'LABEL="e"'))


def test_lint_accepts_continuations_and_systemd_style_rules() -> None:
    text = (GUARD + 'KERNEL=="sd*", \\\n  ATTR{queue/rotational}=="1", ATTR{queue/scheduler}="bfq"\n'
            'KERNEL=="sd*", TEST=="queue/iosched/slice_idle", ATTR{queue/iosched/slice_idle}="0"\n'
            'IMPORT{builtin}="path_id", RUN+="/usr/sbin/tunectl apply --stack $kernel -q"\nLABEL="e"\n')
    assert lint(text) == []
    assert parse_rule('KERNEL=="a", ENV{B}="c d"')[1] is None


# --- glob and size grammar --------------------------------------------------------------------------------------

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
_GLOB_ATOMS = st.one_of(st.sampled_from(list("abzAZ09._-:/!^{}() ")), st.just("*"), st.just("?"),
                        st.sampled_from(["[0-9]", "[a-c]", "[!a]", "[!0-9a]", "[ab]", "[.:]", "[{}]", "[a]"]))
_SUBJECTS = st.text(alphabet="abzAZ09._-:/!^{}() [*?]", max_size=8)


@settings(max_examples=400, deadline=None)
@given(st.lists(_GLOB_ATOMS, min_size=1, max_size=6).map("".join), st.lists(_SUBJECTS, min_size=1, max_size=8))
def test_accepted_globs_mean_the_same_to_udev_and_tunectl(glob: str, subjects: list[str]) -> None:
    """udev matches with fnmatch(3), plan.py with fnmatchcase: on every accepted glob they agree."""
    if glob_problem(glob):
        return
    for s in subjects + [glob]:
        assert (_LIBC.fnmatch(glob.encode(), s.encode(), 0) == 0) == fnmatchcase(s, glob), (glob, s)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**13), st.one_of(st.none(), st.integers(0, 10**13)), st.lists(st.integers(0, 10**14), max_size=10))
def test_size_range_globs_are_exact(lo: int, hi: int | None, probes: list[int]) -> None:
    globs = range_globs(lo, hi)
    if hi is not None and hi < lo:
        assert globs == []
        return
    edges = [lo - 1, lo, lo + 1] + ([hi - 1, hi, hi + 1] if hi is not None else [10**15])
    for n in [p for p in probes + edges if p >= 0]:
        inside = lo <= n and (hi is None or n <= hi)
        assert any(fnmatchcase(str(n), g) for g in globs) == inside, (lo, hi, n, globs)
        assert all("|" not in g and '"' not in g for g in globs)


_HEX_GLOB = st.lists(st.one_of(st.sampled_from(list("0123456789abcdefAF")), st.just("*"), st.just("?")), max_size=6)


@settings(max_examples=300, deadline=None)
@given(_HEX_GLOB.map(lambda p: "0x" + "".join(p)), st.lists(st.text(alphabet="0123456789abcdefABCDEF", max_size=8), max_size=6))
def test_wwn_globs_for_raw_naa_values(glob: str, hexes: list[str]) -> None:
    from tunectl.devices.discover import normalise_wwn
    from tunectl.udev.match import naa_glob

    pattern, exact = naa_glob(glob)
    assert exact
    for h in hexes:
        raw = "naa." + h
        want = fnmatchcase(normalise_wwn(raw), glob)
        assert want == (pattern is not None and any(fnmatchcase(raw, g) for g in pattern.split("|"))), (glob, raw)


def _udev_id_model(decoded: str) -> str:
    """What udev makes of a model in ID_MODEL: blank runs -> one '_', other unsafe characters -> '_'."""
    text = re.sub(r"\s+", "_", decoded.strip())
    return "".join(c if c in "#+-.:=@_" or c.isalnum() else "_" for c in text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("aZ09-.*")), min_size=1, max_size=6).map("".join),
       st.lists(st.text(alphabet="aZ09-. (/", max_size=8), max_size=6))
def test_model_globs_for_udev_id_model(glob: str, models: list[str]) -> None:
    from tunectl.udev.match import id_model_glob

    pattern, exact = id_model_glob(glob)
    assert exact
    for decoded in (m.strip() for m in models):
        if decoded:
            assert fnmatchcase(decoded, glob) == fnmatchcase(_udev_id_model(decoded), pattern), (glob, decoded)


def test_inexact_model_and_wwn_matches_are_reported() -> None:
    rendered = render_rules(_profile({"devices": [{"match": {"model": "WDC WD40*", "wwn": "*5000*"}, "read_ahead_kb": 64}]}),
                            None)
    notes = [n for n in rendered.notes if "approximate" in n]
    assert [n.split(":")[0] for n in notes] == ["devices[0].match.model", "devices[0].match.wwn"]
    assert 'ENV{ID_MODEL}!="WDC_WD40*"' in rendered.text and rendered.text.count("# approximate:") == 2
    exact = render_rules(_profile({"devices": [{"match": {"model": "ST4000*", "wwn": "0x5000c5*"}, "read_ahead_kb": 64}]}),
                         None)
    assert not exact.notes


# Bounds on every side of a digit boundary, and both ends of the attribute's own range.
_BOUNDS = sorted({0, 1, 2, 8, 9, 10, 11, 19, 20, 99, 100, 101, 127, 128, 129, 255, 256, 512, 999, 1000, 1001, 1023, 1024,
                  4095, 4096, 4097, 8191, 8192, 9999, 10000, 10001, 16384, 32767, 32768, 59999, 60000, 65534, 65535, 65536,
                  *range(0, 65537, 4099)})


def _matcher(globs: list[str]):
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs)).match


@pytest.mark.parametrize("lo", _BOUNDS)
def test_floor_and_cap_globs_against_every_read_ahead_value(lo: int) -> None:
    """The rules' `ATTR{queue/read_ahead_kb}!="..."` tests, against every value 0..65536 the kernel can show."""
    floor, cap = _matcher(int_globs(lo, None)), _matcher(int_globs(QUEUE["read_ahead_kb"].minimum, lo))
    for value in range(0, 65537):
        text = str(value)
        assert bool(floor(text)) == (value >= lo), (lo, value)
        assert bool(cap(text)) == (value <= lo), (lo, value)


@pytest.mark.slow
def test_range_globs_at_every_bound_near_every_digit_boundary() -> None:
    """Every floor and cap 0..65536, probed where a glob list could go wrong: at and next to the bound,
    at each power of ten, and at the attribute's ends."""
    edges = sorted({0, 65536, *(10**k + d for k in range(6) for d in (-1, 0, 1))})
    def hit(globs: list[str], text: str) -> bool:  # fnmatchcase caches each glob; bounds share most of theirs
        return any(fnmatchcase(text, g) for g in globs)

    for bound in range(0, 65537):
        floor, cap = int_globs(bound, None), int_globs(0, bound)
        width = len(str(bound))
        for value in (bound - 1, bound, bound + 1, *(e for e in edges if abs(len(str(e)) - width) <= 1)):
            if 0 <= value <= 65536:
                assert hit(floor, str(value)) == (value >= bound), (bound, value)
                assert hit(cap, str(value)) == (value <= bound), (bound, value)


@pytest.mark.parametrize("lo, hi", [(-1, None), (-1, 0), (-1, 5000), (0, 5000), (None, -1), (None, 2000), (1, 10**9)])
def test_range_globs_with_negative_values(lo: int | None, hi: int | None) -> None:
    """wbt_lat_usec and io_poll_delay show -1; the cap of a range on them starts at the attribute's -1."""
    match = _matcher(int_globs(lo, hi))
    for value in (*range(-1200, 12001), 10**9 - 1, 10**9, 10**9 + 1):
        inside = (lo is None or value >= lo) and (hi is None or value <= hi)
        assert bool(match(str(value))) == inside, (lo, hi, value)
    assert all(_LIBC.fnmatch(g.encode(), b"-1", 0) != 0 or (lo or -1) <= -1 for g in int_globs(lo, hi))


# --- random valid profiles --------------------------------------------------------------------------------------

def _shuffled(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(profile_data(), st.randoms(use_true_random=False))
def test_random_profiles_render_lint_clean_and_independent_of_key_order(data: dict, rnd) -> None:
    profile = valid_profile(data)
    text = render(profile, TUNECTL)
    assert lint(text) == []
    other = Profile(profile.name, "", profile.files, _shuffled(copy.deepcopy(profile.data), rnd), {})
    assert render(other, TUNECTL) == text


def _one_event_and_apply(tmp_path_factory, profile: Profile, dev: dict) -> tuple[FakeKernel, FakeKernel]:
    """One fake device: the kernel after its udev event under the rendered rules, and after apply's plan."""
    rules_root, apply_root = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("apply")
    by_rules, events = build_tree(rules_root, [dev])
    by_apply, _ = build_tree(apply_root, [dev])
    MiniUdev(rules_root, render(profile, TUNECTL)).event(dev["name"], *events[dev["name"]], by_rules)
    apply_plan(by_apply, profile)
    return by_rules, by_apply


def test_serial_match_reads_the_scsi_serial_before_the_naa_id(tmp_path_factory) -> None:
    """Seen on Debian's 6.1 in the VM tier: a SCSI SSD with a WWN has its NAA id in ID_SERIAL_SHORT, and the
    product serial that apply matches in ID_SCSI_SERIAL; the rules left that disk untuned at boot."""
    profile = _profile({"devices": [{"match": {"serial": "tcssd01"}, "scheduler": "kyber"}]})
    dev = {"name": "sdb", "offered": ["mq-deadline", "kyber", "none"], "active": "none", "rotational": "0",
           "removable": "0", "size": "10", "attrs": {}, "bus_path": "pci0000:00/ata1/host0",
           "env": {"ID_SCSI_SERIAL": "tcssd01", "ID_SERIAL_SHORT": "35000c500a1b2c3d4", "ID_WWN": "0x5000c500a1b2c3d4"}}
    by_rules, by_apply = _one_event_and_apply(tmp_path_factory, profile, dev)
    shown = queue_state(by_rules)
    assert "[kyber]" in shown["sdb"]["queue/scheduler"].split()
    assert queue_state(by_apply) == shown


# --- equivalence with plan, on a fake sysfs, through a small udev interpreter ------------------------------------


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                                  HealthCheck.function_scoped_fixture])
@given(profile_data(), st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.data())
def test_udev_event_reaches_the_state_apply_reaches(tmp_path_factory, data: dict, seeds: list, draw) -> None:
    """For random profiles and fake devices: the writes the rules make == the writes of tunectl's plan."""
    profile, devices = exact_case(data, len(seeds), draw, TUNECTL)
    rules_root, apply_root = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("apply")
    by_rules, events = build_tree(rules_root, devices)
    by_apply, _ = build_tree(apply_root, devices)
    udev = MiniUdev(rules_root, render(profile, TUNECTL))
    for name, (devpath, env) in events.items():
        udev.event(name, devpath, env, by_rules)
    apply_plan(by_apply, profile)
    assert queue_state(by_rules) == queue_state(by_apply)


# --- CLI ------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli_env(fake_tree: FakeTree, tmp_path: Path) -> dict[str, str]:
    """A fake machine (every topology of tests/fakesys.py) and a state of this test's own: a unit test run as root
    must neither read this machine's devices nor write a state that other runs share."""
    return {"PATH": "/usr/bin:/bin", "TUNECTL_SYSFS_ROOT": str(fake_tree.root),
            "TUNECTL_UDEV_ROOT": str(fake_tree.udev_root), "TUNECTL_STATE_DIR": str(tmp_path / "state")}


def _cli(*argv: str, env: dict[str, str], run=None) -> tuple[int, str, str]:
    """`run`: the subprocess runner the Context hands to udevadm (a recorder)."""
    ctx = Context.create(env=env)
    if run is not None:
        ctx.run = run
    r = run_cli(*argv, context=ctx)
    return r.code, r.out, r.err


def test_cli_render_prints_exactly_the_rules(cli_env: dict[str, str]) -> None:
    path = str(DATA / "udev-every-class.yaml")
    code, out, err = _cli("udev", "render", "-p", path, env=cli_env)
    assert code == 0 and out == render(_load(DATA / "udev-every-class.yaml"), None)
    code, out, _ = _cli("udev", "render", "-p", path, "-q", env=cli_env)
    assert code == 0 and out.startswith("# 65-tunectl.rules")
    code, out, _ = _cli("udev", "render", "-p", path, "--json", env=cli_env)
    doc = yaml.safe_load(out)
    assert code == 0 and doc["file"] == RULES_FILE and doc["rules"].startswith("# ") and doc["digest"].startswith("sha256:")


def test_cli_check_and_install_as_non_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          cli_env: dict[str, str]) -> None:
    path = str(DATA / "udev-every-class.yaml")
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), env=cli_env)
    assert code == 1 and "not installed" in out
    # What `udev install` writes: the profile's rules, keeping originals for the journal (capture).
    (tmp_path / RULES_FILE).write_text(render(_load(DATA / "udev-every-class.yaml"), None, capture=True))
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), "--json", env=cli_env)
    assert code == 0 and yaml.safe_load(out)["in_sync"] is True
    (tmp_path / RULES_FILE).write_text((tmp_path / RULES_FILE).read_text().replace('"4096"', '"2048"'))
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), env=cli_env)
    assert code == 1 and "differs" in out
    assert '+ENV{TUNECTL_QUEUE_READ_AHEAD_KB}=="4096", ATTR{queue/read_ahead_kb}="4096"' in out
    monkeypatch.setattr(udev_commands, "_euid", lambda: 1000)
    for action in (["install", "-p", path], ["remove"]):
        code, out, err = _cli("udev", *action, "--rules-dir", str(tmp_path), env=cli_env)
        assert code == 4 and "must run as root" in err
    code, out, _ = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--json", env=cli_env)
    assert code == 4 and yaml.safe_load(out)["ok"] is False


class _Recorder:
    def __init__(self, running: bool = True) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.running = running

    def __call__(self, argv, timeout=60, check=True, input_text=None):
        from tunectl.system.runner import Completed

        self.calls.append(tuple(argv))
        if tuple(argv[:3]) == ("udevadm", "control", "--ping"):
            return Completed(tuple(argv), 0 if self.running else 1, "", "")
        if tuple(argv) == ("udevadm", "--version"):
            return Completed(tuple(argv), 0, "252\n", "")
        return Completed(tuple(argv), 0, "", "")


def test_install_trigger_remove_with_a_recorded_udevadm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cli_env: dict[str, str]) -> None:
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rec = _Recorder()
    exe = tmp_path / "sbin" / "tunectl"  # udev install refuses an executable that does not exist (yet)
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    env = {**cli_env, "TUNECTL_EXECUTABLE": str(exe)}
    path = str(DATA / "udev-below.yaml")
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--trigger", env=env, run=rec)
    assert code == 0, err
    target = tmp_path / RULES_FILE
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert f"-p {DATA / 'udev-below.yaml'} --stack $kernel -q" in target.read_text()
    assert rec.calls == [("udevadm", "--version"), ("udevadm", "control", "--ping", "--timeout=5"),
                         ("udevadm", "control", "--reload"), udevadm.TRIGGER, udevadm.SETTLE,
                         udevadm.TRIGGER_STACKED, udevadm.SETTLE]
    trigger = " ".join(udevadm.TRIGGER)
    assert trigger == "udevadm trigger --action=change --subsystem-match=block --property-match=DEVTYPE=disk"
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), env=env, run=rec)
    assert code == 0 and "in sync" in out
    code, out, _ = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--json", env=env, run=rec)
    assert code == 0 and yaml.safe_load(out)["changed"] is False
    rec.calls.clear()
    code, out, _ = _cli("udev", "remove", "--rules-dir", str(tmp_path), env=env, run=rec)
    assert code == 0 and not target.exists() and ("udevadm", "control", "--reload") in rec.calls
    code, out, _ = _cli("udev", "remove", "--rules-dir", str(tmp_path), "--json", env=env, run=rec)
    assert code == 0 and yaml.safe_load(out)["removed"] is False


def test_install_without_udevd_and_foreign_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                cli_env: dict[str, str]) -> None:
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rec = _Recorder(running=False)
    path = str(DATA / "udev-every-class.yaml")
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), env=cli_env, run=rec)
    assert code == 0 and "not running" in err and (tmp_path / RULES_FILE).exists()
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--trigger", env=cli_env, run=rec)
    assert code == 3 and "no change events" in err
    assert not any(c[:2] == ("udevadm", "trigger") for c in rec.calls)
    code, _, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path / "missing"), env=cli_env, run=rec)
    assert code == 2 and "does not exist" in err
    (tmp_path / RULES_FILE).write_text('KERNEL=="sda", ATTR{queue/scheduler}="bfq"\n')
    code, _, err = _cli("udev", "remove", "--rules-dir", str(tmp_path), env=cli_env, run=rec)
    assert code == 2 and "not generated by tunectl" in err and (tmp_path / RULES_FILE).exists()


def test_nr_requests_wanted_as_before_a_switch(tmp_path_factory) -> None:
    """The switch to bfq resets nr_requests (to 256); the rules and apply both write the wanted 7 after it."""
    profile = _profile({"classes": {"ssd": {"scheduler": "bfq", "queue": {"nr_requests": 7}}}})
    dev = {"name": "sda", "offered": ["mq-deadline", "bfq"], "active": "mq-deadline", "rotational": "0", "removable": "0",
           "size": "10", "env": {}, "attrs": {}, "bus_path": "virtual"}
    by_rules, by_apply = _one_event_and_apply(tmp_path_factory, profile, dev)
    shown = queue_state(by_rules)
    assert shown["sda"]["queue/scheduler"].split() == ["[bfq]", "mq-deadline"] and shown["sda"]["queue/nr_requests"] == "7"
    assert queue_state(by_apply) == shown


def test_man_page_names_every_action_option_and_exit_code() -> None:
    import shutil
    import subprocess

    man = (ROOT / "man" / "tunectl-udev.8").read_text()
    for word in ("render", "install", "remove", "check", "\\-\\-rules\\-dir", "\\-\\-trigger", "TUNECTL_EXECUTABLE",
                 "65\\-tunectl.rules"):
        assert word in man, word
    codes = re.findall(r"^\.TP\n\.B (\d)$", man, re.MULTILINE)
    assert codes == ["0", "1", "2", "3", "4"]
    if shutil.which("groff"):
        done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(ROOT / "man" / "tunectl-udev.8")],
                              capture_output=True, text=True)
        assert done.returncode == 0 and done.stderr == ""


def test_tunectl_executable_lookup(tmp_path: Path) -> None:
    assert udev_commands.tunectl_executable({"TUNECTL_EXECUTABLE": "/opt/t/bin/tunectl"}) == "/opt/t/bin/tunectl"
    exe = tmp_path / "tunectl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert udev_commands.tunectl_executable({"PATH": str(tmp_path)}) == str(exe)


def test_cli_check_json_without_a_tunectl_digest_follows_its_schema(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Not installed, and installed by hand without tunectl's header: no digest to show, `installed_digest` null
    (run_cli validates each document against its schema; version 1's said a string)."""
    path = str(DATA / "udev-every-class.yaml")
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), "--json", env=cli_env)
    doc = yaml.safe_load(out)
    assert code == 1 and doc["installed"] is False and doc["installed_digest"] is None
    (tmp_path / RULES_FILE).write_text('ACTION=="add", ATTR{queue/read_ahead_kb}="512"\n')
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), "--json", env=cli_env)
    doc = yaml.safe_load(out)
    assert code == 1 and doc["installed"] is True and doc["installed_digest"] is None and doc["diff"]
