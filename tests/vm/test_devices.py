"""The rules on hot-remove and rescan, alignment against `parted align-check`, mounts with discard, preload.

One boot of the 6.1 kernel (guest group `devices`, see tests/vm/guest/devices.py); every
assertion reads what the guest's sysfs, mountinfo, parted or fincore showed.
"""

from __future__ import annotations

import pytest

WANTED = {"hdd": ("bfq", "1024"), "nvme": ("kyber", "512")}


@pytest.fixture(scope="module")
def run(vm_boot) -> dict:
    results = vm_boot("6.1", "devices").results
    assert not results["errors"], results["errors"]
    return results


def test_apply_and_rules_before_the_hotplug(run: dict) -> None:
    assert run["hotplug_apply"]["code"] == 0, run["hotplug_apply"]["stderr"]
    assert run["hotplug_install"]["code"] == 0, run["hotplug_install"]["stderr"]
    for role, (scheduler, read_ahead) in WANTED.items():
        assert (run["hotplug_applied"][role]["scheduler"], run["hotplug_applied"][role]["read_ahead_kb"]) == (
            scheduler, read_ahead), role


@pytest.mark.parametrize(("step", "role"), [("scsi_rescan", "hdd"), ("nvme_rescan", "nvme")])
def test_the_rules_tune_a_disk_found_again(run: dict, step: str, role: str) -> None:
    """SCSI: device/delete then a host scan; NVMe: PCI remove then a bus rescan. The new device is the rules' work."""
    event = run[step]
    assert event["gone"], f"{role} was still there after its removal"
    assert (event["after"]["scheduler"], event["after"]["read_ahead_kb"]) == WANTED[role]


def test_verify_in_sync_after_the_hotplug(run: dict) -> None:
    assert run["hotplug_verify"] == 0


@pytest.mark.parametrize("role", sorted(WANTED))
def test_udev_remove_and_rollback_after_the_hotplug(run: dict, role: str) -> None:
    assert run["hotplug_remove"]["code"] == 0 and run["hotplug_rollback"]["code"] == 0, (
        run["hotplug_remove"], run["hotplug_rollback"])
    kernel, after = run["hotplug_kernel"][role], run["hotplug_rolled_back"][role]
    assert (after["scheduler"], after["read_ahead_kb"]) == (kernel["scheduler"], kernel["read_ahead_kb"])


def test_the_ssd_is_512e_with_an_optimal_io_size(run: dict) -> None:
    assert run["align"]["topology"] == {"logical_block_size": "512", "physical_block_size": "4096",
                                        "minimum_io_size": "4096", "optimal_io_size": "65536"}


def test_align_agrees_with_parted_align_check(run: dict) -> None:
    """At 1 MiB: aligned; on a 4 KiB boundary that is no 64 KiB one: misaligned; on an odd sector: misaligned."""
    align = run["align"]
    assert align["code"] == 1, align["stderr"]
    [disk] = align["doc"]["disks"]
    verdicts = {str(p["number"]): p["aligned"] for p in disk["partitions"]}
    assert verdicts == {"1": True, "2": False, "3": False}
    assert verdicts == {n: check["optimal"] for n, check in align["parted"].items()}
    assert {str(p["number"]): p["parted_optimal"] for p in disk["partitions"]} == verdicts
    assert align["parted"]["2"]["minimal"] and not align["parted"]["3"]["minimal"]


def test_the_ssd_discards_and_plain_dm_crypt_does_not(run: dict) -> None:
    sizes = run["mounts"]["discard_max_bytes"]
    assert int(sizes["ssd"]) > 0 and int(sizes["nvme"]) > 0 and sizes["crypt"] == "0", sizes


def test_mounts_fix_adds_discard_on_the_ssd_only(run: dict) -> None:
    mounts = run["mounts"]
    assert mounts["fix"]["code"] == 0, mounts["fix"]
    assert "discard" in mounts["live"]["ssd"] and "noatime" in mounts["live"]["ssd"]
    assert "discard" not in mounts["live"]["crypt"] and "noatime" in mounts["live"]["crypt"]
    ssd_line, crypt_line = mounts["fstab"].splitlines()
    assert "discard" in ssd_line.split()[3] and "discard" not in crypt_line.split()[3]


def test_discard_below_dm_crypt_is_a_skip_naming_the_device(run: dict) -> None:
    check = run["mounts"]["check"]
    assert check["code"] == 0, check
    crypt = next(fs for fs in check["doc"]["filesystems"] if fs["target"] == "/tmp/mnt/crypt")
    skipped = [s for s in crypt["skipped"] if s["option"] == "discard"]
    assert skipped and "discard" in skipped[0]["reason"], crypt


def test_preload_brings_every_file_into_the_page_cache(run: dict) -> None:
    preload = run["preload"]
    assert preload["collect"]["code"] == 0 and preload["replay"]["code"] == 0, (preload["collect"], preload["replay"])
    assert all(res == 0 for res in preload["resident_before"].values()), preload["resident_before"]
    assert {f: res >= preload["sizes"][f] for f, res in preload["resident_after"].items()} == dict.fromkeys(
        preload["sizes"], True), preload["resident_after"]


def test_a_scheduler_set_below_a_stack_created_after_the_rules_comes_back(run: dict) -> None:
    """#34: the rules first, then a dm device on the SD card; its RUN sets the card's scheduler (below:). Nothing
    journalled that original: udev remove + rollback left the card on bfq. The rules keep it in udev's database."""
    late = run["late_stack"]
    assert late["apply"]["code"] == 0 and late["install"]["code"] == 0, (late["apply"], late["install"])
    kernel = late["kernel"]
    assert kernel["scheduler"] != "bfq" and late["apply"]["after"]["read_ahead_kb"] == "256", late
    assert late["stacked"]["scheduler"] == "bfq", late  # the dm device's RUN wrote below:
    assert late["remove"]["code"] == 0 and late["rollback"]["code"] == 0, (late["remove"], late["rollback"])
    after = late["rolled_back"]
    assert (after["scheduler"], after["read_ahead_kb"]) == (kernel["scheduler"], kernel["read_ahead_kb"]), (
        late["udev"], late.get("record"), late["journal"], late["remove"], late["rollback"])
