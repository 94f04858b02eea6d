"""tunectl align: parted's output parsed, the grain and the verdicts, on recorded output and fake trees.

The parted fixtures in tests/data/parted/ are real parted 3.5 output recorded by
tests/data/parted/record (see there). The fake-tree cases run the real CLI with a
`parted` on PATH that prints a recorded table for the device it is asked about.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakesys import FakeTree, mountinfo_line, striped_md
from tests.harness import DATA as TEST_DATA
from tests.harness import run_cli
from tests.tuning_helpers import Tunectl
from tunectl.align import check as align_check
from tunectl.align.table import ParseError, parse_json, parse_machine, split_fields
from tunectl.align.verdict import Topology, choose_grain, judge, parted_rule

DATA = TEST_DATA / "parted"
MiB = 1 << 20
LOOP_512 = Topology(512, 512, 512, 0, 0)
LOOP_4K = Topology(4096, 4096, 4096, 0, 0)


def text(name: str) -> str:
    return (DATA / name).read_text()


def recorded_align_check(name: str) -> dict[int, bool]:
    """`parted align-check optimal N` exit statuses recorded with the fixture: N -> aligned."""
    pairs = (item.split(":") for item in text(f"{name}.align-check").split())
    return {int(n): ok == "1" for n, ok in pairs}


# --- parsing

@pytest.mark.parametrize("fixture", ["gpt-512", "msdos-4k"])
def test_json_and_machine_output_describe_the_same_table(fixture):
    from_json = parse_json(text(f"{fixture}.json"))
    from_machine = parse_machine(text(f"{fixture}.machine"))
    with_free = parse_machine(text(f"{fixture}.free.machine"))
    assert from_json == from_machine == with_free
    assert from_json.has_table


def test_machine_escapes_in_gpt_names():
    disk = parse_machine(text("gpt-512.machine"))
    assert [p.name for p in disk.partitions] == ["my:part\\x", "p2", "back\\\\slash", "say hi:"]
    assert disk.partitions[1].flags == ("boot", "esp")
    assert (disk.label, disk.logical_sector_size, disk.size) == ("gpt", 512, 131072)
    assert [(p.start, p.end, p.size) for p in disk.partitions][0] == (63, 2047, 1985)


def test_msdos_primary_extended_logical():
    for disk in (parse_machine(text("msdos-4k.machine")), parse_json(text("msdos-4k.json"))):
        assert [(p.number, p.type) for p in disk.partitions] == [
            (1, "primary"), (2, "primary"), (3, "extended"), (5, "logical"), (6, "logical")]
        assert disk.logical_sector_size == 4096
        assert disk.partitions[0].flags == ("boot",)


@pytest.mark.parametrize("fixture", ["unlabelled", "whole-disk-fs"])
def test_no_partition_table(fixture):
    assert not parse_json(text(f"{fixture}.json")).has_table
    assert not parse_machine(text(f"{fixture}.machine")).has_table


@pytest.mark.parametrize("line, fields", [
    (r"a:b:c", ["a", "b", "c"]),
    (r"my\:part:x", ["my:part", "x"]),
    (r"back\\\\slash:", ["back\\\\slash", ""]),
    (r"ends\:", ["ends:"]),
    (r"\\:x", ["\\", "x"]),
    ("", [""]),
])
def test_split_fields(line, fields):
    assert split_fields(line) == fields


@pytest.mark.parametrize("bad", [
    "", "garbage", "BYT;\n", "BYT;\n/dev/sda:1s;\n", "CHS;\n/dev/sda:1,2,3:scsi:512:512:gpt:x:;\n",
    "BYT;\n/dev/sda:100s:scsi:512:512:gpt:x:;\n1:2048:4095s:2048s:::;\n",
    "BYT;\n/dev/sda:100s:scsi:512:512:gpt:x:;\n1:2048s:4095s:2048s::\n",
    "BYT;\n/dev/sda:100s:scsi:512:512:gpt:x:;\nx:2048s:4095s:2048s:::;\n",
])
def test_machine_garbage_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_machine(bad)


@pytest.mark.parametrize("bad", ["", "{", "[]", '{"disk": 1}', '{"disk": {"size": "12"}}',
                                 '{"disk": {"size": "1s", "partitions": [{"number": "x", "start": "1s"}]}}'])
def test_json_garbage_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_json(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="BYT;:\\s0123456789gptmsdo\n -", max_size=120))
def test_any_machine_text_parses_or_is_a_parse_error(blob):
    with contextlib.suppress(ParseError):  # anything else (IndexError, ValueError...) fails the test
        parse_machine(blob)


# --- grain and verdicts

@pytest.mark.parametrize("fixture, topo", [("gpt-512", LOOP_512), ("msdos-4k", LOOP_4K)])
def test_libparted_rule_matches_recorded_align_check(fixture, topo):
    disk = parse_machine(text(f"{fixture}.machine"))
    rule = parted_rule(topo)
    grain = choose_grain(topo, MiB)
    expected = recorded_align_check(fixture)
    for p in disk.partitions:
        result = judge(p.number, p.start, p.size, disk.logical_sector_size, topo, grain, rule)
        assert result.parted_optimal == expected[p.number], p
        assert result.aligned == expected[p.number], p


@pytest.mark.parametrize("topo, boundary, grain, source", [
    (LOOP_512, MiB, MiB, "boundary_kib"),
    (Topology(512, 4096, 4096, 0, 3584), MiB, MiB, "boundary_kib"),
    (Topology(512, 4096, 4096, 0, 0), 4096, 4096, "boundary_kib"),
    (Topology(512, 512, 512 * 1024, 3 * 512 * 1024, 0), MiB, 3 * MiB, "lcm(boundary_kib, optimal_io_size)"),
    (Topology(512, 512, 64 * 1024, 4 * MiB, 0), MiB, 4 * MiB, "optimal_io_size"),
    (Topology(512, 4096, 4096, 33553920, 0), MiB, MiB, "boundary_kib"),
    (Topology(512, 512, 512, 33553920, 0), MiB, MiB, "boundary_kib"),
    (Topology(512, 512, 768 * 1024, 0, 0), MiB, 3 * MiB, "lcm(boundary_kib, minimum_io_size)"),
])
def test_grain_and_its_source(topo, boundary, grain, source):
    g = choose_grain(topo, boundary)
    assert (g.bytes, g.source) == (grain, source)


def test_bogus_optimal_io_is_ignored_with_a_warning():
    g = choose_grain(Topology(512, 512, 512, 33553920, 0), MiB)
    assert any("33553920" in w and "USB" in w for w in g.warnings)
    odd = choose_grain(Topology(512, 4096, 4096, 4096 * 3 + 512, 0), MiB)
    assert odd.bytes == MiB and any("not a multiple of physical_block_size" in w for w in odd.warnings)


def test_suggested_start_is_the_next_aligned_sector_at_or_after():
    topo = Topology(512, 4096, 4096, 0, 3584)
    grain, rule = choose_grain(topo, MiB), parted_rule(topo)
    r = judge(1, 2048, 100, 512, topo, grain, rule)
    assert (r.aligned, r.off_by_bytes, r.suggested_start_sector) == (False, MiB - 3584, 2055)
    assert "read-modify-write" in r.note
    r = judge(1, 2055, 100, 512, topo, grain, rule)
    assert (r.aligned, r.off_by_bytes, r.suggested_start_sector, r.parted_optimal) == (True, 0, None, True)
    r = judge(1, 63, 100, 512, topo, grain, rule)  # the XP-era start this jumper was for: physically aligned
    assert not r.aligned and "on a 4096-byte physical block" in r.note and r.suggested_start_sector == 2055


topologies = st.builds(
    lambda lbs, pbs_shift, opt_kib, min_shift, offset_blocks: Topology(
        lbs, lbs << pbs_shift, (lbs << pbs_shift) << min_shift, opt_kib * 1024,
        (offset_blocks * lbs) % (lbs << pbs_shift)),
    st.sampled_from([512, 4096]), st.integers(0, 3), st.sampled_from([0, 0, 64, 512, 768, 1536, 4096, 32767]),
    st.integers(0, 7), st.integers(0, 7))


@settings(max_examples=400, deadline=None)
@given(topologies, st.integers(0, 1 << 24), st.sampled_from([4, 64, 1024, 4096]))
def test_suggested_start_is_the_first_aligned_sector(topo, start, boundary_kib):
    sector = topo.logical_block_size
    grain, rule = choose_grain(topo, boundary_kib * 1024), parted_rule(topo)
    r = judge(1, start, 1, sector, topo, grain, rule)
    assert r.aligned == (r.off_by_bytes == 0) == (r.suggested_start_sector is None)
    assert grain.bytes % (boundary_kib * 1024) == 0 and grain.bytes % topo.physical_block_size == 0
    if not r.aligned:
        after = r.suggested_start_sector
        assert start < after <= start + grain.bytes // sector
        assert judge(1, after, 1, sector, topo, grain, rule).aligned
        assert not judge(1, after - 1, 1, sector, topo, grain, rule).aligned


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([512, 4096]), st.integers(0, 3), st.integers(0, 7), st.integers(0, 1 << 24))
def test_agrees_with_libparted_on_every_ordinary_disk(lbs, pbs_shift, offset_blocks, start):
    """No optimal_io_size, minimum_io_size = the physical block, 1 MiB boundary: the two rules are one."""
    pbs = lbs << pbs_shift
    topo = Topology(lbs, pbs, pbs, 0, offset_blocks * lbs % pbs)
    r = judge(1, start, 1, lbs, topo, choose_grain(topo, MiB), parted_rule(topo))
    assert r.aligned == r.parted_optimal and r.note.count("parted") == 0


def test_alignment_offset_minus_one_is_reported():
    g = choose_grain(Topology(512, 4096, 4096, 0, -1), MiB)
    assert g.offset == 0 and any("-1" in w for w in g.warnings)


# --- fake trees through the CLI, with a recorded table behind a `parted` on PATH

PARTED_STUB = """#!/bin/sh
# parted -j|-m -s DEV unit s print: print the recorded table for DEV
dir={dir}
name=$(basename "$3")
case "$1" in -j) ext=json ;; -m) ext=machine ;; *) echo "parted: invalid option" >&2; exit 1 ;; esac
[ -f "$dir/$name.old" ] && [ "$1" = -j ] && {{ echo "parted: invalid option -- 'j'" >&2; exit 1; }}
[ -f "$dir/$name.stderr" ] && {{ cat "$dir/$name.$ext" 2>/dev/null; cat "$dir/$name.stderr" >&2; exit 1; }}
[ -f "$dir/$name.$ext" ] && {{ cat "$dir/$name.$ext"; exit 0; }}
echo "Error: $3: unrecognised disk label" >&2
exit 1
"""


class FakeParted:
    """A directory on PATH with a `parted` that answers from recorded output."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir()
        script = directory / "parted"
        script.write_text(PARTED_STUB.format(dir=directory))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def table(self, device: str, fixture: str) -> None:
        for ext in ("json", "machine"):
            (self.dir / f"{device}.{ext}").write_text(text(f"{fixture}.{ext}"))

    def fail(self, device: str, stderr: str, stdout: str = "") -> None:
        (self.dir / f"{device}.stderr").write_text(stderr)
        for ext in ("json", "machine"):
            (self.dir / f"{device}.{ext}").write_text(stdout)

    def old(self, device: str) -> None:
        (self.dir / f"{device}.old").write_text("")


@pytest.fixture
def parted(tmp_path, monkeypatch) -> FakeParted:
    stub = FakeParted(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{stub.dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return stub


@pytest.fixture
def tree(empty_fake_tree: FakeTree) -> FakeTree:
    """sda: 512e with alignment_offset 3584; md0: RAID5 of 4 (chunk 512 KiB, stripe 1.5 MiB);
    sdb: a USB bridge reporting io_opt 33553920; sdc: no table; loop0 with a table."""
    t = empty_fake_tree
    t.add_disk("sda", rotational=True, physical_block_size=4096, alignment_offset=3584, size_sectors=131072,
               partitions=[(63, 1000), (4096, 1000), (6151, 1000)], by_id=["ata-WDC_WD40EZRX-00S_WD-1"])
    for member in ("sdd", "sde", "sdf", "sdg"):
        t.add_disk(member, size_sectors=65536)
    striped_md(t, "md0", ["sdd", "sde", "sdf", "sdg"], level="raid5", chunk_kib=512, size_sectors=131072)
    t.add_disk("sdb", bus="usb", physical_block_size=4096, optimal_io_size=33553920, size_sectors=262144)
    t.add_disk("sdc", size_sectors=131072)
    t.add_loop("loop0", "/var/lib/images/disk.img")
    return t


@pytest.fixture
def tunectl(tree, parted, tmp_path) -> Tunectl:
    parted.table("sda", "512e.fake")
    parted.table("md0", "raid5.fake")
    parted.table("sdb", "usb-bridge.fake")
    parted.table("loop0", "gpt-512")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "fine.yaml").write_text("name: fine\nalignment: {boundary_kib: 4}\n")
    # The device nodes of the machine the tree describes: never this machine's /dev.
    return Tunectl(tree, tmp_path / "state", [tmp_path / "profiles"], {"TUNECTL_DEV_ROOT": str(tmp_path / "dev")})


def verdicts(doc: dict, device: str) -> dict[int, tuple[bool, bool, int | None]]:
    disk = next(d for d in doc["disks"] if d["device"] == device)
    return {p["number"]: (p["aligned"], p["parted_optimal"], p["suggested_start_sector"]) for p in disk["partitions"]}


def test_every_disk_with_a_table_and_only_those(tunectl):
    r = tunectl("align", "--json")
    assert r.code == 1, r.err
    doc = r.doc
    assert [d["device"] for d in doc["disks"]] == ["md0", "sda", "sdb"]  # loop0: only when named; sdc: no table
    assert doc["ok"] is False and doc["profile"] == "default"


def test_512e_with_alignment_offset(tunectl):
    doc = tunectl("align", "sda", "--json").doc
    sda = doc["disks"][0]
    assert sda["topology"] == {"logical_block_size": 512, "physical_block_size": 4096, "minimum_io_size": 4096,
                               "optimal_io_size": 0, "alignment_offset": 3584}
    assert (sda["grain_bytes"], sda["grain_source"], sda["table"]) == (MiB, "boundary_kib", "gpt")
    # 63s: on a physical block (the jumper's purpose) but not on the grain; 4096s: 2 MiB, but 7 sectors
    # before a physical block; 6151s = 3 MiB + 3584 bytes. parted agrees on all three.
    assert verdicts(doc, "sda") == {1: (False, False, 2055), 2: (False, False, 4103), 3: (True, True, None)}
    notes = [p["note"] for p in sda["partitions"]]
    assert "on a 4096-byte physical block" in notes[0] and "read-modify-write" in notes[1]


def test_raid5_stripe_is_stricter_than_parted_and_says_why(tunectl):
    doc = tunectl("align", "/dev/md0", "--json").doc
    md = doc["disks"][0]
    assert (md["topology"]["minimum_io_size"], md["topology"]["optimal_io_size"]) == (512 * 1024, 1536 * 1024)
    assert (md["grain_bytes"], md["grain_source"]) == (3 * MiB, "lcm(boundary_kib, optimal_io_size)")
    assert verdicts(doc, "md0") == {1: (False, False, 6144), 2: (False, True, 6144), 3: (True, True, None),
                                    4: (True, True, None)}
    assert md["partitions"][1]["note"].count("stricter than parted") == 1
    assert "optimal_io_size 1572864" in md["partitions"][1]["note"]


def test_usb_bridge_bogus_optimal_io(tunectl):
    doc = tunectl("align", "sdb", "--json").doc
    sdb = doc["disks"][0]
    assert sdb["grain_bytes"] == MiB and any("33553920" in w for w in sdb["warnings"])
    # parted takes 65535 sectors as its grain: it rejects 1 MiB and accepts 65535s and 131070s.
    assert verdicts(doc, "sdb") == {1: (True, False, None), 2: (False, True, 65536), 3: (False, True, 131072)}
    assert "looser than parted" in sdb["partitions"][0]["note"]
    assert "stricter than parted" in sdb["partitions"][1]["note"]


def test_profile_boundary_loosens_the_grain(tunectl):
    doc = tunectl("align", "sda", "-p", "fine", "--json").doc
    sda = doc["disks"][0]
    assert (doc["profile"], sda["grain_bytes"]) == ("fine", 4096)
    # 63s is on a physical block once alignment_offset is counted: aligned for a 4 KiB boundary, not for parted
    assert verdicts(doc, "sda")[1] == (True, False, None)
    assert "looser than parted" in sda["partitions"][0]["note"]


def test_dev_forms_and_partition_filter(tunectl):
    by_path = tunectl("align", "/dev/sda", "--json").doc
    by_id = tunectl("align", "/dev/disk/by-id/ata-WDC_WD40EZRX-00S_WD-1", "--json").doc
    assert by_path == by_id
    part = tunectl("align", "sda3", "--json").doc
    assert [p["number"] for p in part["disks"][0]["partitions"]] == [3]
    assert part["ok"] is True
    assert tunectl("align", "sda3").code == 0


def test_named_loop_and_disk_without_table(tunectl):
    r = tunectl("align", "loop0", "sdc", "--json")
    assert r.code == 1
    loop0, sdc = r.doc["disks"]
    assert loop0["table"] == "gpt" and len(loop0["partitions"]) == 4
    assert sdc == {"device": "sdc", "table": None, "topology": sdc["topology"], "grain_bytes": None,
                   "grain_source": None, "warnings": ["no partition table"], "partitions": []}


def test_all_aligned_exits_0_and_json_shape(tunectl, parted):
    parted.table("sdc", "raid5.fake")  # 2048s 3072s 6144s 12288s on a plain 512-byte disk: 3072s is misaligned
    r = tunectl("align", "sdc", "--json")
    assert r.code == 1
    keys = {"number", "name", "start_sector", "size_sectors", "start_bytes", "aligned", "off_by_bytes",
            "suggested_start_sector", "parted_optimal", "note"}
    for disk in r.doc["disks"]:
        assert set(disk) == {"device", "table", "topology", "grain_bytes", "grain_source", "warnings", "partitions"}
        for p in disk["partitions"]:
            assert set(p) == keys
    r = tunectl("align", "sda3", "sda3")
    assert r.code == 0 and "all aligned" in r.out


def test_human_table(tunectl):
    r = tunectl("align", "sda", "sdb")
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[0] == "profile: default"
    assert lines[1].split() == ["DISK", "PART", "START", "SIZE", "GRAIN", "ALIGNED", "OFF", "BY", "SUGGESTED",
                                "START", "PARTED"]
    assert lines[2].split()[:9] == ["sda", "1", "(p1)", "63s", "500", "KiB", "1", "MiB", "NO"]
    assert "4 of 6 partition(s) misaligned" in r.out
    assert "sdb: optimal_io_size 33553920" in r.err  # the warning goes to stderr
    quiet = tunectl("align", "sda", "sdb", "-q")
    assert (quiet.code, quiet.out, quiet.err) == (1, "", "")


def test_parted_without_json_falls_back_to_machine_output(tunectl, parted):
    parted.old("md0")
    assert verdicts(tunectl("align", "md0", "--json").doc, "md0")[2] == (False, True, 6144)


@pytest.mark.parametrize("argv, setup, code, message", [
    (["nosuchdisk"], None, 2, "no block device 'nosuchdisk'"),
    (["/dev/disk/by-id/nothing"], None, 2, "no block device"),
    (["-p", "nosuchprofile", "sda"], None, 2, "nosuchprofile"),
    (["sda"], ("fail", "Error: Error opening /dev/sda: Permission denied\n"), 4, "permission denied"),
    (["sda"], ("fail", "Error: Could not stat device /dev/sda - No such file or directory.\n"), 2,
     "parted: no block device"),
    (["sda"], ("fail", "Error: /dev/sda: unrecognised disk label\n"), 1, ""),
    (["sda"], ("garbage", "{not json"), 1, "not JSON"),
    (["sda"], ("fail", "Error: Input/output error during read on /dev/sda\n"), 1, "Input/output error"),
    (["--bogus-option"], None, 2, ""),
])
def test_bad_input(tunectl, parted, tmp_path, argv, setup, code, message, monkeypatch):
    monkeypatch.setattr(align_check, "_euid", lambda: 1000)  # not root: a refused open means "run as root"
    if setup and setup[0] == "fail":
        parted.fail("sda", setup[1])
    elif setup:
        (parted.dir / "sda.json").write_text(setup[1])
    r = tunectl("align", *argv)
    assert r.code == code, (r.out, r.err)
    assert message.lower() in (r.out + r.err).lower()
    assert "internal error" not in r.err and "Traceback" not in r.err
    j = tunectl("align", *argv, "--json")
    assert j.code == code and "Traceback" not in j.err
    if j.out:
        j.doc  # noqa: B018 -- one JSON document, whatever happened


def test_unreadable_profile_file(tunectl, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe: [")
    r = tunectl("align", "-p", str(bad), "sda")
    assert r.code == 2 and "internal error" not in r.err
    r = tunectl("align", "-p", str(tmp_path / "missing.yaml"), "sda")
    assert r.code == 2 and "no such profile file" in r.err


def test_garbage_topology_in_sysfs_is_read_as_defaults(tunectl, tree):
    queue = tree.root / "block" / "sda" / "queue"
    (queue / "optimal_io_size").write_text("garbage\n")
    (tree.root / "block" / "sda" / "alignment_offset").write_text("-1\n")
    r = tunectl("align", "sda", "--json")
    sda = r.doc["disks"][0]
    assert sda["topology"]["optimal_io_size"] == 0 and sda["topology"]["alignment_offset"] == -1
    assert any("alignment_offset is -1" in w for w in sda["warnings"])
    assert "internal error" not in r.err


def test_the_core_is_pure():
    """Parsing and arithmetic import no edge: no sysfs, no runner, no subprocess."""
    import subprocess
    import sys

    code = ("import sys, tunectl.align.table, tunectl.align.verdict; "
            "print(sorted(m for m in sys.modules if m.startswith('tunectl.system') or m in "
            "('subprocess', 'pathlib', 'tunectl.context')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_fake_sysfs_root_never_reaches_a_real_device(empty_fake_tree, tmp_path, monkeypatch):
    """`align --sysfs-root FAKE` on a tree naming vda (this machine's disk too): parted is never started."""
    empty_fake_tree.add_disk("vda", size_sectors=131072)
    log = tmp_path / "parted.log"
    stub = tmp_path / "bin" / "parted"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 1\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    env = {"PATH": os.environ["PATH"], "TUNECTL_STATE_DIR": str(tmp_path / "state")}
    r = run_cli("--sysfs-root", str(empty_fake_tree.root), "align", "--json", env=env)
    assert r.code == 0 and r.doc["disks"] == [], r.err
    assert "vda: skipped: no device node for vda" in r.err
    r = run_cli("--sysfs-root", str(empty_fake_tree.root), "align", "vda", env=env)
    assert r.code == 2 and "no device node for vda" in r.err
    assert not log.exists()


@pytest.mark.parametrize("width", [60, 80, 132])
def test_the_table_and_its_notes_fit_the_terminal(tree, parted, tunectl, tmp_path, width):
    wide = tunectl("align", "-v").out
    narrow = Tunectl(tree, tmp_path / "state", [tmp_path / "profiles"],
                     {**tunectl.ctx.env, "COLUMNS": str(width)})("align", "-o", "disk,part,aligned,off-by,suggested-start")
    assert max(map(len, wide.splitlines())) > 132  # the notes are long sentences
    assert narrow.code == 1 and all(len(line) <= width for line in narrow.out.splitlines()), narrow.out
    assert narrow.out.splitlines()[0].split() == ["DISK", "PART", "ALIGNED", "OFF", "BY", "SUGGESTED", "START"]
    assert "profile: default" in narrow.err.splitlines()  # with -o, stdout starts with the table
    assert "stricter than parted" in " ".join(narrow.out.split())


def test_a_name_standing_for_several_disks_pairs_each_with_its_own_partitions(tree, parted, tmp_path):
    """`align /srv/raid sda3`: the mountpoint stands for the four disks under md0, sda3 for partition 3 of sda.
    Zipping the names with the disks found gave sda3's partition filter to sde and left sda out (#33)."""
    parted.table("sda", "512e.fake")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(mountinfo_line(tree, 30, "md0", "/srv/raid", "xfs", "/dev/md0") + "\n")
    t = Tunectl(tree, tmp_path / "state", None, {"TUNECTL_DEV_ROOT": str(tmp_path / "dev"),
                                                 "TUNECTL_PROC_ROOT": str(proc)})
    doc = t("align", "/srv/raid", "sda3", "--json").doc
    disks = {d["device"]: d for d in doc["disks"]}
    assert sorted(disks) == ["sda", "sdd", "sde", "sdf", "sdg"]
    assert [p["number"] for p in disks["sda"]["partitions"]] == [3]
    assert disks["sde"]["warnings"] == ["no partition table"]


def test_root_refused_by_every_disk_is_told_they_are_off_limits_not_to_run_as_root(tunectl, parted, monkeypatch):
    """A container where even root cannot open the disk: each disk listed as unreadable, exit 1 (tunectl-align(8))."""
    monkeypatch.setattr(align_check, "_euid", lambda: 0)
    parted.fail("sda", "Error: Error opening /dev/sda: Permission denied\n")
    r = tunectl("align", "sda")
    assert r.code == 1, (r.out, r.err)
    assert "off limits here even to root" in r.text and "parted could not read sda" in r.text, r.text
    assert "run as root" not in r.text, r.text
    monkeypatch.setattr(align_check, "_euid", lambda: 1000)
    r = tunectl("align", "sda")
    assert r.code == 4 and "run as root" in r.text, r.text


def test_not_root_is_told_first_that_align_needs_root_then_what_setpriv_said(tunectl, parted, monkeypatch):
    """As an ordinary user setpriv cannot change user: the message leads with what is wrong in the user's terms."""
    monkeypatch.setattr(align_check, "_euid", lambda: 1000)
    setpriv = parted.dir / "setpriv"  # before the real one on PATH: refuses as it does for a user who is not root
    setpriv.write_text("#!/bin/sh\necho 'setpriv: setgroups failed: Operation not permitted' >&2\nexit 127\n")
    setpriv.chmod(0o755)
    for argv in (["sda"], []):
        r = tunectl("align", *argv)
        assert r.code == 4, (r.out, r.err)
        first = r.err.splitlines()[0]
        assert first.startswith("tunectl: error: align needs root: it opens each disk read-only through parted"), first
        assert first.index("align needs root") < first.index("setpriv: setgroups failed"), first
        assert r.err.splitlines()[1].startswith("hint: run as root"), r.err
        j = tunectl("align", *argv, "--json")
        assert j.code == 4 and j.doc["error"]["code"] == "not-permitted"
        assert j.doc["error"]["message"].startswith("align needs root"), j.doc


# --- the parted edge: parted runs with read access only, and a refusal is said, not worked around


def test_parted_runs_as_nobody_with_read_access_only_and_its_warning_is_not_news():
    from tunectl.system.parted import Parted
    from tunectl.system.runner import Completed

    seen = []

    def run(argv, **_kw):
        seen.append(tuple(argv))
        return Completed(tuple(argv), 1, "", "Warning: Unable to open /dev/x read-write (Permission denied).  "
                                             "/dev/x has been opened read-only.\nError: /dev/x: unrecognised disk label\n")

    out = Parted(run=run).print_table("/dev/x")
    assert out.has_table is False
    setpriv = seen[0][:seen[0].index("--") + 1]
    assert setpriv[0] == "setpriv" and "--reuid=65534" in setpriv and "--clear-groups" in setpriv
    assert "--inh-caps=-all,+dac_read_search" in setpriv and "--ambient-caps=+dac_read_search" in setpriv
    assert seen[0][len(setpriv):] == ("parted", "-j", "-s", "/dev/x", "unit", "s", "print")


def test_refused_setpriv_is_not_permitted_and_parted_is_not_run_the_writing_way():
    from tunectl.errors import ExitCode, NotPermitted
    from tunectl.system.parted import Parted
    from tunectl.system.runner import Completed

    seen = []

    def run(argv, **_kw):
        seen.append(tuple(argv))
        return Completed(tuple(argv), 127, "", "setpriv: setresuid failed: Operation not permitted\n")

    with pytest.raises(NotPermitted) as e:
        Parted(run=run).print_table("/dev/x")
    assert e.value.exit_code == ExitCode.NOT_PERMITTED
    assert "cannot run parted read-only for /dev/x: setpriv: setresuid failed" in str(e.value)
    assert len(seen) == 1 and seen[0][0] == "setpriv"


# --- device-mapper devices: parted cannot read them read-only, blkid says whether a table is there

# parted 3.5 under align's setpriv line on an LV (recorded in a 6.1 guest), its bug report cut
PARTED_ON_DM = ("/dev/mapper/control: open failed: Permission denied\nFailure to communicate with kernel "
                "device-mapper driver.\nYou found a bug in GNU Parted! Here's what you have to do:\n"
                "Unable to determine the dm type of /dev/dm-0.\n")


def dos_table(path: Path) -> None:
    """1 MiB holding an MBR with one partition at 2048s: what blkid calls PTTYPE=dos."""
    mbr = bytearray(512)
    mbr[446:462] = bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little") + (2048).to_bytes(4, "little")
    mbr[510:512] = b"\x55\xaa"
    path.write_bytes(bytes(mbr) + bytes((1 << 20) - 512))


@pytest.fixture
def mapped(tree, parted, tunectl, tmp_path) -> Tunectl:
    """dm-0: an LV (no table), dm-1: a multipath map holding an msdos table; parted fails on both as it does."""
    tree.add_disk("sdh", size_sectors=65536)
    tree.add_disk("sdi", size_sectors=65536)
    tree.add_dm("dm-0", "vg-lv", "LVM-k6vYnw0KDrWh4eJ2XUr8ceAcpc4Q1hBu", ["sdh"])
    tree.add_dm("dm-1", "mpatha", "mpath-3600a0b80", ["sdi"])
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    (dev / "dm-0").write_bytes(bytes(1 << 20))
    dos_table(dev / "dm-1")
    for name in ("dm-0", "dm-1"):
        parted.fail(name, PARTED_ON_DM.replace("dm-0", name))
    return tunectl


def test_a_dm_device_without_a_table_is_left_out_as_parted_as_root_would(mapped):
    """parted cannot open a dm device without CAP_SYS_ADMIN; blkid (read-only too) says there is no table."""
    doc = mapped("align", "--json").doc
    assert "dm-0" not in [d["device"] for d in doc["disks"]]
    r = mapped("align", "/dev/mapper/vg-lv", "--json")
    assert r.code == 1 and r.doc["disks"][0]["table"] is None, r.err
    assert r.doc["disks"][0]["warnings"] == ["no partition table"]


def test_a_table_on_a_dm_device_cannot_be_checked_and_says_so(mapped):
    r = mapped("align", "dm-1")
    assert r.code == 1, (r.out, r.err)
    assert "cannot check alignment of" in r.text and "it holds a dos partition table" in r.text, r.text
    assert "bug in GNU Parted" not in r.text
    doc = mapped("align", "--json").doc
    assert any("cannot check alignment" in w for d in doc["disks"] if d["device"] == "dm-1" for w in d["warnings"])


def test_a_dm_device_is_probed_by_blkid_with_read_access_only(tmp_path):
    from tunectl.system.parted import Parted, PartedError
    from tunectl.system.runner import Completed

    seen = []
    node = tmp_path / "dm-0"
    node.write_bytes(b"")

    answers = [(2, ""), (0, f"DEVNAME={node}\nPTUUID=3fcc45fc\nPTTYPE=gpt\n")]  # 2: blkid found nothing

    def run(argv, **_kw):
        seen.append(tuple(argv))
        code, out = answers[len(seen) - 1]
        return Completed(tuple(argv), code, out, "")

    assert Parted(run=run).print_table(str(node), mapped=True).has_table is False
    setpriv = seen[0][:seen[0].index("--") + 1]
    assert setpriv[0] == "setpriv" and "--inh-caps=-all,+dac_read_search" in setpriv
    assert seen[0][len(setpriv):] == ("blkid", "-p", "-o", "export", str(node))
    with pytest.raises(PartedError, match="it holds a gpt partition table"):
        Parted(run=run).print_table(str(node), mapped=True)
    assert not any("parted" in argv for argv in seen)
