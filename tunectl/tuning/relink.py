"""Loop devices whose identity changed while tuned: the journal's proof that a device is the one it journalled.

A loop device's identity is its backing path (`loop:PATH`): renaming or
deleting the file, or detaching its twin, gives the same device another
identity, and its journal entry is orphaned while the device keeps tunectl's
values. Each loop entry keeps ``loop: {backing: "maj:min:inode", devnum:
"maj:min"}``: the backing file's device and inode (which no rename or unlink
changes) and the loop device's own number. An orphaned entry whose proof a
present device without an entry of its own matches exactly is that device.
Entries journalled before the proof existed get it from the present device of
their identity (an upgrade on read, saved with the journal's next change).
"""

from __future__ import annotations

from tunectl.devices.model import Device
from tunectl.record import replace
from tunectl.tuning.journal import Journal, LoopProof


def proof(dev: Device) -> LoopProof | None:
    return LoopProof(dev.backing, dev.devnum) if dev.cls == "loop" and dev.backing and dev.devnum else None


def stamp(journal: Journal, devices: list[Device]) -> Journal:
    """The journal with the entries of present loop devices that lack it given their proof."""
    for dev in devices:
        entry = journal.get(dev.identity)
        found = proof(dev)
        if entry is not None and found is not None and entry.loop is None:
            journal = journal.with_entry(dev.identity, replace(entry, loop=found))
    return journal


def orphans(journal: Journal, devices: list[Device]) -> dict[str, Device]:
    """Orphaned journal identity -> the present loop device (with no entry of its own) that its proof names."""
    present = {d.identity for d in devices}
    by_proof = {}
    for dev in devices:
        found = proof(dev)
        if found is not None and dev.identity not in journal:
            by_proof[found] = dev
    out = {}
    for identity, entry in journal.devices.items():
        if identity in present or not identity.startswith("loop:") or entry.loop is None:
            continue
        dev = by_proof.get(entry.loop)
        if dev is not None and dev not in out.values():
            out[identity] = dev
    return out


def rekey(journal: Journal, found: dict[str, Device]) -> Journal:
    """Each orphaned entry moved to the identity its device has now (its name updated)."""
    for identity, dev in found.items():
        entry = journal.get(identity)
        if entry is not None:
            journal = journal.without([identity]).with_entry(dev.identity, replace(entry, name=dev.name))
    return journal


def warning(identity: str, dev: Device, restored: bool) -> str:
    what = ("its originals were restored" if restored else
            f"it still carries what tunectl set; `tunectl rollback {dev.name}` restores its originals")
    return (f"tunectl: warning: {dev.name} ({dev.identity}) is the loop device journalled as {identity} (same backing "
            f"file inode, same loop device {dev.devnum}): its backing file was renamed, deleted or its twin detached "
            f"while it was tuned; {what}")
