"""Issue #34: the journal's proof that a loop device whose identity (backing path) changed is the one it tuned."""

from __future__ import annotations

import pytest

from tunectl.devices.model import Device
from tunectl.tuning import relink
from tunectl.tuning.journal import Journal, JournalError, LoopProof


def J(data: dict) -> Journal:
    return Journal.from_json(data)


def loop(name: str, identity: str, backing: str = "254:0:77", devnum: str = "7:0") -> Device:
    return Device(name=name, cls="loop", identity=identity, devnum=devnum, backing=backing)


def entry(**extra: object) -> dict:
    return {"name": "loop0", "attributes": {"read_ahead_kb": 128}, **extra}


PROOF = {"backing": "254:0:77", "devnum": "7:0"}


def test_an_orphaned_entry_is_the_device_its_inode_and_device_number_name() -> None:
    journal = J({"devices": {"loop:/a.img": entry(loop=PROOF)}})
    now = loop("loop0", "loop:/b.img")
    found = relink.orphans(journal, [now])
    assert found == {"loop:/a.img": now}
    journal = relink.rekey(journal, found)
    assert list(journal.devices) == ["loop:/b.img"] and journal.devices["loop:/b.img"].attributes == {
        "read_ahead_kb": 128}


def test_another_inode_another_loop_number_a_present_entry_or_no_proof_match_nothing() -> None:
    journal = J({"devices": {"loop:/a.img": entry(loop=PROOF)}})
    assert relink.orphans(journal, [loop("loop0", "loop:/b.img", backing="254:0:78")]) == {}  # another file
    assert relink.orphans(journal, [loop("loop1", "loop:/b.img", devnum="7:1")]) == {}  # its twin, still attached
    assert relink.orphans(journal, [loop("loop0", "loop:/a.img")]) == {}  # not orphaned
    mine = J({"devices": {"loop:/a.img": entry(loop=PROOF), "loop:/b.img": entry()}})
    assert relink.orphans(mine, [loop("loop0", "loop:/b.img")]) == {}  # the device has an entry of its own
    old = J({"devices": {"loop:/a.img": entry()}})
    assert relink.orphans(old, [loop("loop0", "loop:/b.img")]) == {}  # journalled before the proof existed
    assert relink.orphans(journal, [loop("loop0", "loop:/b.img", backing="")]) == {}  # inode unknown (fake tree)


def test_a_twin_detached_leaves_the_remaining_device_its_own_entry() -> None:
    journal = J({"devices": {"loop:/a.img#ino77:loop0": entry(loop=PROOF),
                             "loop:/a.img#ino77:loop1": entry(name="loop1", loop={**PROOF, "devnum": "7:1"})}})
    left = loop("loop0", "loop:/a.img")  # loop1 detached: loop0's identity lost its suffix
    assert relink.orphans(journal, [left]) == {"loop:/a.img#ino77:loop0": left}


def test_an_old_journal_gets_the_proof_of_its_present_devices_on_read() -> None:
    read = J({"devices": {"loop:/a.img": entry(), "wwn:0x5": entry(name="sda")}})
    journal = relink.stamp(read, [loop("loop0", "loop:/a.img"), Device("sda", "hdd", "wwn:0x5", devnum="8:0")])
    assert journal != read
    assert journal.devices["loop:/a.img"].loop == LoopProof(**PROOF) and journal.devices["wwn:0x5"].loop is None
    assert J(journal.to_json()) == journal  # written, it reads back the same
    assert relink.stamp(journal, [loop("loop0", "loop:/a.img", backing="1:1:1")]) == journal  # kept, not overwritten


def test_a_proof_that_is_not_an_inode_and_a_device_number_makes_the_journal_unusable() -> None:
    for bad in ({"backing": "x", "devnum": "7:0"}, {"backing": "1:2:3"}, "7:0", {"backing": "1:2:3", "devnum": 7}):
        with pytest.raises(JournalError, match="'loop' proof"):
            J({"devices": {"loop:/a.img": entry(loop=bad)}})
