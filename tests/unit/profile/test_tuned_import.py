"""tuned profile import: Debian's shipped profiles, and small synthetic tuned.conf trees."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from tests.tuned_profiles import tuned_profile_dir
from tunectl.attributes import IOSCHED, QUEUE, SCHEDULERS
from tunectl.errors import UsageError
from tunectl.profile.checks import check_document
from tunectl.profile.tuned_import import DISK_PLUGIN_CLASSES, TunedImport, render_yaml
from tunectl.profile.tuned_import import import_tuned as tunectl_import_tuned
from tunectl.profile.yaml_events import parse_yaml

TUNED_DIR = str(tuned_profile_dir())
SHIPPED = sorted(
    n for n in (os.listdir(TUNED_DIR) if os.path.isdir(TUNED_DIR) else []) if os.path.isfile(f"{TUNED_DIR}/{n}/tuned.conf")
)
needs_tuned = pytest.mark.skipif(
    not SHIPPED, reason=f"{TUNED_DIR} has no tuned profiles (scripts/bootstrap --test unpacks Debian's tuned)"
)


def import_tuned(ref: str, search_dirs: Sequence[str] = (TUNED_DIR,)) -> TunedImport:
    """The real import, looking names up in the tuned under test unless the test names its own dirs."""
    return tunectl_import_tuned(ref, search_dirs)
CLASSES = {"dm", "md", "loop", "zram", "nvme", "mmc", "virtio", "rotational", "ssd"}


def write(root: Path, name: str, text: str) -> Path:
    path = root / name / "tuned.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def imported(root: Path, name: str) -> dict:
    return import_tuned(name, search_dirs=[str(root)]).profile


def assert_vocabulary(settings: dict) -> None:
    chosen = settings.get("scheduler")
    chosen = [chosen] if isinstance(chosen, str) else chosen
    for name in chosen or []:
        assert name in SCHEDULERS
    if "read_ahead_kb" in settings:
        ra = settings["read_ahead_kb"]
        bounds = list(ra.values()) if isinstance(ra, dict) else [ra]  # tuned's > and < become {min} and {max}
        assert bounds and all(0 <= b <= 65536 for b in bounds)
    for attr in settings.get("queue", {}):
        assert attr in QUEUE and attr != "read_ahead_kb"
    for knob in settings.get("iosched", {}):
        owners = {s for s, knobs in IOSCHED.items() if knob in knobs}
        assert owners and (chosen is None or owners & set(chosen))
    assert set(settings) <= {"match", "scheduler", "read_ahead_kb", "queue", "iosched"}


def check_profile(profile: dict) -> None:
    assert set(profile) <= {"name", "description", "classes", "devices"}
    for cls, settings in profile.get("classes", {}).items():
        assert cls in CLASSES
        assert_vocabulary(settings)
    for entry in profile.get("devices", []):
        assert set(entry["match"]) == {"kernel"}
        assert_vocabulary(entry)


# -- Debian's tuned profiles ---------------------------------------------------------


@needs_tuned
@pytest.mark.parametrize("name", SHIPPED or ["none"])
def test_every_shipped_profile_converts_and_round_trips(name: str) -> None:
    result = import_tuned(name)
    check_profile(result.profile)
    text = render_yaml(result)
    assert yaml.safe_load(text) == result.profile
    doc, diags = parse_yaml(text, f"{name}.yaml")
    assert [str(d) for d in diags + check_document(doc) if d.severity == "error"] == []  # the real validator
    assert text.startswith(f"# tunectl profile imported from tuned profile '{name}'")
    assert f"{TUNED_DIR}/{name}/tuned.conf" in text
    for item in result.unconverted:
        assert item.startswith("[")


# Read by hand from /usr/lib/tuned/throughput-performance/tuned.conf (tuned 2.20):
# the only [disk] option is readahead=>4096 ("raise to 4096, never lower": a floor); no elevator, no [sysfs] block lines.
THROUGHPUT_CLASSES = {c: {"read_ahead_kb": {"min": 4096}} for c in ("rotational", "ssd", "nvme", "virtio")}


@needs_tuned
def test_throughput_performance_by_hand() -> None:
    result = import_tuned("throughput-performance")
    assert result.profile["classes"] == THROUGHPUT_CLASSES
    assert "devices" not in result.profile
    assert any("readahead=>4096" in n and "only raises" in n and "{min: 4096} does the same" in n for n in result.notes)
    assert "[cpu] governor=performance: not a block-device setting" in result.unconverted
    assert "[sysctl] vm.dirty_ratio=40: not a block-device setting" in result.unconverted
    assert result.sources == [f"{TUNED_DIR}/throughput-performance/tuned.conf"]


@needs_tuned
def test_virtual_guest_by_hand() -> None:
    # virtual-guest has no [disk] of its own: it inherits throughput-performance's and
    # overrides only sysctls (vm.dirty_ratio 40 -> 30, vm.swappiness 10 -> 30).
    result = import_tuned("virtual-guest")
    assert result.profile["classes"] == THROUGHPUT_CLASSES
    assert result.profile["description"].startswith("Optimize for running inside a virtual guest")
    assert result.sources == [f"{TUNED_DIR}/throughput-performance/tuned.conf", f"{TUNED_DIR}/virtual-guest/tuned.conf"]
    assert "[sysctl] vm.dirty_ratio=30: not a block-device setting" in result.unconverted
    assert "[sysctl] vm.swappiness=30: not a block-device setting" in result.unconverted
    assert not any("vm.dirty_ratio=40" in u for u in result.unconverted)


@needs_tuned
def test_spectrumscale_disk_units_lose_to_the_inherited_disk_unit() -> None:
    # [disk-sas]/[disk-nvme] come after throughput-performance's [disk] (devices=*), and
    # tuned gives each disk to one disk-plugin instance only.
    if "spectrumscale-ece" not in SHIPPED:
        pytest.skip("spectrumscale-ece not shipped by this tuned")
    result = import_tuned("spectrumscale-ece")
    assert result.profile["classes"] == THROUGHPUT_CLASSES
    assert "devices" not in result.profile
    assert any(u.startswith("[disk-sas] elevator=mq-deadline: tuned gives every disk to [disk]") for u in result.unconverted)


# -- synthetic profiles ------------------------------------------------------------


def test_include_chain_child_wins_per_option(tmp_path: Path) -> None:
    write(tmp_path, "base", "[main]\nsummary=Base\n[disk]\nelevator=deadline\nreadahead=1024\n[sysctl]\nvm.x=1\n")
    write(tmp_path, "mid", "[main]\ninclude=base\n[disk]\nreadahead=2048\n")
    write(tmp_path, "top", "[main]\nsummary=Top\ninclude=mid\n[sysctl]\nvm.x=2\n")
    result = import_tuned("top", search_dirs=[str(tmp_path)])
    assert result.profile["description"] == "Top (imported from tuned)"
    for cls in DISK_PLUGIN_CLASSES:
        assert result.profile["classes"][cls] == {"scheduler": "mq-deadline", "read_ahead_kb": 2048}
    assert [Path(s).parent.name for s in result.sources] == ["base", "mid", "top"]
    assert "[sysctl] vm.x=2: not a block-device setting" in result.unconverted
    assert any("legacy scheduler deadline mapped to mq-deadline" in n for n in result.notes)


def test_multiple_includes_later_wins(tmp_path: Path) -> None:
    write(tmp_path, "a", "[disk]\nreadahead=100\nelevator=bfq\n")
    write(tmp_path, "b", "[disk]\nreadahead=200\n")
    write(tmp_path, "c", "[main]\ninclude=a, b\n")
    assert imported(tmp_path, "c")["classes"]["ssd"] == {"read_ahead_kb": 200, "scheduler": "bfq"}


def test_include_cycle_is_an_error_with_the_chain(tmp_path: Path) -> None:
    write(tmp_path, "a", "[main]\ninclude=b\n")
    write(tmp_path, "b", "[main]\ninclude=c\n")
    write(tmp_path, "c", "[main]\ninclude=a\n")
    with pytest.raises(UsageError, match="a -> b -> c -> a"):
        import_tuned("a", search_dirs=[str(tmp_path)])


def test_same_name_include_extends_the_next_directory(tmp_path: Path) -> None:
    # /etc/tuned/foo with include=foo is how tuned users extend the system foo.
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    write(lib, "foo", "[disk]\nreadahead=512\nelevator=bfq\n")
    write(etc, "foo", "[main]\ninclude=foo\n[disk]\nreadahead=1024\n")
    result = import_tuned("foo", search_dirs=[str(etc), str(lib)])
    assert result.profile["classes"]["rotational"] == {"read_ahead_kb": 1024, "scheduler": "bfq"}


def test_newer_profiles_subdirectory_layout(tmp_path: Path) -> None:
    write(tmp_path / "profiles", "new", "[disk]\nreadahead=64\n")
    assert imported(tmp_path, "new")["classes"]["nvme"] == {"read_ahead_kb": 64}


def test_missing_profile_and_missing_include(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="tuned profile 'nope' not found"):
        import_tuned("nope", search_dirs=[str(tmp_path)])
    write(tmp_path, "x", "[main]\ninclude=gone\n")
    with pytest.raises(UsageError, match=r"'gone' not found \(include chain: x -> gone\)"):
        import_tuned("x", search_dirs=[str(tmp_path)])
    write(tmp_path, "y", "[main]\ninclude=-gone\n[disk]\nreadahead=8\n")
    assert imported(tmp_path, "y")["classes"]["ssd"] == {"read_ahead_kb": 8}


def test_path_refs_and_unreadable_files(tmp_path: Path) -> None:
    path = write(tmp_path, "byPath", "[disk]\nreadahead=32\n")
    assert import_tuned(str(path)).name == "byPath"
    assert import_tuned(str(path.parent)).profile["classes"]["ssd"] == {"read_ahead_kb": 32}
    with pytest.raises(UsageError, match="not found"):
        import_tuned(str(tmp_path / "empty-dir") + "/")
    bad = tmp_path / "bad.conf"
    bad.write_text("readahead=4\n")
    with pytest.raises(UsageError, match="cannot parse"):
        import_tuned(str(bad))
    bad.write_bytes(b"[disk]\nreadahead=\xff\n")
    with pytest.raises(UsageError, match="cannot read"):
        import_tuned(str(bad))


@pytest.mark.parametrize(("text", "message", "hint"), [
    (b"\xff\xfe[disk]\n", "cannot read tuned profile {path}: not UTF-8 text (byte 0xff at offset 0)",
     "tuned reads its files as UTF-8: fix or convert that byte (iconv -f LATIN1 -t UTF-8)"),
    (b"[disk\nreadahead=1\n", "cannot parse tuned profile {path}: line 1: '[disk' comes before any [section] header",
     "tuned.conf must be INI: [section] then key=value"),
    (b"[disk]\nreadahead=1\n=x\n=y\n", "cannot parse tuned profile {path}: line 3: '=x' is neither key=value nor a "
     "[section] header (and 1 more such line(s))", "tuned.conf must be INI: [section] then key=value"),
])
def test_a_tuned_file_that_cannot_be_read_says_what_and_where_on_one_line(tmp_path: Path, text: bytes, message: str,
                                                                          hint: str) -> None:
    # A Latin-1 byte said "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte" with the hint
    # "check the path and its permissions"; a broken header printed configparser's text, its line breaks as \n.
    path = tmp_path / "p" / "tuned.conf"
    path.parent.mkdir()
    path.write_bytes(text)
    with pytest.raises(UsageError) as e:
        import_tuned(str(path))
    assert e.value.message == message.format(path=path) and e.value.hint == hint


def test_a_tuned_file_past_the_size_cap_is_refused_not_cut(tmp_path: Path) -> None:
    """The read stops one byte past MAX_TUNED_BYTES; its first 4 MiB were taken as the whole file, so a value
    the cut fell in was imported short (readahead=40960 as 40, exit 0) and every line after it was lost."""
    from tunectl.profile.tuned_reader import MAX_TUNED_BYTES

    head, tail = "[main]\nsummary=big\n", "[disk]\nreadahead=40960\n"
    pad = MAX_TUNED_BYTES + 1 - len(head) - len("[disk]\nreadahead=40")  # the cut falls after "40"
    path = write(tmp_path, "big", head + "#" * (pad - 1) + "\n" + tail)
    with pytest.raises(UsageError) as e:
        imported(tmp_path, "big")
    assert e.value.message == f"cannot read tuned profile {path}: larger than {MAX_TUNED_BYTES} bytes, not a tuned " \
                              "profile's file"
    assert "tuned.conf" in e.value.hint
    write(tmp_path, "fits", head + "#" * (pad - 3) + "\n" + tail[:-len("960\n")] + "\n")  # MAX_TUNED_BYTES exactly
    assert imported(tmp_path, "fits")["classes"]["ssd"]["read_ahead_kb"] == 40


def test_variables_and_variable_files(tmp_path: Path) -> None:
    varfile = tmp_path / "vars.conf"
    varfile.write_text("sched=bfq\n")
    write(
        tmp_path,
        "v",
        f"[variables]\ninclude={varfile}\nra=2048\nra2=${{ra}}\ncores=${{f:calc_isolated_cores:1}}\n"
        "[disk]\nelevator=${sched}\nreadahead=${ra2}\n"
        "[sysfs]\n/sys/block/*/queue/nr_requests=${cores}\n/sys/block/*/queue/nomerges=${undefined}\n",
    )
    result = import_tuned("v", search_dirs=[str(tmp_path)])
    assert result.profile["classes"]["rotational"] == {"scheduler": "bfq", "read_ahead_kb": 2048}
    assert "nr_requests" not in str(result.profile)
    assert any(u.startswith("[variables] cores=${f:calc_isolated_cores:1}: uses a tuned function") for u in result.unconverted)
    assert any("nr_requests=${f:calc_isolated_cores:1}: uses a tuned function" in u for u in result.unconverted)
    assert any("nomerges=${undefined}: refers to a tuned variable that is not defined" in u for u in result.unconverted)


def test_missing_variable_file_is_a_note(tmp_path: Path) -> None:
    write(tmp_path, "v", "[variables]\ninclude=/nonexistent/vars.conf\n[disk]\nreadahead=16\n")
    result = import_tuned("v", search_dirs=[str(tmp_path)])
    assert any("/nonexistent/vars.conf" in n for n in result.notes)


@pytest.mark.parametrize(
    ("value", "kib", "note"),
    [
        (">4096", {"min": 4096}, "only raises read-ahead to 4096 KiB"),
        ("<128", {"max": 128}, "only lowers read-ahead to 128 KiB"),
        ("8192 s", 4096, "8192 sectors of 512 bytes = 4096 KiB"),
        ("> 8192 s", {"min": 4096}, "only raises read-ahead to 4096 KiB"),
        ("200000", 65536, "clamped to 65536"),
        (">200000", {"min": 65536}, "clamped to 65536"),
    ],
)
def test_readahead_forms(tmp_path: Path, value: str, kib: int | dict, note: str) -> None:
    write(tmp_path, "r", f"[disk]\nreadahead={value}\n")
    result = import_tuned("r", search_dirs=[str(tmp_path)])
    assert result.profile["classes"]["rotational"] == {"read_ahead_kb": kib}
    assert any(note in n for n in result.notes), result.notes


def test_disk_options_that_do_not_carry_over(tmp_path: Path) -> None:
    write(
        tmp_path,
        "d",
        "[disk]\nelevator=mq-deadline,kyber,cfq,anticipatory\nreadahead=4096s\nreadahead_multiply=2\napm=128\nspindown=6\n",
    )
    result = import_tuned("d", search_dirs=[str(tmp_path)])
    assert result.profile["classes"]["ssd"] == {"scheduler": ["mq-deadline", "kyber", "bfq"]}
    reasons = "\n".join(result.unconverted)
    assert "unknown scheduler 'anticipatory'" in reasons
    assert "[disk] readahead=4096s: not a read-ahead tuned understands" in reasons
    assert "[disk] readahead_multiply=2: multiplies" in reasons
    assert "[disk] apm=128: hdparm" in reasons and "[disk] spindown=6: hdparm" in reasons


def test_devices_globs_with_exclusions(tmp_path: Path) -> None:
    write(
        tmp_path,
        "g",
        "[disk]\ndevices=sd*, !sda\nelevator=bfq\n[disk-virt]\ntype=disk\ndevices=vd* /dev/xvda\nelevator=none\nreadahead=128\n",
    )
    result = import_tuned("g", search_dirs=[str(tmp_path)])
    assert "classes" not in result.profile
    assert result.profile["devices"] == [
        {"match": {"kernel": "sd*"}, "scheduler": "bfq"},
        {"match": {"kernel": "vd*"}, "scheduler": "none", "read_ahead_kb": 128},
        {"match": {"kernel": "xvda"}, "scheduler": "none", "read_ahead_kb": 128},
    ]
    assert any("exclusions !sda cannot be expressed" in n for n in result.notes)


def test_each_disk_goes_to_one_disk_unit(tmp_path: Path) -> None:
    write(
        tmp_path,
        "o",
        "[disk-sd]\ntype=disk\ndevices=sd*\nelevator=bfq\n"
        "[disk-sda]\ntype=disk\ndevices=sda\nelevator=none\n"
        "[disk-late]\ntype=disk\npriority=5\nelevator=kyber\n"
        "[disk-first]\ntype=disk\npriority=-1\ndevices=nvme*\nelevator=none\n",
    )
    result = import_tuned("o", search_dirs=[str(tmp_path)])
    assert result.profile["devices"] == [
        {"match": {"kernel": "nvme*"}, "scheduler": "none"},
        {"match": {"kernel": "sd*"}, "scheduler": "bfq"},
    ]
    assert result.profile["classes"]["rotational"] == {"scheduler": "kyber"}
    assert any(u.startswith("[disk-sda] devices entry sda: its disks already went") for u in result.unconverted)


def test_sysfs_queue_lines(tmp_path: Path) -> None:
    write(
        tmp_path,
        "s",
        "[disk]\nelevator=mq-deadline\n"
        "[sysfs]\n"
        "/sys/block/*/queue/nr_requests=256\n"
        "/sys/block/*/queue/read_ahead_kb=512\n"
        "/sys/block/*/queue/iosched/read_expire=150\n"
        "/sys/block/*/queue/iosched/slice_idle=0\n"
        "/sys/block/sd*/queue/iosched/front_merges=0\n"
        "/sys/block/*/queue/foo=1\n"
        "/sys/block/*/queue/rq_affinity=7\n"
        "/sys/kernel/mm/ksm/run=2\n",
    )
    result = import_tuned("s", search_dirs=[str(tmp_path)])
    classes = result.profile["classes"]
    assert classes["rotational"] == {
        "scheduler": "mq-deadline",
        "queue": {"nr_requests": 256},
        "read_ahead_kb": 512,
        "iosched": {"read_expire": 150},
    }
    assert classes["mmc"] == {
        "queue": {"nr_requests": 256},
        "read_ahead_kb": 512,
        "iosched": {"read_expire": 150, "slice_idle": 0},
    }
    assert classes["dm"] == {"queue": {"nr_requests": 256}, "read_ahead_kb": 512}
    assert result.profile["devices"] == [{"match": {"kernel": "sd*"}, "iosched": {"front_merges": 0}}]
    reasons = "\n".join(result.unconverted)
    assert "/sys/block/*/queue/foo=1: queue/foo is not in tunectl's queue attribute allow-list" in reasons
    assert "rq_affinity=7: rq_affinity must be within 0-2" in reasons
    assert "/sys/kernel/mm/ksm/run=2: not a block-device queue setting" in reasons
    assert "classes.rotational: iosched slice_idle belongs to bfq, not to scheduler mq-deadline" in reasons
    check_profile(result.profile)


def test_conditional_and_disabled_units(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c",
        "[disk]\nuname_regex=aarch64\nreadahead=64\n[disk2]\ntype=disk\nenabled=false\nreadahead=32\n",
    )
    result = import_tuned("c", search_dirs=[str(tmp_path)])
    assert "classes" not in result.profile
    assert any("uname_regex=aarch64" in u for u in result.unconverted)
    assert any("[disk2] enabled=false" in n for n in result.notes)


def test_render_yaml_comments_and_round_trip(tmp_path: Path) -> None:
    write(tmp_path, "base", "[disk]\nreadahead=>1024\n")
    write(tmp_path, "r", "[main]\nsummary=Has: colons # and a hash\ninclude=base\n[cpu]\ngovernor=performance\n")
    result = import_tuned("r", search_dirs=[str(tmp_path)])
    text = render_yaml(result)
    assert yaml.safe_load(text) == result.profile
    assert f"#   {tmp_path}/base/tuned.conf" in text
    assert "#   - [cpu] governor=performance: not a block-device setting" in text
    assert "only raises read-ahead" in text
    assert all(line.startswith("#") for line in text.splitlines() if "not a block-device" in line)


def test_a_huge_or_multi_line_value_not_carried_over_is_one_bounded_comment_line(tmp_path: Path) -> None:
    """A value of anyone's tuned file was copied whole into the profile's comment: megabytes, a continuation line
    (a new comment line each), escape sequences. Each item is one line now, at most COMMENT_CHARS of it, the cut
    said; --json (`unconverted`) keeps it whole."""
    from tunectl.profile.tuned_import import COMMENT_CHARS

    huge = "x" * 1_000_000
    write(tmp_path, "h", f"[cpu]\ngovernor={huge}\n[vm]\ntransparent_hugepages=never\n  \x1b[31mred\n")
    result = import_tuned("h", search_dirs=[str(tmp_path)])
    assert any(huge in u for u in result.unconverted)  # the report keeps it whole
    text = render_yaml(result)
    assert len(text) < 2000 and "\x1b" not in text, text[:300]
    lines = text.splitlines()
    cut = [ln for ln in lines if "governor=" in ln]
    item = f"- [cpu] governor={huge}: not a block-device setting"
    assert cut == [f"#   {item[:COMMENT_CHARS]}... ({len(item) - COMMENT_CHARS} more characters cut; --json has them)"]
    (vm,) = [ln for ln in lines if "transparent_hugepages=" in ln]
    assert vm == "#   - [vm] transparent_hugepages=never\\n\\x1b[31mred: not a block-device setting", vm
    check_profile(yaml.safe_load(text))



def test_a_tuned_conf_that_is_no_regular_file_is_named_where_the_profile_is_not_found(tmp_path: Path) -> None:
    """tuned passes over a tuned.conf that is no regular file, so the profile is "not found"; that alone sent a user
    looking for a file that is there. The message now says what stands at the path (a named pipe, a directory), by
    name, as an include, by path, and in a configuration tree (doctor's), where it said "not found" even by path."""
    from tunectl.profile.tuned_reader import TreeFiles

    (tmp_path / "p").mkdir()
    os.mkfifo(tmp_path / "p" / "tuned.conf")
    (tmp_path / "d" / "tuned.conf").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"'p' not found \(.*/p/tuned.conf: a named pipe, not a regular file: tuned "):
        import_tuned("p", search_dirs=[str(tmp_path)])
    write(tmp_path, "x", "[main]\ninclude=d\n")
    with pytest.raises(UsageError, match=r"'d' not found \(include chain: x -> d\) \(.*/d/tuned.conf: a directory, "):
        import_tuned("x", search_dirs=[str(tmp_path)])
    with pytest.raises(UsageError, match=r"tuned profile file .*/p/tuned.conf: a named pipe, not a regular file\n"):
        import_tuned(str(tmp_path / "p"))
    tree = tmp_path / "tree"
    (tree / "etc/tuned/p").mkdir(parents=True)
    os.mkfifo(tree / "etc/tuned/p/tuned.conf")
    with pytest.raises(UsageError, match=r"'p' not found \(/etc/tuned/p/tuned.conf: a named pipe, not a regular "):
        tunectl_import_tuned("p", ["/etc/tuned"], TreeFiles(str(tree)))
    with pytest.raises(UsageError, match=r"tuned profile file /etc/tuned/p/tuned.conf: a named pipe, not a regular"):
        tunectl_import_tuned("/etc/tuned/p", ["/etc/tuned"], TreeFiles(str(tree)))
