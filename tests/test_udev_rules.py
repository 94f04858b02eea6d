"""udev rule rendering, pure: golden files, lint, injection, glob and size grammar, properties.

Golden files live in tests/golden/udev/<profile>.rules. After an intended change
to the renderer or a profile, regenerate them and review the diff:

    UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_udev_rules.py -k golden
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import fnmatch
import io
import os
import re
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tunectl.attributes import IOSCHED, LIMIT_ATTRS, QUEUE, SCHEDULERS, nearest_in_range
from tunectl.cli import main
from tunectl.profile.checks import check_document, glob_problem
from tunectl.profile.reader import parse_yaml
from tunectl.profile.resolve import Profile, load_profile, normalise
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb
from tunectl.tuning.device import CLASSES, DM_TYPES, OPT_IN_CLASSES, classify
from tunectl.tuning.discover import discover
from tunectl.tuning.plan import CHANGE, make_plan
from tunectl.udev import install as udev_commands
from tunectl.udev.lint import lint, parse_rule
from tunectl.udev.match import int_globs, range_globs
from tunectl.udev.render import (
    CLASS_MATCH,
    RULES_FILE,
    RenderError,
    render,
    render_rules,
)

ROOT = Path(__file__).resolve().parent.parent
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
    assert runs == ['ENV{TUNECTL_BELOW}=="1", TEST=="slaves/*/dev", RUN+="/usr/sbin/tunectl apply -p '
                    '/etc/tunectl/profiles/udev-below.yaml --stack $kernel -q"']
    assert lint(rendered.text) == []


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
# What a profile could smuggle into a rule is refused by the profile checks (tests/test_profile_errors.py);
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
    from tunectl.tuning.discover import normalise_wwn
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

_GLOB = st.lists(st.one_of(st.sampled_from(list("ab1")), st.just("*"), st.just("?"), st.just("[ab]"), st.just("[!1]")),
                 min_size=1, max_size=4).map("".join)
_KNOBS_OF = {s: sorted(IOSCHED[s]) for s in SCHEDULERS}


@st.composite
def _number_or_range(draw, lo: int, hi: int):
    """A number or a range; bounds often near what FakeKernel shows (7, 50, 64, 128) to land on each side."""
    near = st.sampled_from([v for v in (0, 6, 7, 8, 49, 50, 51, 63, 64, 65, 127, 128, 129) if lo <= v <= hi] or [lo])
    a, b = sorted(draw(st.one_of(near, st.integers(lo, hi))) for _ in range(2))
    return draw(st.sampled_from([a, {"min": a}, {"max": b}, {"min": a, "max": b}]))


@st.composite
def _settings(draw, with_below: bool = True) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        prefs = draw(st.lists(st.sampled_from(SCHEDULERS), min_size=1, max_size=3, unique=True))
        out["scheduler"] = prefs if len(prefs) > 1 or draw(st.booleans()) else prefs[0]
        knob_pool = sorted({k for s in prefs for k in _KNOBS_OF[s]})
    else:
        knob_pool = sorted({k for s in SCHEDULERS for k in _KNOBS_OF[s]})
    if knob_pool and draw(st.booleans()):
        knobs = draw(st.lists(st.sampled_from(knob_pool), max_size=3, unique=True))
        spec = {k: next(IOSCHED[s][k] for s in SCHEDULERS if k in IOSCHED[s]) for k in knobs}
        out["iosched"] = {k: draw(_number_or_range(spec[k].minimum, min(spec[k].maximum, 10**6))) for k in knobs}
    if draw(st.booleans()):
        out["read_ahead_kb"] = draw(st.one_of(_number_or_range(0, 65536), st.sampled_from(["4 MiB", "128 KiB", "1 MiB"]),
                                              st.just({"min": "64 KiB", "max": "1 MiB"})))
    if draw(st.booleans()):
        attrs = draw(st.lists(st.sampled_from(sorted(a for a in QUEUE if a != "read_ahead_kb")), max_size=3, unique=True))
        queue = {}
        for a in attrs:
            spec = QUEUE[a]
            queue[a] = draw(st.sampled_from(spec.choices)) if spec.choices else draw(
                _number_or_range(spec.minimum, min(spec.maximum, 10**6)))
        out["queue"] = queue
    if with_below and draw(st.integers(0, 5)) == 0:
        out["below"] = draw(_settings(with_below=False))
    return out


@st.composite
def _match(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(["kernel", "model", "vendor", "serial", "wwn", "bus", "class", "dm_type",
                                          "rotational", "removable", "size"]), min_size=1, max_size=3, unique=True))
    out: dict = {}
    for key in keys:
        if key in ("kernel", "model", "vendor", "serial"):
            out[key] = draw(_GLOB)
        elif key == "wwn":
            out[key] = draw(st.one_of(_GLOB, _GLOB.map(lambda g: "0x" + g)))
        elif key == "bus":
            out[key] = draw(st.one_of(_GLOB, st.lists(st.sampled_from(["ata", "scsi", "usb", "nvme", "virtio", "a*"]),
                                                      min_size=1, max_size=2, unique=True)))
        elif key == "class":
            out[key] = draw(st.one_of(st.sampled_from(CLASSES), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3,
                                                                        unique=True)))
        elif key == "dm_type":
            out[key] = draw(st.lists(st.sampled_from(DM_TYPES), min_size=1, max_size=2, unique=True))
        elif key in ("rotational", "removable"):
            out[key] = draw(st.booleans())
        else:
            size = {}
            if draw(st.booleans()):
                size["min"] = draw(st.integers(0, 5000))
            if draw(st.booleans()) or not size:
                size["max"] = draw(st.integers(0, 5000))
            out[key] = size
    return out


@st.composite
def _profile_data(draw) -> dict:
    data: dict = {"name": "random"}
    classes = draw(st.lists(st.sampled_from(CLASSES), max_size=5, unique=True))
    data["classes"] = {c: draw(_settings()) for c in classes}
    data["devices"] = [dict(draw(_settings()), match=draw(_match())) for _ in range(draw(st.integers(0, 4)))]
    return data


def _valid(data: dict) -> Profile:
    doc, diags = parse_yaml(yaml.safe_dump(data, sort_keys=False), "random.yaml")
    diags = diags or check_document(doc)
    assume(not [d for d in diags if d.severity == "error"])
    return Profile(data["name"], "", ["/etc/tunectl/profiles/random.yaml"], normalise(doc.data), {})


def _shuffled(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_profile_data(), st.randoms(use_true_random=False))
def test_random_profiles_render_lint_clean_and_independent_of_key_order(data: dict, rnd) -> None:
    profile = _valid(data)
    text = render(profile, TUNECTL)
    assert lint(text) == []
    other = Profile(profile.name, "", profile.files, _shuffled(copy.deepcopy(profile.data), rnd), {})
    assert render(other, TUNECTL) == text


# --- equivalence with plan, on a fake sysfs, through a small udev interpreter ------------------------------------


# The kernel may reset nr_requests on a scheduler switch. The rules write nr_requests after the switch
# regardless; plan.py compares it with the value from before the switch and may skip it (see
# test_nr_requests_wanted_as_before_a_switch), so the random equivalence property leaves this out.
RESET_NR_REQUESTS_ON_SWITCH = False


class FakeKernel:
    """Scheduler switches reset the knobs (and nr_requests); a same-name write changes nothing; unknown
    attributes fail; writing a queue limit, even unchanged, recomputes read_ahead_kb (kernel 6.x)."""

    # Numbers, so that ranges can be compared: the knobs a device starts with, the defaults a switch sets,
    # what nr_requests is reset to, what a queue-limit write recomputes read-ahead to.
    INITIAL, DEFAULT, RESET, RECOMPUTED = "7", "50", "64", "128"

    def __init__(self) -> None:
        self.state: dict[str, dict] = {}

    def add(self, name: str, offered: list[str], active: str | None, queue: dict[str, str]) -> None:
        self.state[name] = {"offered": offered, "scheduler": active,
                            "knobs": {k: self.INITIAL for k in IOSCHED.get(active or "", {})}, "queue": dict(queue)}

    def read(self, name: str, attr: str) -> str | None:
        """What the kernel shows now, for the attributes it models; None: not modelled (read the file)."""
        dev = self.state.get(name)
        if dev is None:
            return None
        if attr.startswith("queue/iosched/"):
            return dev["knobs"].get(attr.rsplit("/", 1)[1], "")
        return dev["queue"].get(attr)

    def write(self, name: str, attr: str, value: str) -> None:
        dev = self.state[name]
        if attr == "queue/scheduler":
            if value in dev["offered"] and value != dev["scheduler"] and dev["offered"] != ["none"]:
                dev["scheduler"] = value
                dev["knobs"] = {k: self.DEFAULT for k in IOSCHED.get(value, {})}
                if RESET_NR_REQUESTS_ON_SWITCH:
                    dev["queue"]["queue/nr_requests"] = self.RESET
        elif attr.startswith("queue/iosched/"):
            knob = attr.rsplit("/", 1)[1]
            if knob in dev["knobs"]:
                dev["knobs"][knob] = str(value)
        elif attr in dev["queue"]:  # an attribute the device lacks: ENOENT, as udev logs it
            dev["queue"][attr] = str(value)
            if attr.split("/", 1)[1] in LIMIT_ATTRS and "queue/read_ahead_kb" in dev["queue"]:
                dev["queue"]["queue/read_ahead_kb"] = self.RECOMPUTED


class MiniUdev:
    """The subset of udev 252 rule semantics the rendered rules use, as observed on the real daemon."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.rules = []
        for line in text.splitlines():
            if line and not line.startswith("#"):
                tokens, error = parse_rule(line)
                assert error is None, line
                self.rules.append(tokens)

    def event(self, name: str, devpath: str, env: dict, kernel: FakeKernel, action: str = "change") -> dict:
        env = dict(env, DEVTYPE="disk")
        base = self.root / "block" / name
        cache: dict = {}

        def attr(path: str) -> str | None:
            if path not in cache:  # read once per event, never refreshed (udev caches it; its own writes too)
                f = base / path
                live = kernel.read(name, path)
                cache[path] = live if live is not None and live != "" else f.read_text().rstrip() if f.is_file() else None
            return cache[path]

        def test(path: str) -> bool:
            if "/*/" in path:
                head, tail = path.split("/*/", 1)
                d = base / head
                return d.is_dir() and any((d / e / tail).exists() for e in os.listdir(d))
            return (base / path).exists()

        def value(t) -> str | None:
            return {"SUBSYSTEM": "block", "ACTION": action, "KERNEL": name, "DEVPATH": devpath}.get(t.key) if t.key not in (
                "ENV", "ATTR") else (env.get(t.attr, "") if t.key == "ENV" else attr(t.attr))

        i, goto = 0, None
        while i < len(self.rules):
            tokens = self.rules[i]
            i += 1
            if goto is not None:
                if any(t.key == "LABEL" and t.value == goto for t in tokens):
                    goto = None
                continue
            ok = True
            for t in (t for t in tokens if t.op in ("==", "!=")):
                if t.key == "TEST":
                    hit = test(t.value)
                else:
                    have = value(t)
                    if have is None:  # an absent ATTR fails == and != alike
                        ok = False
                        break
                    hit = any(fnmatchcase(have, alt) for alt in t.value.split("|"))
                if hit != (t.op == "=="):
                    ok = False
                    break
            if not ok:
                continue
            for t in (t for t in tokens if t.op not in ("==", "!=")):
                if t.key == "ENV":
                    env[t.attr] = t.value
                elif t.key == "ATTR":
                    kernel.write(name, t.attr, t.value)
                elif t.key == "GOTO":
                    goto = t.value
                elif t.key == "RUN":
                    env.setdefault("RUN", t.value)
        return env


_DEVICE_NAMES = ["sda", "sdb", "vda", "nvme0n1", "mmcblk0", "dm-0", "md0", "loop0", "zram0"]
_VALUE = st.text(alphabet="ab1", max_size=3)
_WWN = st.one_of(_VALUE, _VALUE.map(lambda s: "0x" + s))


@st.composite
def _fake_device(draw, index: int) -> dict:
    name = draw(st.sampled_from(_DEVICE_NAMES))
    bio = name.startswith(("dm-", "md", "zram"))
    offered = ["none"] if bio else draw(st.lists(st.sampled_from(SCHEDULERS), min_size=1, max_size=4, unique=True))
    dev = {
        "name": f"{name}" if index == 0 else f"{name}x{index}" if not name.startswith("nvme") else f"nvme{index}n1",
        "offered": offered,
        "active": None if bio else draw(st.sampled_from(offered)),
        "rotational": draw(st.sampled_from(["0", "1", None])),
        "removable": draw(st.sampled_from(["0", "1", None])),
        "size": draw(st.sampled_from([None, "0", "1", "2", "7", "9", "10", "1999", "2000", "2001"])),
        "env": {k: v for k, v in {
            "ID_MODEL": draw(st.one_of(st.none(), _VALUE)), "ID_VENDOR": draw(st.one_of(st.none(), _VALUE)),
            "ID_SERIAL_SHORT": draw(st.one_of(st.none(), _VALUE)), "ID_WWN": draw(st.one_of(st.none(), _WWN)),
            "ID_BUS": draw(st.one_of(st.none(), st.sampled_from(["ata", "usb", "scsi", "b"]))),
        }.items() if v},
        "attrs": {k: v for k, v in {
            "device/model": draw(st.one_of(st.none(), _VALUE.map(lambda s: s + "  "))),
            "device/vendor": draw(st.one_of(st.none(), _VALUE)),
            "device/serial": draw(st.one_of(st.none(), _VALUE)), "serial": draw(st.one_of(st.none(), _VALUE)),
            "wwid": draw(st.one_of(st.none(), _WWN, _VALUE.map(lambda s: "naa." + s.upper()))),
            "device/wwid": draw(st.one_of(st.none(), _VALUE.map(lambda s: "naa." + s))),
        }.items() if v is not None},
        "bus_path": draw(st.sampled_from(["virtual", "pci0000:00/0000:00:01.0/nvme/nvme9", "pci0000:00/usb1/1-1",
                                          "pci0000:00/ata1/host0", "platform/x"])),
    }
    if dev["env"].get("ID_MODEL") and draw(st.booleans()):
        dev["env"]["ID_MODEL_ENC"] = dev["env"]["ID_MODEL"]  # no blanks here: ID_MODEL is the decoded model
    if name.startswith("dm-"):
        dev["env"]["DM_UUID"] = draw(st.sampled_from(["CRYPT-VERITY-x", "CRYPT-LUKS2-y", "LVM-abc", "mpath-3600", "other"]))
    return dev


def _build_tree(root: Path, devices: list[dict], kernel: FakeKernel) -> dict[str, tuple[str, dict]]:
    events = {}
    for n, dev in enumerate(devices):
        name = dev["name"]
        devpath = f"/devices/{dev['bus_path']}/block/{name}"
        real = root / devpath.lstrip("/")
        (real / "queue" / "iosched").mkdir(parents=True)
        (root / "block").mkdir(exist_ok=True)
        (root / "block" / name).symlink_to(real)
        (real / "dev").write_text(f"250:{n}\n")
        offered = dev["offered"]
        if name.startswith("zram"):
            pass  # no scheduler file at all, as on this kernel
        elif offered == ["none"]:
            (real / "queue" / "scheduler").write_text("none\n")
        else:
            (real / "queue" / "scheduler").write_text(" ".join(f"[{s}]" if s == dev["active"] else s for s in offered) + " \n")
            for knob in IOSCHED.get(dev["active"], {}):
                (real / "queue" / "iosched" / knob).write_text("initial\n")
        queue = {f"queue/{a}": "write back" if spec.choices else "7" for a, spec in QUEUE.items() if a != "rotational"}
        if dev["rotational"] is not None:
            queue["queue/rotational"] = dev["rotational"]
        for attr, value in queue.items():
            (real / attr).write_text(value + "\n")
        if dev["removable"] is not None:
            (real / "removable").write_text(dev["removable"] + "\n")
        if dev["size"] is not None:
            (real / "size").write_text(dev["size"] + "\n")
        for attr, value in dev["attrs"].items():
            (real / attr).parent.mkdir(parents=True, exist_ok=True)
            (real / attr).write_text(value + "\n")
        if name.startswith("dm-"):
            (real / "dm").mkdir()
            (real / "dm" / "uuid").write_text(dev["env"]["DM_UUID"] + "\n")
        if name.startswith("md"):
            (real / "md").mkdir()
            (real / "md" / "array_state").write_text("clean\n")
        if name.startswith("loop"):
            (real / "loop").mkdir()
            (real / "loop" / "backing_file").write_text(f"/srv/{name}.img\n")
        (real / "slaves").mkdir()
        db = root / ".udev-data"
        db.mkdir(exist_ok=True)
        (db / f"b250:{n}").write_text("".join(f"E:{k}={v}\n" for k, v in dev["env"].items()))
        kernel.add(name, offered, dev["active"], queue)
        events[name] = (devpath, dev["env"])
    return events


def _apply_plan(root: Path, profile: Profile, kernel: FakeKernel, modular: list[str] | None = None) -> None:
    devices = discover(Sysfs(root), UdevDb(root / ".udev-data"), modular=modular or ())
    for s in make_plan(devices, profile):
        if s.status != CHANGE:
            continue
        value = s.after
        if s.bounds is not None:  # as apply does: decided on the value the kernel shows now
            live = kernel.read(s.device, f"queue/{s.attribute}")
            live = int(live) if live and live.lstrip("-").isdigit() else None
            nearest = nearest_in_range(s.bounds, live)
            if nearest is not None and nearest == live:
                continue
            value = nearest if nearest is not None else s.bounds.get("min", s.bounds.get("max"))
        kernel.write(s.device, f"queue/{s.attribute}", value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                                  HealthCheck.function_scoped_fixture])
@given(_profile_data(), st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.data())
def test_udev_event_reaches_the_state_apply_reaches(tmp_path_factory, data: dict, seeds: list, draw) -> None:
    """For random profiles and fake devices: the writes the rules make == the writes of tunectl's plan."""
    profile = _valid(data)
    assume(not any("approximate" in n for n in render_rules(profile, TUNECTL).notes))  # those are reported, not exact
    named = set(profile.classes) | {c for e in profile.devices for c in e["match"].get("class", [])}
    devices = [draw.draw(_fake_device(i)) for i in range(len(seeds))]
    # plan.py does not (yet) skip loop/zram when the profile does not name them (SPEC §2); the rules do.
    devices = [d for d in devices if classify(d["name"], d["rotational"] == "1") not in set(OPT_IN_CLASSES) - named]
    assume(devices and len({d["name"] for d in devices}) == len(devices))
    rules_root, apply_root = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("apply")
    by_rules, by_apply = FakeKernel(), FakeKernel()
    events = _build_tree(rules_root, devices, by_rules)
    _build_tree(apply_root, devices, by_apply)
    udev = MiniUdev(rules_root, render(profile, TUNECTL))
    for name, (devpath, env) in events.items():
        udev.event(name, devpath, env, by_rules)
    _apply_plan(apply_root, profile, by_apply)
    assert by_rules.state == by_apply.state


# --- CLI ------------------------------------------------------------------------------------------------------


def _cli(*argv: str, env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=env or {"PATH": "/usr/bin:/bin", "TUNECTL_STATE_DIR": "/nonexistent"}, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_render_prints_exactly_the_rules() -> None:
    path = str(DATA / "udev-every-class.yaml")
    code, out, err = _cli("udev", "render", "-p", path)
    assert code == 0 and out == render(_load(DATA / "udev-every-class.yaml"), None)
    code, out, _ = _cli("udev", "render", "-p", path, "-q")
    assert code == 0 and out.startswith("# 65-tunectl.rules")
    code, out, _ = _cli("udev", "render", "-p", path, "--json")
    doc = yaml.safe_load(out)
    assert code == 0 and doc["file"] == RULES_FILE and doc["rules"].startswith("# ") and doc["digest"].startswith("sha256:")


def test_cli_check_and_install_as_non_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(DATA / "udev-every-class.yaml")
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path))
    assert code == 1 and "not installed" in out
    # What `udev install` writes: the profile's rules, keeping originals for the journal (capture).
    (tmp_path / RULES_FILE).write_text(render(_load(DATA / "udev-every-class.yaml"), None, capture=True))
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), "--json")
    assert code == 0 and yaml.safe_load(out)["in_sync"] is True
    (tmp_path / RULES_FILE).write_text((tmp_path / RULES_FILE).read_text().replace('"4096"', '"2048"'))
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path))
    assert code == 1 and "differs" in out
    assert '+ENV{TUNECTL_QUEUE_READ_AHEAD_KB}=="4096", ATTR{queue/read_ahead_kb}="4096"' in out
    monkeypatch.setattr(udev_commands, "_euid", lambda: 1000)
    for action in (["install", "-p", path], ["remove"]):
        code, out, err = _cli("udev", *action, "--rules-dir", str(tmp_path))
        assert code == 4 and "must run as root" in err
    code, out, _ = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--json")
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


def test_install_trigger_remove_with_a_recorded_udevadm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rec = _Recorder()
    monkeypatch.setattr(udev_commands, "run_command", rec)
    env = {"PATH": "/usr/bin:/bin", "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_EXECUTABLE": TUNECTL}
    path = str(DATA / "udev-below.yaml")
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--trigger", env=env)
    assert code == 0, err
    target = tmp_path / RULES_FILE
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert f"-p {DATA / 'udev-below.yaml'} --stack $kernel -q" in target.read_text()
    assert rec.calls == [("udevadm", "--version"), ("udevadm", "control", "--ping", "--timeout=5"),
                         ("udevadm", "control", "--reload"), udev_commands.TRIGGER, udev_commands.SETTLE,
                         udev_commands.TRIGGER_STACKED, udev_commands.SETTLE]
    trigger = " ".join(udev_commands.TRIGGER)
    assert trigger == "udevadm trigger --action=change --subsystem-match=block --property-match=DEVTYPE=disk"
    code, out, _ = _cli("udev", "check", "-p", path, "--rules-dir", str(tmp_path), env=env)
    assert code == 0 and "in sync" in out
    code, out, _ = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--json", env=env)
    assert code == 0 and yaml.safe_load(out)["changed"] is False
    rec.calls.clear()
    code, out, _ = _cli("udev", "remove", "--rules-dir", str(tmp_path), env=env)
    assert code == 0 and not target.exists() and ("udevadm", "control", "--reload") in rec.calls
    code, out, _ = _cli("udev", "remove", "--rules-dir", str(tmp_path), "--json", env=env)
    assert code == 0 and yaml.safe_load(out)["removed"] is False


def test_install_without_udevd_and_foreign_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rec = _Recorder(running=False)
    monkeypatch.setattr(udev_commands, "run_command", rec)
    path = str(DATA / "udev-every-class.yaml")
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path))
    assert code == 0 and "not running" in err and (tmp_path / RULES_FILE).exists()
    code, out, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path), "--trigger")
    assert code == 3 and "no change events" in err
    assert not any(c[:2] == ("udevadm", "trigger") for c in rec.calls)
    code, _, err = _cli("udev", "install", "-p", path, "--rules-dir", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in err
    (tmp_path / RULES_FILE).write_text('KERNEL=="sda", ATTR{queue/scheduler}="bfq"\n')
    code, _, err = _cli("udev", "remove", "--rules-dir", str(tmp_path))
    assert code == 2 and "not generated by tunectl" in err and (tmp_path / RULES_FILE).exists()


def test_nr_requests_wanted_as_before_a_switch(tmp_path_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "RESET_NR_REQUESTS_ON_SWITCH", True)
    profile = _profile({"classes": {"ssd": {"scheduler": "bfq", "queue": {"nr_requests": 7}}}})
    dev = {"name": "sda", "offered": ["mq-deadline", "bfq"], "active": "mq-deadline", "rotational": "0", "removable": "0",
           "size": "10", "env": {}, "attrs": {}, "bus_path": "virtual"}
    by_rules, by_apply = FakeKernel(), FakeKernel()
    rules_root, apply_root = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("apply")
    events = _build_tree(rules_root, [dev], by_rules)
    _build_tree(apply_root, [dev], by_apply)
    MiniUdev(rules_root, render(profile, TUNECTL)).event("sda", *events["sda"], by_rules)
    _apply_plan(apply_root, profile, by_apply)
    assert by_rules.state["sda"]["queue"]["queue/nr_requests"] == "7"
    assert by_apply.state == by_rules.state


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
