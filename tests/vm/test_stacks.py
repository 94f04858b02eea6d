"""`below:` through dm-verity, LUKS2, plain dm-crypt and LVM on md, and the udev rules against those stacks.

One boot per kernel (guest group `stacks`, see tests/vm/guest/stacks.py). Regression
tests for what the first real-kernel runs found: rules that undid `below:` on a lower
disk's own change event, a udev RUN that journalled the rules' values as originals
and replaced the scope of the last apply, and nr_requests on 6.1's dm/md queues.
"""

from __future__ import annotations

import os

import pytest

BELOW = {"hdd": "plainc", "nvme": "luksc", "sd": "vroot", "sata": "vgt-lvt", "virt": "vgt-lvt"}
UNDER_STACK = sorted(BELOW)
STACKED = ["plainc", "luksc", "vroot", "vgt-lvt"]


# CI boots the stacks on 6.1 only (a boot takes ~14 min under TCG); TUNECTL_VM_STACKS=6.1,6.12 boots both.
SERIES = os.environ.get("TUNECTL_VM_STACKS", "6.1").split(",")


@pytest.fixture(scope="module", params=SERIES)
def run(request: pytest.FixtureRequest, vm_boot) -> dict:
    results = vm_boot(request.param, "stacks").results
    assert not results["errors"], results["errors"]
    return results


def test_the_stacks_exist_and_classify(run: dict) -> None:
    status = run["status"]["devices"]
    types = {name: status[run["dm"][name]]["dm_type"] for name in STACKED}
    assert types == {"plainc": "crypt", "luksc": "crypt", "vroot": "verity", "vgt-lvt": "lvm"}
    assert status[run["md"]]["class"] == "md"
    assert all(status[run["dm"][name]]["class"] == "dm" for name in STACKED)


@pytest.mark.parametrize("role", UNDER_STACK)
def test_apply_sets_below_on_the_disks_under_each_stack(run: dict, role: str) -> None:
    assert run["apply"]["code"] == 0, run["apply"]["stderr"]
    assert run["after_apply"][role]["scheduler"] == "mq-deadline"


def test_a_disk_under_no_stack_keeps_its_class(run: dict) -> None:
    assert run["after_apply"]["ssd"]["scheduler"] == "kyber"


@pytest.mark.parametrize("name", STACKED)
def test_apply_sets_read_ahead_on_the_stacked_devices(run: dict, name: str) -> None:
    assert run["after_apply"][name]["read_ahead_kb"] == "2048"
    assert run["after_apply"]["md"]["read_ahead_kb"] == "1024"


def test_bio_based_queues_reject_nr_requests_and_the_plan_skips_it(run: dict) -> None:
    """6.1 lists nr_requests on dm and md queues (no mq/) but refuses writes: not a change, not a failure."""
    for dev, err in run["nr_requests_write"].items():
        assert err, f"{dev}: the kernel took an nr_requests write on a bio-based queue"  # 6.1: EIO
    stacked = {run["dm"][n] for n in STACKED} | {run["md"]}
    nr = [s for s in run["plan"]["doc"]["settings"] if s["device"] in stacked and s["attribute"] == "nr_requests"]
    assert nr and all(s["status"] == "skip" for s in nr), nr
    assert run["apply"]["code"] == 0
    assert run["verify_after_apply"] == 0


def test_verify_in_sync_after_apply(run: dict) -> None:
    assert run["verify_after_apply"] == 0


def test_rules_install(run: dict) -> None:
    assert run["udev_install"]["code"] == 0, run["udev_install"]["stderr"]
    assert 'ENV{TUNECTL_UNDER}=="1", RUN+=' in run["rules"]


def test_align_on_the_stacks_says_what_root_parted_says(run: dict) -> None:
    """parted cannot open a dm device read-only (libparted asks device-mapper, which needs CAP_SYS_ADMIN): align asks
    blkid instead. LV, both dm-crypts, verity and md0 (an LVM PV) have no table, as root's parted says; sda's is read."""
    align = run["align"]
    named = align["named"]
    assert named["code"] == 1, named  # named devices without a table
    disks = {d["device"]: d for d in named["doc"]["disks"]}
    stacked = [run["dm"][n] for n in STACKED] + [run["md"]]
    for dev, line in zip(align["named_devices"], align["root_parted"].values()):
        assert ":unknown:" in line[0] or dev == f"/dev/{run['disks']['hdd']}", (dev, line)  # root's parted: no table
    for dev in stacked:
        assert (disks[dev]["table"], disks[dev]["warnings"]) == (None, ["no partition table"]), disks[dev]
    sda = disks[run["disks"]["hdd"]]
    assert sda["table"] == "gpt" and ":gpt:" in align["root_parted"][f"/dev/{run['disks']['hdd']}"][0]
    assert [(p["start_sector"], p["aligned"], p["parted_optimal"]) for p in sda["partitions"]] == [(2048, True, True)]
    every = align["all"]
    assert every["code"] == 0 and every["doc"]["ok"], every  # no stacked device is unreadable, none listed
    assert not {d["device"] for d in every["doc"]["disks"]} & set(stacked), every["doc"]["disks"]
    assert "bug in GNU Parted" not in named["stderr"] + every["stderr"]


def test_align_on_the_stacks_fires_no_kernel_event(run: dict) -> None:
    """Between two change events on a disk under no stack, `udevadm monitor --kernel` saw nothing: align opened
    no device for writing (no close-after-write for udev's watch) and asked for no re-read."""
    assert run["align"]["events"] == []


EVENTS = ["parted_print_sda", "align_nvme", "change_md_member", "change_sd", "change_lv"]


def test_align_fires_no_change_event(run: dict) -> None:
    """`tunectl align` reads the table with parted unable to open the disk for writing: no close-after-write, so
    no udev watch event; the NVMe moved by hand before it stays moved (plain parted on sda fires one)."""
    assert run["events"]["align_nvme"]["after_command"] == "none"
    assert run["events"]["parted_print_sda"]["after_command"] == run["after_apply"]["hdd"]["scheduler"]


@pytest.mark.parametrize("event", EVENTS)
def test_a_change_event_below_a_stack_keeps_below(run: dict, event: str) -> None:
    """parted opening sda, a change event on the NVMe after `tunectl align` on it, a trigger on an md member: the
    disk ends where apply left it."""
    after = run["events"][event]
    assert after["moved_to"] == "none"  # moved by hand first: only the rules bring it back
    expected = {role: run["after_apply"][role]["scheduler"] for role in after["schedulers"]}
    assert after["schedulers"] == expected
    assert after["verify"] == 0


@pytest.mark.parametrize("event", EVENTS)
def test_what_udev_runs_journals_nothing_and_keeps_the_scope(run: dict, event: str) -> None:
    after = run["events"][event]
    # install journalled first; no original journalled before the event is replaced or dropped. (The verify
    # after each event may add what the rules kept for a value they changed: tunectl.tuning.adopt.)
    for identity, kept in run["originals_after_install"].items():
        assert {a: after["originals"].get(identity, {}).get(a) for a in kept} == kept, identity
    assert after["active"] == run["active_after_install"]


def test_originals_are_the_kernels(run: dict) -> None:
    """The journal holds what the kernel had before apply: none/mq-deadline, never the rules' bfq or kyber."""
    status = run["status"]["devices"]
    journalled = 0
    for role in UNDER_STACK:
        dev = run["disks"][role]
        kernel = run["kernel_before"][role]["scheduler"]
        entry = run["originals_after_apply"].get(status[dev]["identity"])
        if kernel == "mq-deadline":  # already what below: wants: nothing changed, nothing journalled
            assert entry is None or "scheduler" not in entry, (role, entry)
            continue
        assert entry["scheduler"] == kernel, role
        journalled += 1
    assert journalled >= 3


def test_a_stack_created_after_the_rules_is_tuned(run: dict) -> None:
    new = run["new_stack"]
    assert new["moved"] == "none"
    assert new["sd"]["scheduler"] == "mq-deadline"
    assert new["dm"]["read_ahead_kb"] == "2048"
    assert new["verify"] == 0


@pytest.mark.parametrize("role", sorted(BELOW) + ["ssd"])
def test_udev_remove_and_rollback_restore_the_kernels_values(run: dict, role: str) -> None:
    assert run["udev_remove"]["code"] == 0 and run["rollback"]["code"] == 0, (run["udev_remove"], run["rollback"])
    before, after = run["kernel_before"][role], run["after_rollback"][role]
    assert (after["scheduler"], after["read_ahead_kb"]) == (before["scheduler"], before["read_ahead_kb"])


@pytest.mark.parametrize("name", STACKED + ["md"])
def test_rollback_restores_the_stacked_devices(run: dict, name: str) -> None:
    assert run["after_rollback"][name]["read_ahead_kb"] == run["built"][name]["read_ahead_kb"]


def test_bench_sweeps_the_schedulers_built_as_modules(run: dict) -> None:
    """The SD card under the browser stack offers bfq and kyber only as modules; bench sweeps them as apply would."""
    bench = run["bench"]
    assert bench["code"] == 0, bench["stderr"]
    assert {"bfq", "kyber", "mq-deadline"} <= set(bench["doc"]["schedulers"])
    assert bench["doc"]["scheduled"] == [run["disks"]["sd"]]


def keeps_partial_blocks(run: dict) -> bool:
    """From 6.5 ("squashfs: cache partial compressed blocks") squashfs keeps the device pages a compressed block
    shares with its neighbours in a page cache of its own when its device block size is the page size, as on this
    4 KiB dm-verity. Only an unmount or vm.drop_caches empties it: bench's drops between points do not, and after
    bench's warm read nearly every page a 4 KiB gzip block needs is such a shared page."""
    major, minor = (int(x) for x in run["kernel"].split(".")[:2])
    return (major, minor) >= (6, 5)


def test_bench_shows_where_requests_merge_on_the_browser_stack(run: dict) -> None:
    """Per device of the stack (verity, the SD card) and per point: reads issued and the share merged."""
    doc = run["bench"]["doc"]
    stats = [d for p in doc["points"] for d in p["devices"]]
    assert {run["dm"]["vroot"], run["disks"]["sd"]} <= {d["device"] for d in stats}, doc["points"][0]
    sd = [d for d in stats if d["device"] == run["disks"]["sd"]]
    assert all(0 <= d["merged_share"] <= 1 for d in sd), sd
    if keeps_partial_blocks(run):  # the 2 MiB read needs 512 blocks; squashfs's own cache holds nearly all of them
        assert all(d["reads"] < 512 // 8 for d in sd), sd
        assert "squashfs" in doc["recommendation"]["caution"] and "vm.drop_caches" in doc["recommendation"]["caution"]
    else:
        assert all(d["reads"] > 0 and d["avg_request_kib"] > 0 for d in sd), sd
        assert doc["recommendation"]["caution"] is None
    assert not doc["restore_failed"]


def test_bench_recommends_no_read_ahead_where_it_changes_nothing(run: dict) -> None:
    """squashfs reads one 4 KiB-block at a time: the requests below stay the same size at every read-ahead. From 6.5
    nearly none reach the SD card (see keeps_partial_blocks): no read-ahead either, whatever the timings say."""
    doc = run["bench"]["doc"]
    sd = run["disks"]["sd"]
    sizes = {p["read_ahead_kb"]: d["avg_request_kib"] for p in doc["points"] for d in p["devices"]
             if d["device"] == sd and d["reads"]}
    assert keeps_partial_blocks(run) or len(sizes) == 3, sizes
    assert not sizes or max(sizes.values()) <= min(sizes.values()) * 1.1, sizes
    rec = doc["recommendation"]
    assert rec["read_ahead_kb"] is None, rec
    assert "squashfs" in rec["reason"] or ("no read reached" in rec["reason"] and keeps_partial_blocks(run)), rec
