"""Adopting the originals the udev rules kept: only what the rules changed, never over a journalled one."""

from __future__ import annotations

from tunectl.devices.model import Device
from tunectl.tuning.adopt import adopt
from tunectl.udev.scope import orig_name


def _device(**queue: int | str) -> Device:
    """A bio-based dm device as discovery sees it on 6.1: no scheduler, no readable nr_requests."""
    return Device(name="dm-3", cls="dm", identity="dm-uuid:LVM-x", queue=dict({"read_ahead_kb": 2048}, **queue))


def test_only_values_the_rules_changed_are_journalled() -> None:
    """Seen on Debian's 6.1 in the VM tier: the rules kept nr_requests 128 of a bio-based dm queue whose writes
    the kernel refuses; journalling it made rollback fail (EINVAL) on a value that had never changed."""
    dev = _device()
    kept = {orig_name("read_ahead_kb"): "128", orig_name("nr_requests"): "128", orig_name("scheduler"): "[none]"}
    journal: dict = {"devices": {}}
    assert adopt(journal, [dev], lambda d: kept, {"command": "verify"}) == ["dm-3"]
    assert journal["devices"]["dm-uuid:LVM-x"]["attributes"] == {"read_ahead_kb": 128}


def test_nothing_changed_adopts_nothing_and_a_journalled_original_stays() -> None:
    dev = _device(read_ahead_kb=128)
    kept = {orig_name("read_ahead_kb"): "128", orig_name("nr_requests"): "128"}
    journal: dict = {"devices": {}}
    assert adopt(journal, [dev], lambda d: kept, {}) == [] and journal["devices"] == {}
    journal = {"devices": {"dm-uuid:LVM-x": {"name": "dm-3", "attributes": {"read_ahead_kb": 512}}}}
    assert adopt(journal, [_device()], lambda d: {orig_name("read_ahead_kb"): "128"}, {}) == []
    assert journal["devices"]["dm-uuid:LVM-x"]["attributes"] == {"read_ahead_kb": 512}


def test_a_device_outside_the_rules_scope_is_never_adopted() -> None:
    """What udev's database says of a device the installed rules do not match was not kept by them (#34)."""
    kept = {orig_name("read_ahead_kb"): "128"}
    journal: dict = {"devices": {}}
    assert adopt(journal, [_device()], lambda d: kept, {}, scope=["dm-uuid:LVM-other"]) == []
    assert journal["devices"] == {}
    assert adopt(journal, [_device()], lambda d: kept, {}, scope=["dm-uuid:LVM-x"]) == ["dm-3"]
    assert journal["devices"]["dm-uuid:LVM-x"]["attributes"] == {"read_ahead_kb": 128}
