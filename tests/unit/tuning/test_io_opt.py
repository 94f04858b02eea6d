"""A read-ahead the kernel derived from an optimal I/O size util-linux would ignore (USB bridges: 33553920)."""

from __future__ import annotations

import pytest

from tests.tuning_helpers import Tunectl
from tunectl.attributes import derived_from_doubtful_io_opt, io_opt_doubt, kernel_read_ahead_kb
from tunectl.tuning.topology import BOGUS_IO_OPT_READ_AHEAD

USB_IO_OPT = 33553920  # 0xffff * 512


@pytest.mark.parametrize("io_opt, page_kb, kb", [
    (0, 4, 128), (65536, 4, 128), (1048576, 4, 2048), (USB_IO_OPT, 4, 65532), (USB_IO_OPT, 64, 65472),
    (410112, 4, 800),
])
def test_kernel_read_ahead_is_twice_io_opt_in_whole_pages_at_least_128(io_opt, page_kb, kb) -> None:
    assert kernel_read_ahead_kb(io_opt, page_kb) == kb


@pytest.mark.parametrize("io_opt, pbs, doubtful", [
    (0, 512, False), (None, 512, False), (1048576, 4096, False), (28672, 4096, False),
    (USB_IO_OPT, 512, True), (USB_IO_OPT, 4096, True), (410112, 4096, True), (410112, None, False),
])
def test_io_opt_doubt_follows_libfdisk(io_opt, pbs, doubtful) -> None:
    assert (io_opt_doubt(io_opt, pbs) is not None) == doubtful


@pytest.mark.parametrize("ra, flagged", [(65532, True), (65472, True), (128, False), (4096, False), ("x", False), (None, False)])
def test_only_the_kernel_derived_value_is_flagged(ra, flagged) -> None:
    assert (derived_from_doubtful_io_opt(ra, USB_IO_OPT, 512) is not None) == flagged


NO_READ_AHEAD = "name: sched-only\nclasses:\n  ssd: {scheduler: mq-deadline}\n"
CAPPED = "name: capped\nclasses:\n  ssd: {scheduler: mq-deadline, read_ahead_kb: 512}\n"


@pytest.fixture
def usb(empty_fake_tree, tmp_path):
    tree = empty_fake_tree
    tree.add_disk("sda", bus="usb", optimal_io_size=USB_IO_OPT, physical_block_size=4096, wwn="0x5000000000000001")
    tree.add_disk("sdb", optimal_io_size=1048576, wwn="0x5000000000000002")  # a RAID stripe: believable
    tree.add_disk("sdc", wwn="0x5000000000000003")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "sched-only.yaml").write_text(NO_READ_AHEAD)
    (tmp_path / "profiles" / "capped.yaml").write_text(CAPPED)
    return Tunectl(tree, tmp_path / "state", [tmp_path / "profiles"])


def test_fake_kernel_derives_64_mib(usb) -> None:
    assert (usb.tree.root / "block/sda/queue/read_ahead_kb").read_text().strip() == "65532"


def test_status_flags_the_usb_disk_only(usb) -> None:
    r = usb("status", "-p", "sched-only", "--json")
    assert r.code == 0
    warnings = {d["name"]: d["warnings"] for d in r.doc["devices"]}
    assert warnings["sdb"] == [] and warnings["sdc"] == []
    (w,) = warnings["sda"]
    assert w["kind"] == BOGUS_IO_OPT_READ_AHEAD and w["device"] == "sda"
    assert (w["read_ahead_kb"], w["optimal_io_size"], w["physical_block_size"]) == (65532, USB_IO_OPT, 4096)
    assert "read_ahead_kb: {max:" in w["hint"]
    human = usb("status", "-p", "sched-only")
    assert "tunectl: warning: sda: read_ahead_kb 65532 is what the kernel derives from the optimal I/O size" in human.err
    assert "33553920 (32 MiB - 512) is a controller error" in human.err
    assert "hint: cap it in the profile" in human.err


def test_plan_flags_it_while_the_plan_leaves_it(usb) -> None:
    r = usb("plan", "-p", "sched-only", "--json")
    assert [(w["device"], w["kind"]) for w in r.doc["device_warnings"]] == [("sda", BOGUS_IO_OPT_READ_AHEAD)]
    assert "warning: sda" in usb("plan", "-p", "sched-only").err
    cured = usb("plan", "-p", "capped", "--json")
    assert cured.doc["device_warnings"] == []
    assert [s["after"] for s in cured.doc["settings"] if s["device"] == "sda" and s["attribute"] == "read_ahead_kb"] == [512]


def test_after_apply_the_warning_is_gone(usb) -> None:
    assert usb("apply", "-p", "capped").code == 0
    r = usb("status", "--json")
    assert all(d["warnings"] == [] for d in r.doc["devices"])
    assert usb("verify", "--json").doc["device_warnings"] == []


def test_plan_limited_to_other_devices_does_not_warn_about_sda(usb) -> None:
    assert usb("plan", "-p", "sched-only", "sdb", "--json").doc["device_warnings"] == []
