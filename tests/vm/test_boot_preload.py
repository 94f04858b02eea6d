"""tunectl preload at two boots of the model HDD: boot 1 collects, boot 2 replays beside the boot workload.

Two boots of the 6.1 guest on the same disk images (guest groups `bootpair1`, `bootpair2`,
tests/vm/guest/bootpair.py). The model HDD holds the booted machine's file system: a tree of
400 files (shuffled write order) and the preload state. The boot workload is a service that
reads the whole tree in directory order (tests/vm/guest/bootload.py).

systemd did not run the units: virtme-ng's guest has no systemd as PID 1 here. The guest runs the
units' own ExecStart lines, read from udev/tunectl-preload-{collect,replay}.service at run time
with their Nice=, IOSchedulingClass=, StateDirectory= and ConditionPathExists=, paths below the model
disk's mount point; Type=exec is kept by starting the replay and not waiting for it. The unit files
themselves pass `systemd-analyze verify` (tests/unit/preload/test_preload.py).

The ratio is asserted on the disk's account: the reads the model HDD served during the workload
(boot 2: from the replay's start to the workload's end, the replay's reads included), replayed through
the model with a real machine's host cost per request (machine.step_modelled). The guest's own wall
seconds are printed beside; under TCG they carry Python start-up and emulated CPU that no ordering wins
back. Target (#30): the workload at least 2x sooner with the replay, asserted as is: the run that
landed this measured 20.4x (2.296 s cold, 0.113 s with the replay), so 2x leaves a wide margin. Under TCG
the workload (Python under `preload record`) starts seconds after the replay (23 s in that run): the
replay has mostly finished by then, a head start a real boot does not give; boot 2's modelled time
still counts every read of the replay. Adds two boots, about 4 minutes.
"""

from __future__ import annotations

import pytest

from tests.vm import machine

TARGET = 2.0


@pytest.fixture(scope="module")
def pair(vm_boot) -> dict:
    first = vm_boot("6.1", "bootpair1", images="bootpair", kind="model")
    assert not first.results["errors"], first.results["errors"]
    cold = machine.step_modelled(first, "workload")  # before boot 2 empties the model's request log
    second = vm_boot("6.1", "bootpair2", images="bootpair", kind="model")
    assert not second.results["errors"], second.results["errors"]
    marks = second.results["marks"]["workload"]
    ahead = machine.requests(second.shared / "mhdd.requests", marks["before"]["mhdd"],
                             second.results["workload"]["mark"])
    return {"first": first.results, "second": second.results, "cold": cold,
            "replayed": machine.step_modelled(second, "workload"), "ahead": len(ahead),
            "together": machine.step_modelled(second, "together")}


def test_boot_1_runs_the_collect_unit_and_writes_the_list(pair: dict) -> None:
    first = pair["first"]
    assert first["collect_condition"], "the collect unit's ConditionPathExists=! held: no list before boot 1"
    assert first["collect"]["code"] == 0, first["collect"]
    assert first["collect"]["command"][:4] == ["nice", "-n", "19", "ionice"], first["collect"]["command"]
    listed = first["list"]["doc"]
    assert first["list"]["code"] == 0, first["list"]
    assert listed["files"] == first["tree"]["files"] == first["workload"]["files"], listed


def test_boot_2_runs_the_replay_unit(pair: dict) -> None:
    second = pair["second"]
    # the list names where its file system was mounted: boot 2 finds it there under whatever number it has
    # now (the two SCSI disks are probed in either order, so sdb at boot 1 may be sda at boot 2)
    assert list(pair["first"]["list"]["mounts"].values()) == ["/tmp/bootroot"], pair["first"]["list"]
    assert second["replay_condition"], "the replay unit's ConditionPathExists= did not see boot 1's list"
    assert second["replay"]["success"], second["replay"]
    assert second["replay_command"][:3] == ["nice", "-n", "-5"], second["replay_command"]
    assert second["workload"]["files"] == pair["first"]["workload"]["files"]


def test_the_boot_workload_is_at_least_twice_as_soon_with_the_replay(pair: dict) -> None:
    (n1, cold), (n2, replayed), (n3, together) = pair["cold"], pair["replayed"], pair["together"]
    one, two = pair["first"], pair["second"]
    guest = (one["workload"]["seconds"], two["workload"]["seconds"], two["together"]["seconds"])
    head = two["workload"]["started"] - two["workload"]["replay_started"]
    why = (f"modelled: cold {cold:.3f} s ({n1} reads), with the replay {replayed:.3f} s ({n2} reads, "
           f"{pair['ahead']} of them before the workload began, {head:.1f} s after the replay under TCG), "
           f"{cold / replayed:.2f}x; started at the same instant {together:.3f} s ({n3} reads), "
           f"{cold / together:.2f}x; guest wall under TCG: {guest[0]:.2f} s, {guest[1]:.2f} s, {guest[2]:.2f} s")
    print(why)
    assert cold >= TARGET * replayed, why


def test_the_hit_rate_after_boot_2(pair: dict) -> None:
    stats = pair["second"]["stats"]
    assert stats["code"] == 0, stats
    hit = stats["doc"]["stats"]["hit_rate"]
    print(hit)
    assert hit["used"] >= 0.9 and hit["missed"] <= 0.1, hit
    assert not hit["recollect"], hit
