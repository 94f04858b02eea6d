"""Adopting the originals the udev rules kept: only what the rules changed, never over a journalled one."""

from __future__ import annotations

from tunectl.devices.model import Device
from tunectl.system.rulesfile import orig_name
from tunectl.tuning.adopt import adopt
from tunectl.tuning.journal import ChangedBy, Journal

BY = ChangedBy("p", "1.0", "2026-01-01T00:00:00Z", "udev rules")


def _device(**queue: int | str) -> Device:
    """A bio-based dm device as discovery sees it on 6.1: no scheduler, no readable nr_requests."""
    return Device(name="dm-3", cls="dm", identity="dm-uuid:LVM-x", queue=dict({"read_ahead_kb": 2048}, **queue))


def test_only_values_the_rules_changed_are_journalled() -> None:
    """Seen on Debian's 6.1 in the VM tier: the rules kept nr_requests 128 of a bio-based dm queue whose writes
    the kernel refuses; journalling it made rollback fail (EINVAL) on a value that had never changed."""
    dev = _device()
    kept = {orig_name("read_ahead_kb"): "128", orig_name("nr_requests"): "128", orig_name("scheduler"): "[none]"}
    journal, adopted = adopt(Journal(), [dev], lambda d: kept, BY)
    assert adopted == ["dm-3"]
    assert journal.devices["dm-uuid:LVM-x"].attributes == {"read_ahead_kb": 128}
    assert journal.devices["dm-uuid:LVM-x"].changed_by == {"read_ahead_kb": BY}


def test_nothing_changed_adopts_nothing_and_a_journalled_original_stays() -> None:
    dev = _device(read_ahead_kb=128)
    kept = {orig_name("read_ahead_kb"): "128", orig_name("nr_requests"): "128"}
    assert adopt(Journal(), [dev], lambda d: kept, BY) == (Journal(), [])
    journal = Journal.from_json({"devices": {"dm-uuid:LVM-x": {"name": "dm-3", "attributes": {"read_ahead_kb": 512}}}})
    assert adopt(journal, [_device()], lambda d: {orig_name("read_ahead_kb"): "128"}, BY) == (journal, [])


def test_a_device_outside_the_rules_scope_is_never_adopted() -> None:
    """What udev's database says of a device the installed rules do not match was not kept by them (#34)."""
    kept = {orig_name("read_ahead_kb"): "128"}
    assert adopt(Journal(), [_device()], lambda d: kept, BY, scope=["dm-uuid:LVM-other"]) == (Journal(), [])
    journal, adopted = adopt(Journal(), [_device()], lambda d: kept, BY, scope=["dm-uuid:LVM-x"])
    assert adopted == ["dm-3"] and journal.devices["dm-uuid:LVM-x"].attributes == {"read_ahead_kb": 128}


def test_a_value_the_journal_would_refuse_is_not_adopted_and_the_journal_still_reads() -> None:
    """udev's database may hold any text: a 300-character, control-character or 30-digit original journalled by a
    status made the next command stop on a journal that "cannot be read" (exit 5, "original values lost")."""
    dev = Device(name="sda", cls="rotational", identity="wwn:0x1", scheduler="mq-deadline",
                 queue={"read_ahead_kb": 2048, "nr_requests": 64})
    for bad in ("x" * 300, "ab\x01c", "9" * 30):
        kept = {orig_name("read_ahead_kb"): bad, orig_name("nr_requests"): "256",
                orig_name("iosched/read_expire"): bad, orig_name("iosched/write_expire"): "3000"}
        journal, adopted = adopt(Journal(), [dev], lambda d, kept=kept: kept, BY)
        assert adopted == ["sda"]
        entry = journal.devices["wwn:0x1"]
        assert entry.attributes == {"nr_requests": 256}
        assert entry.iosched == {"mq-deadline": {"write_expire": 3000}}
        assert Journal.from_json(journal.to_json()) == journal
