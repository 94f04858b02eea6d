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


def proof(dev: Device) -> dict[str, str] | None:
    return {"backing": dev.backing, "devnum": dev.devnum} if dev.cls == "loop" and dev.backing and dev.devnum else None


def stamp(journal: dict, devices: list[Device]) -> bool:
    """Give the entries of present loop devices that lack it their proof. True if the journal changed."""
    changed = False
    for dev in devices:
        entry = journal["devices"].get(dev.identity)
        found = proof(dev)
        if entry is not None and found is not None and "loop" not in entry:
            entry["loop"] = found
            changed = True
    return changed


def orphans(journal: dict, devices: list[Device]) -> dict[str, Device]:
    """Orphaned journal identity -> the present loop device (with no entry of its own) that its proof names."""
    present = {d.identity for d in devices}
    by_proof = {}
    for dev in devices:
        found = proof(dev)
        if found is not None and dev.identity not in journal["devices"]:
            by_proof[(found["backing"], found["devnum"])] = dev
    out = {}
    for identity, entry in journal["devices"].items():
        kept = entry.get("loop")
        if identity in present or not identity.startswith("loop:") or not isinstance(kept, dict):
            continue
        dev = by_proof.get((kept.get("backing"), kept.get("devnum")))
        if dev is not None and dev not in out.values():
            out[identity] = dev
    return out


def rekey(journal: dict, found: dict[str, Device]) -> None:
    """Move each orphaned entry to the identity its device has now (its name and proof updated)."""
    for identity, dev in found.items():
        entry = journal["devices"].pop(identity)
        entry["name"] = dev.name
        journal["devices"][dev.identity] = entry


def warning(identity: str, dev: Device, restored: bool) -> str:
    what = ("its originals were restored" if restored else
            f"it still carries what tunectl set; `tunectl rollback {dev.name}` restores its originals")
    return (f"tunectl: warning: {dev.name} ({dev.identity}) is the loop device journalled as {identity} (same backing "
            f"file inode, same loop device {dev.devnum}): its backing file was renamed, deleted or its twin detached "
            f"while it was tuned; {what}")
