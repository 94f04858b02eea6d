"""Ranges {min, max} on the fake kernel (SPEC.md §3): below, inside and above; knobs across a scheduler
switch; verify; the journal and rollback. Through the real CLI, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl, snapshot_all

RA_RANGE = """\
name: ra-range
classes:
  ssd: {read_ahead_kb: {min: 1024, max: "4 MiB"}}
"""

SWITCH = """\
name: switch
classes:
  ssd:
    scheduler: bfq
    iosched: {slice_idle: {max: 4}, fifo_expire_sync: {min: 100}, back_seek_penalty: {min: 5, max: 10}}
    queue: {nr_requests: {min: 32}}
"""


def _tunectl(tree: FakeTree, tmp_path: Path, text: str, name: str) -> Tunectl:
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / f"{name}.yaml").write_text(text)
    return Tunectl(tree, tmp_path / "state", [profiles])


@pytest.fixture
def three_ssds(empty_fake_tree: FakeTree) -> FakeTree:
    """sda below the range (128), sdb inside (2048), sdc above (8192: a 4 MiB io_opt, as the kernel derives it)."""
    for name, ra in (("sda", 128), ("sdb", 2048), ("sdc", 8192)):
        empty_fake_tree.add_disk(name, read_ahead_kb=ra)
    return empty_fake_tree


def _by_device(doc: dict, attribute: str) -> dict[str, dict]:
    return {s["device"]: s for s in doc["settings"] if s["attribute"] == attribute}


def _read(tree: FakeTree, name: str, attr: str) -> str:
    return (tree.root / "block" / name / "queue" / attr).read_text().strip()


def test_below_inside_above(three_ssds: FakeTree, tmp_path: Path) -> None:
    tunectl = _tunectl(three_ssds, tmp_path, RA_RANGE, "ra-range")
    plan = tunectl("plan", "-p", "ra-range", "--json")
    ra = _by_device(plan.doc, "read_ahead_kb")
    assert {d: (s["before"], s["after"], s["status"]) for d, s in ra.items()} == {
        "sda": (128, 1024, "change"), "sdb": (2048, 2048, "ok"), "sdc": (8192, 4096, "change")}
    assert all(s["range"] == {"min": 1024, "max": 4096} for s in ra.values())

    human = tunectl("plan", "-p", "ra-range", "-v")
    assert "128 -> 1024 (in 1024..4096)" in human.out
    assert "2048 -> 2048 (in 1024..4096)" in human.out
    assert "8192 -> 4096 (in 1024..4096)" in human.out

    applied = tunectl("apply", "-p", "ra-range", "--json")
    assert applied.code == 0 and applied.doc["changed"] is True
    assert [_read(three_ssds, d, "read_ahead_kb") for d in ("sda", "sdb", "sdc")] == ["1024", "2048", "4096"]
    assert tunectl("verify", "-p", "ra-range").code == 0
    again = tunectl("apply", "-p", "ra-range", "--json")
    assert again.doc["changed"] is False


def test_verify_counts_inside_as_in_sync_and_outside_as_drift(three_ssds: FakeTree, tmp_path: Path) -> None:
    tunectl = _tunectl(three_ssds, tmp_path, RA_RANGE, "ra-range")
    assert tunectl("apply", "-p", "ra-range").code == 0
    three_ssds.sysfs.write("block/sda/queue/read_ahead_kb", "3000")  # moved, but still inside
    r = tunectl("verify", "-p", "ra-range", "--json")
    assert r.code == 0 and r.doc["in_sync"] is True
    three_ssds.sysfs.write("block/sda/queue/read_ahead_kb", "512")  # below the floor
    three_ssds.sysfs.write("block/sdb/queue/read_ahead_kb", "16384")  # above the cap
    r = tunectl("verify", "-p", "ra-range", "--json")
    assert r.code == 1
    drift = {s["device"]: (s["before"], s["after"]) for s in r.doc["settings"] if s["status"] == "change"}
    assert drift == {"sda": (512, 1024), "sdb": (16384, 4096)}
    human = tunectl("verify", "-p", "ra-range")
    assert "drift: 2 setting(s) differ" in human.out and "512 -> 1024 (in 1024..4096)" in human.out


def test_rollback_after_a_raise_restores_the_original(three_ssds: FakeTree, tmp_path: Path) -> None:
    tunectl = _tunectl(three_ssds, tmp_path, RA_RANGE, "ra-range")
    originals = snapshot_all(three_ssds)
    assert tunectl("apply", "-p", "ra-range").code == 0
    assert _read(three_ssds, "sda", "read_ahead_kb") == "1024"
    from tunectl.tuning import journal

    entries = {e.name: e.attributes for e in journal.load(tunectl.ctx.state).devices.values()}
    assert entries["sda"]["read_ahead_kb"] == 128 and "sdb" not in entries  # the value before the raise; sdb untouched
    r = tunectl("rollback", "--json")
    assert r.code == 0
    assert snapshot_all(three_ssds) == originals


def test_knob_ranges_across_a_scheduler_switch(empty_fake_tree: FakeTree, tmp_path: Path) -> None:
    """After a switch the kernel sets bfq's defaults: slice_idle 8 (above the cap 4), fifo_expire_sync 125
    (inside 100..), back_seek_penalty 2 (below 5); nr_requests is reset to 64 (inside 32..)."""
    empty_fake_tree.add_disk("sda", active="mq-deadline")
    originals = snapshot_all(empty_fake_tree)
    tunectl = _tunectl(empty_fake_tree, tmp_path, SWITCH, "switch")
    plan = tunectl("plan", "-p", "switch", "--json").doc
    knobs = {s["attribute"]: s for s in plan["settings"]}
    assert knobs["iosched/slice_idle"]["after"] is None and knobs["iosched/slice_idle"]["range"] == {"max": 4}
    assert "the kernel's default stays if inside the range" in knobs["iosched/fifo_expire_sync"]["reason"]
    assert knobs["nr_requests"]["status"] == "change"  # the switch resets it: decided after, on the reset value
    assert knobs["nr_requests"]["reason"].endswith("; kept if the reset value is inside the range")
    human = tunectl("plan", "-p", "switch")
    assert "- -> ..4" in human.out and "- -> 100.." in human.out
    diff = tunectl("apply", "-p", "switch", "--check", "--diff")
    assert "\n-iosched/slice_idle: -\n" in diff.out and "\n+iosched/slice_idle: ..4\n" in diff.out  # set by the switch

    applied = tunectl("apply", "-p", "switch", "--json")
    assert applied.code == 0, applied.out
    outcome = {s["attribute"]: s for s in applied.doc["settings"]}
    assert (outcome["iosched/slice_idle"]["status"], outcome["iosched/slice_idle"]["after"]) == ("changed", 4)
    assert (outcome["iosched/back_seek_penalty"]["status"], outcome["iosched/back_seek_penalty"]["after"]) == ("changed", 5)
    assert (outcome["iosched/fifo_expire_sync"]["status"], outcome["iosched/fifo_expire_sync"]["readback"]) == ("ok", 125)
    assert outcome["nr_requests"]["status"] == "ok" and outcome["nr_requests"]["readback"] == 64
    iosched = empty_fake_tree.root / "block/sda/queue/iosched"
    assert [(iosched / k).read_text().strip() for k in ("slice_idle", "fifo_expire_sync", "back_seek_penalty")] == \
        ["4", "125", "5"]
    verify = tunectl("verify", "-p", "switch", "--json")
    assert verify.code == 0, verify.out
    assert tunectl("rollback").code == 0
    assert snapshot_all(empty_fake_tree) == originals


def test_range_in_a_devices_entry_and_below(fake_tree: FakeTree, tmp_path: Path) -> None:
    text = ("name: stacked\nclasses:\n  dm: {read_ahead_kb: {min: 2048}}\n"
            "devices:\n  - match: {dm_type: verity}\n    below: {scheduler: mq-deadline, iosched: {fifo_batch: {max: 8}}}\n"
            "  - match: {kernel: nvme0n1}\n    queue: {nomerges: {min: 1}}\n")
    tunectl = _tunectl(fake_tree, tmp_path, text, "stacked")
    assert tunectl("apply", "-p", "stacked").code == 0
    assert tunectl("verify", "-p", "stacked").code == 0
    plan = tunectl("plan", "-p", "stacked", "--json").doc
    fifo = [s for s in plan["settings"] if s["attribute"] == "iosched/fifo_batch"]
    assert fifo and all(s["status"] == "ok" and s["before"] <= 8 and s["range"] == {"max": 8} for s in fifo)
    assert all(int(_read(fake_tree, s["device"], "iosched/fifo_batch")) <= 8 for s in fifo)
    assert _read(fake_tree, "nvme0n1", "nomerges") == "1"
    dm = [s for s in plan["settings"] if s["attribute"] == "read_ahead_kb" and s["device"].startswith("dm-")]
    assert dm and all(s["before"] >= 2048 for s in dm)
