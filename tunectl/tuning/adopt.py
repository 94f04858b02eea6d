"""Originals kept by the udev rules, journalled the first time tunectl sees a device the rules tuned.

A device hot-plugged while rules are installed is tuned by udev before any
tunectl command runs: its values before that are lost to tunectl unless the
rules kept them. The rules `udev install` writes do (``TUNECTL_ORIG_*``
properties in udev's database, `tunectl.udev.scope.capture_rules`; named by
`tunectl.system.rulesfile.orig_name`); this module
turns them into journal entries, never replacing an original already journalled.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from tunectl.attributes import IOSCHED, QUEUE, parse_scheduler, parse_value
from tunectl.devices.model import Device
from tunectl.record import replace
from tunectl.system.rulesfile import ORIG_PREFIX, orig_name
from tunectl.tuning.journal import ChangedBy, Journal, JournalEntry, not_a_value

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

_ATTRIBUTE_OF = {orig_name(a): a for a in QUEUE}
_ATTRIBUTE_OF.update({orig_name(f"iosched/{k}"): f"iosched/{k}" for knobs in IOSCHED.values() for k in knobs})
_ATTRIBUTE_OF[orig_name("scheduler")] = "scheduler"


def rule_originals(properties: Mapping[str, str]) -> dict[str, str]:
    """Attribute -> the text the rules kept, from one device's udev properties."""
    return {_ATTRIBUTE_OF[k]: v for k, v in properties.items()
            if k.startswith(ORIG_PREFIX) and k in _ATTRIBUTE_OF and v != ""}


def adopt(journal: Journal, devices: list[Device], properties: Callable[[Device], Mapping[str, str]],
          changed_by: ChangedBy, scope: Collection[str] | None = None) -> tuple[Journal, list[str]]:
    """Journal the originals the rules kept for devices (or attributes) the journal lacks and the rules
    changed (the device no longer shows them); the journal after, and the devices adopted.

    `scope` (the installed rules' identities; None: every device): what udev's database says of a device outside
    it was not kept by tunectl's rules, which stop before their capture stage there, so it is never adopted.
    """
    adopted = []
    for dev in devices:
        if scope is not None and dev.identity not in scope:
            continue
        kept = rule_originals(properties(dev))
        if not kept:
            continue
        entry = journal.get(dev.identity) or JournalEntry(dev.name)
        attrs = dict(entry.attributes)
        by = dict(entry.changed_by)
        scheduler = parse_scheduler(kept["scheduler"])[0] if "scheduler" in kept else dev.scheduler
        for attr, text in sorted(kept.items()):
            value: Any
            if attr == "scheduler":
                value = scheduler
            elif attr.startswith("iosched/"):
                continue
            else:
                value = parse_value(QUEUE[attr], text)
            now = dev.scheduler if attr == "scheduler" else dev.queue.get(attr)
            # Only what the rules changed: a value the device still shows needs no restoring, and one it does
            # not show at all cannot be restored (6.1's bio-based dm queues list nr_requests and a "none"
            # scheduler, but refuse every write: journalled, they made rollback fail with EINVAL).
            # A value no sysfs attribute holds (udev's database is text anyone root trusts, not a journal: a
            # 300-character or control-character value there) is not journalled: the journal would refuse it on
            # the next read, and every command would stop on a journal that "cannot be read".
            if attr not in attrs and value is not None and now is not None and value != now \
                    and not not_a_value(value):
                attrs[attr] = value
                by[attr] = changed_by
        knobs = {a.split("/", 1)[1]: parse_value(IOSCHED[scheduler][a.split("/", 1)[1]], text)
                 for a, text in kept.items()
                 if a.startswith("iosched/") and scheduler in IOSCHED and a.split("/", 1)[1] in IOSCHED[scheduler]}
        knobs = {k: v for k, v in knobs.items() if not not_a_value(v)}
        iosched = dict(entry.iosched)
        if knobs and scheduler not in iosched:
            iosched[scheduler] = knobs
        grown = replace(entry, attributes=attrs, changed_by=by, iosched=iosched)
        if grown != entry:
            journal = journal.with_entry(dev.identity, grown)
            adopted.append(dev.name)
    return journal, adopted
