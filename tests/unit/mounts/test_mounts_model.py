"""Mount options as sets, the lossless fstab editor, rule matching: pure, no root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness import DATA as TEST_DATA
from tunectl.devices.model import Device
from tunectl.mounts import fstab, options
from tunectl.mounts.options import Want, drift, edit, has, remount_options, want_from_rules
from tunectl.mounts.rules import Facts, select

DATA = TEST_DATA / "fstab"


def want(*rules: dict, fstype: str = "ext4", cannot: str | None = None) -> Want:
    return want_from_rules(list(enumerate(rules)), fstype, cannot)


# --- option semantics -----------------------------------------------------------------------------

def test_options_compare_as_sets_with_values() -> None:
    w = want({"options": ["noatime", "commit=60"]})
    assert drift(["defaults", "noatime", "commit=60"], w) == []
    assert drift(["commit=60", "noatime", "defaults"], w) == []
    assert drift(["noatime", "commit=5"], w) == [("add", "commit=60")]
    assert edit(["noatime", "commit=5", "errors=remount-ro"], w) == ["noatime", "commit=60", "errors=remount-ro"]


@pytest.mark.parametrize("before, after", [
    (["relatime", "errors=remount-ro"], ["noatime", "errors=remount-ro"]),
    (["atime"], ["noatime"]),
    (["strictatime", "nosuid"], ["noatime", "nosuid"]),
    (["defaults"], ["defaults", "noatime"]),
    (["relatime", "nodiratime", "strictatime"], ["noatime"]),  # nodiratime is redundant under noatime
    (["noatime", "nodiratime"], ["noatime", "nodiratime"]),  # already in sync: nothing rewritten
])
def test_noatime_replaces_other_atime_modes(before: list, after: list) -> None:
    w = want({"options": ["noatime"]})
    assert edit(before, w) == after
    assert drift(after, w) == []


def test_noatime_makes_a_wanted_nodiratime_redundant() -> None:
    assert want({"options": ["nodiratime", "noatime"]}).present == ["noatime"]
    assert want({"options": ["noatime"]}, {"options": ["nodiratime"]}).present == ["noatime"]


def test_lazytime_combines_with_any_atime_mode() -> None:
    w = want({"options": ["relatime", "lazytime"]})
    assert edit(["noatime"], w) == ["relatime", "lazytime"]
    assert edit(["strictatime", "nolazytime"], want({"options": ["lazytime"]})) == ["strictatime", "lazytime"]


def test_discard_modes() -> None:
    online = want({"match": {}, "discard": "online"})
    assert online.present == ["discard"] and drift(["defaults"], online) == [("add", "discard")]
    for mode in ("periodic", "off"):
        w = want({"discard": mode})
        assert w.absent == ["discard"] and edit(["rw", "discard", "noatime"], w) == ["rw", "noatime"]
        assert drift(["rw"], w) == []
    later_wins = want({"discard": "online"}, {"discard": "periodic"})
    assert later_wins.present == [] and later_wins.absent == ["discard"]


def test_online_discard_where_a_device_cannot_is_a_typed_skip_not_drift() -> None:
    w = want({"discard": "online"}, cannot="sdd cannot discard (queue/discard_max_bytes is 0)")
    assert w.present == [] and w.absent == []
    assert [s.to_json() for s in w.skipped] == [{"option": "discard",
                                                 "reason": "sdd cannot discard (queue/discard_max_bytes is 0)"}]
    assert drift(["rw"], w) == []


def test_options_a_filesystem_does_not_know_are_skipped() -> None:
    w = want({"options": ["noatime", "commit=60", "inode64"], "discard": "online"}, fstype="iso9660")
    assert w.present == ["noatime"]
    reasons = {s.option: s.reason for s in w.skipped}
    assert reasons["discard"] == "iso9660 has no discard option"
    assert "commit is an option of" in reasons["commit=60"] and "inode64" in reasons
    # vfat does take discard on Linux (fs/fat: "discard"), so it is not skipped there
    assert want({"discard": "online"}, fstype="vfat").present == ["discard"]
    assert "does not know" in want({"discard": "online"}, fstype="weirdfs").skipped[0].reason


def test_live_options_shown_by_absence() -> None:
    assert has(["rw", "relatime"], "strictatime", live=True) is False
    assert has(["rw", "nosuid"], "strictatime", live=True) is True
    assert has(["rw"], "nodiscard", live=True) is True
    assert drift(["rw", "relatime"], want({"options": ["nofail", "noatime"]}), live=True) == [("add", "noatime")]


@pytest.mark.parametrize("live, rule, expected", [
    (["rw", "noatime", "nosuid"], {"options": ["relatime"]}, ["rw", "nosuid", "relatime"]),
    (["rw", "relatime", "lazytime", "commit=30"], {"options": ["noatime"]}, ["rw", "lazytime", "noatime"]),
    (["rw", "relatime", "discard"], {"discard": "periodic"}, ["rw", "relatime", "nodiscard"]),
    (["ro", "relatime", "nodiratime"], {"options": ["noatime", "lazytime"]}, ["ro", "noatime", "lazytime"]),
])
def test_remount_passes_every_per_mount_flag_and_the_atime_mode(live: list, rule: dict, expected: list) -> None:
    assert remount_options(live, want(rule)) == expected


def test_split_keeps_quoted_commas() -> None:
    assert options.split('context="system_u:object_r:tmp_t:s0:c127,c456",noatime') == [
        'context="system_u:object_r:tmp_t:s0:c127,c456"', "noatime"]
    assert options.join([]) == "defaults"


# --- the lossless fstab editor ----------------------------------------------------------------------

MIXED = (DATA / "mixed.fstab").read_bytes()


def test_parse_mixed_fixture() -> None:
    t = fstab.parse(MIXED)
    assert t.render() == MIXED
    assert t.problems == [(16, "pass field 'x' is not a number")]
    by_line = {e.lineno: e for e in t.entries}
    assert by_line[7].target == "/srv/my data" and by_line[7].options == ["defaults"]
    assert by_line[8].options == ["rw", "noatime", "nodiratime", "discard"]  # "# trailing" is after pass
    assert by_line[9].options == ["nosuid"] and len(by_line[9].spans) == 4  # no dump/pass
    assert by_line[10].is_swap and by_line[12].is_bind


EXPECTED_MIXED = MIXED.replace(
    b"ext4    errors=remount-ro,relatime 0      1",
    b"ext4    errors=remount-ro,noatime 0      1").replace(
    b"xfs\tdefaults\t0\t2", b"xfs\tdefaults,noatime,lazytime\t0\t2").replace(
    b"ext4 rw,noatime,nodiratime,discard 0 2 # trailing comment", b"ext4 rw,noatime 0 2 # trailing comment").replace(
    b"ext4  nosuid\n", b"ext4  nosuid,noatime\n").replace(
    b"mode=1777,strictatime,nosuid,nodev 0 0", b"mode=1777,noatime,nosuid,nodev,x\\040y 0 0")


def test_rewrite_only_the_options_field_every_other_byte_kept() -> None:
    changes = {4: ["errors=remount-ro", "noatime"], 7: ["defaults", "noatime", "lazytime"], 8: ["rw", "noatime"],
               9: ["nosuid", "noatime"], 13: ["mode=1777", "noatime", "nosuid", "nodev", "x y"]}
    new = fstab.parse(MIXED).with_options(changes).render()
    assert new == EXPECTED_MIXED
    old_lines, new_lines = MIXED.split(b"\n"), new.split(b"\n")
    assert [i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b] == sorted(changes)
    # the tab-aligned line keeps its tabs; the line whose options overflowed their column keeps one space
    assert new_lines[6].count(b"\t") == 5 and new_lines[3].endswith(b"noatime 0      1")


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="findmnt (util-linux) not installed")
def test_libmount_reads_untouched_entries_identically(tmp_path: Path) -> None:
    import json

    old, new = tmp_path / "old", tmp_path / "new"
    old.write_bytes(MIXED)
    new.write_bytes(EXPECTED_MIXED)

    def parsed(p: Path) -> list:
        out = subprocess.run(["findmnt", "--tab-file", str(p), "-J", "-o", "SOURCE,TARGET,FSTYPE,OPTIONS,FREQ,PASSNO"],
                             capture_output=True, text=True)
        assert "parse error at line 16" in out.stderr
        return json.loads(out.stdout)["filesystems"]

    a, b = parsed(old), parsed(new)
    assert len(a) == len(b) == len(fstab.parse(MIXED).entries)
    changed = [i for i, e in enumerate(fstab.parse(MIXED).entries) if e.lineno in (4, 7, 8, 9, 13)]
    assert [x for i, x in enumerate(a) if i not in changed] == [x for i, x in enumerate(b) if i not in changed]
    assert b[changed[-1]]["options"] == "mode=1777,noatime,nosuid,nodev,x y"


@pytest.mark.parametrize("data, changes, expected", [
    (b"/dev/sdb1 /data ext4 relatime\t0 2", {1: ["noatime"]}, b"/dev/sdb1 /data ext4 noatime\t0 2"),  # no final newline
    (b"LABEL=x /x ext4 defaults 0 0\r\n#c\r\n", {1: ["defaults", "noatime"]},
     b"LABEL=x /x ext4 defaults,noatime 0 0\r\n#c\r\n"),
    (b"/dev/sda1 /x ext4\n", {1: ["noatime"]}, b"/dev/sda1 /x ext4 noatime\n"),  # options field missing
    (b"/dev/sda1\t/x\text4\n", {1: ["noatime"]}, b"/dev/sda1\t/x\text4\tnoatime\n"),
    (b"  /dev/sda1 /x  ext4  rw\t\t0 0\n", {1: ["rw", "noatime"]}, b"  /dev/sda1 /x  ext4  rw,noatime\t0 0\n"),
    (b"/dev/sda1 /x ext4 relatime    0 0\n", {1: ["noatime"]}, b"/dev/sda1 /x ext4 noatime     0 0\n"),  # column kept
    (b"/dev/sda1 /x ext4 rw    0 0\n", {1: ["rw", "noatime", "lazytime", "commit=60"]},
     b"/dev/sda1 /x ext4 rw,noatime,lazytime,commit=60 0 0\n"),  # longer than the gap: one separator
])
def test_rewrite_edge_cases(data: bytes, changes: dict, expected: bytes) -> None:
    t = fstab.parse(data)
    assert t.render() == data
    assert t.with_options(changes).render() == expected


@pytest.mark.parametrize("line, problem", [
    (b"garbage\n", "fewer than three fields"),
    (b"/dev/sdc /y\n", "fewer than three fields"),
    (b"/dev/sde /e ext4 rw 0 x\n", "pass field"),
    (b"/dev/sde /e ext4 rw x 0\n", "dump field"),
    (b"/dev/sda1 /x ext4 rw # comment\n", "dump field"),
])
def test_unparseable_lines_kept_byte_for_byte(line: bytes, problem: str) -> None:
    data = b"# head\n" + line + b"/dev/sda1 /ok ext4 rw 0 0\n"
    t = fstab.parse(data)
    assert t.render() == data
    assert t.problems and t.problems[0][0] == 2 and problem in t.problems[0][1]
    assert [e.target for e in t.entries] == ["/ok"]
    with pytest.raises(ValueError):
        t.with_options({2: ["noatime"]})


def test_escapes_round_trip() -> None:
    assert fstab.unescape(r"/srv/my\040data\011x\134y") == "/srv/my data\tx\\y"
    assert fstab.escape("/srv/my data\tx\\y") == r"/srv/my\040data\011x\134y"


# --- rule matching ------------------------------------------------------------------------------------

def _dev(name: str, cls: str) -> Device:
    return Device(name=name, cls=cls, identity=f"kernel:{name}", devnum="8:0")


@pytest.mark.parametrize("match, facts, applies, skipped", [
    ({"fstype": ["ext4", "xfs"]}, Facts("xfs", "/srv"), True, False),
    ({"fstype": "ext*", "mountpoint": "/var/lib/*"}, Facts("ext4", "/srv"), False, False),
    ({"mountpoint": "/var/lib/*"}, Facts("ext4", "/var/lib/pg"), True, False),
    ({"class": ["ssd"]}, Facts("ext4", "/", _dev("sda", "ssd")), True, False),
    ({"class": ["ssd"]}, Facts("ext4", "/", _dev("dm-2", "dm"), [_dev("sdc", "ssd"), _dev("sdd", "ssd")]), True, False),
    ({"class": ["ssd"]}, Facts("ext4", "/", _dev("dm-2", "dm"), [_dev("sdc", "ssd"), _dev("sdd", "rotational")]),
     False, False),
    ({"class": ["ssd"]}, Facts("ext4", "/", absent="no device with UUID 'x'"), False, True),
    ({"class": ["ssd"], "fstype": "xfs"}, Facts("ext4", "/", absent="gone"), False, False),
    ({"class": ["ssd"]}, Facts("nfs4", "/home", block=False), False, False),
    ({"fstype": "nfs*"}, Facts("nfs4", "/home", block=False), True, False),
    ({"mountpoint": "/home"}, Facts("nfs4", "/home", block=False), False, False),  # must name the fstype
])
def test_rule_selection(match: dict, facts: Facts, applies: bool, skipped: bool) -> None:
    held, skips = select([{"match": match, "options": ["noatime"]}], facts)
    assert bool(held) is applies and bool(skips) is skipped


# --- properties of the editor ------------------------------------------------------------------------

_word = st.text(alphabet="abcdefgh/=_.:-\\0123456789", min_size=1, max_size=12)
_blank = st.text(alphabet=" \t", min_size=1, max_size=4)
_line = st.one_of(
    st.builds(lambda lead, ws, words: lead + "".join(w + s for w, s in zip(words, ws)).rstrip(" \t"),
              st.sampled_from(["", " ", "\t"]), st.lists(_blank, min_size=6, max_size=6),
              st.lists(_word, min_size=1, max_size=7)),
    st.text(alphabet="# \tabc", max_size=10),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_line, max_size=8), st.booleans(), st.lists(st.sampled_from(["noatime", "lazytime", "commit=60",
                                                                           "x y", "discard"]), min_size=1, max_size=3))
def test_editing_one_entry_changes_only_its_options(lines: list, final_newline: bool, new: list) -> None:
    data = ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode()
    t = fstab.parse(data)
    assert t.render() == data
    for entry in t.entries:
        out = t.with_options({entry.lineno: new}).render()
        before, after = data.split(b"\n"), out.split(b"\n")
        assert len(before) == len(after)
        assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] in ([], [entry.lineno - 1])
        again = fstab.parse(out).lines[entry.lineno - 1].entry
        assert again is not None and again.options == new
        assert (again.source, again.target, again.fstype) == (entry.source, entry.target, entry.fstype)
        assert after[entry.lineno - 1][:entry.spans[3][0] if entry.has_options else entry.spans[2][1]] == \
            before[entry.lineno - 1][:entry.spans[3][0] if entry.has_options else entry.spans[2][1]]


def test_fields_past_the_sixth_are_kept_apart_as_libmount_reads_the_first_six() -> None:
    t = fstab.parse(b"/dev/sda1 /x ext4 rw 0 2 # data\\040disk\n/dev/sdb1 /y ext4 rw 0 2\n")
    assert [e.extra for e in t.entries] == [["#", "data disk"], []]
    assert t.entries[0].options == ["rw"] and not t.problems
