"""Applying: write the changes of a plan through sysfs, read each back, journal originals.

Per device the order is fixed (scheduler, its knobs, read-ahead, other queue
attributes); devices are independent, so they are written concurrently: a
scheduler switch costs the kernel tens of milliseconds (it freezes the queue),
which is the dominant cost of an apply.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from tunectl.attributes import (
    IOSCHED,
    QUEUE,
    kernel_equivalent,
    parse_scheduler,
    parse_value,
    side_effects,
    wanted_value,
    wanted_value_in_sync,
    write_order,
)
from tunectl.devices.model import Device
from tunectl.errors import SysfsError
from tunectl.record import record, replace
from tunectl.status import Status
from tunectl.system.sysfs import Sysfs
from tunectl.tuning import relink
from tunectl.tuning.journal import ChangedBy, Journal, JournalEntry
from tunectl.tuning.plan import Setting

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

_VANISHED = (errno.ENOENT, errno.ENODEV, errno.ENXIO)


def denied(code: int) -> bool:
    """The kernel refused the caller, not the value: EPERM, and EACCES for a user other than root (a sysfs
    attribute is root's 0644). For root, EACCES means a read-only attribute: a failure, not a permission."""
    return code == errno.EPERM or (code == errno.EACCES and os.geteuid() != 0)


@record
class Outcome:
    """What writing one planned setting did: its status and the value read back."""

    setting: Setting
    status: Status  # changed | failed | not-permitted | ok | skip | unavailable
    readback: Any = None
    error: str = ""

    def to_json(self) -> dict:
        s = self.setting
        return {"device": s.device, "identity": s.identity, "attribute": s.attribute, "before": s.before,
                "after": s.after, "readback": self.readback, "source": s.source, "status": self.status,
                "error": self.error or s.reason}


def _spec(attr: str, scheduler: str | None):
    if attr.startswith("iosched/"):
        return IOSCHED.get(scheduler or "", {}).get(attr.split("/", 1)[1])
    return QUEUE.get(attr)


def _apply_device(sysfs: Sysfs, settings: list[Setting]) -> list[Outcome]:
    out: list[Outcome] = []
    blocked = ""  # once set, the rest of this device's writes are not attempted
    scheduler = None
    for s in settings:
        if s.status != Status.CHANGE:
            out.append(Outcome(s, s.status))
            if s.attribute == "scheduler":
                scheduler = s.after if s.status == Status.IN_SYNC else s.before
            continue
        if s.attribute.startswith("iosched/") and blocked.startswith("scheduler"):
            out.append(Outcome(s, Status.FAILED, error=blocked))
            continue
        if blocked and not blocked.startswith("scheduler"):
            out.append(Outcome(s, Status.FAILED, error=blocked))
            continue
        rel = f"block/{s.device}/queue/{s.attribute}"
        try:
            if s.rewritten and s.bounds is None:
                # Rewritten by the kernel when an earlier write of this device landed (mq-deadline resets
                # async_depth on an nr_requests write, to the new depth on 6.18, to 3/4 of it before; a switch
                # resets nr_requests): already the wanted value, it is not written. Either way it is said
                # changed only when it differs from its value before this run.
                if scheduler is None and s.attribute.startswith("iosched/"):
                    scheduler, _ = parse_scheduler(sysfs.read_or(f"block/{s.device}/queue/scheduler", "") or "")
                spec = _spec(s.attribute, scheduler)
                live = parse_value(spec, sysfs.read(rel)) if spec else None
                if spec is not None and _same(spec, live, s.after):
                    out.append(Outcome(s, _changed(spec, s), live))
                    continue
            if s.bounds is not None:
                # A range is decided on the live value: after a scheduler switch the kernel has just set the
                # knob to its default, and a reset (nr_requests, read-ahead after a limit) may land inside too.
                if scheduler is None and s.attribute.startswith("iosched/"):
                    scheduler, _ = parse_scheduler(sysfs.read_or(f"block/{s.device}/queue/scheduler", "") or "")
                spec = _spec(s.attribute, scheduler)
                live = parse_value(spec, sysfs.read(rel)) if spec else None
                if spec is not None and wanted_value_in_sync(spec, s.bounds, live):
                    out.append(Outcome(replace(s, after=live), Status.IN_SYNC, live))
                    continue
                s = replace(s, after=wanted_value(s.bounds, live) if isinstance(live, int) else
                            s.bounds.get("min", s.bounds.get("max")))
            sysfs.write(rel, str(s.after))
            text = sysfs.read(rel)
        except SysfsError as e:
            # EACCES is both "read-only attribute" and "not permitted": a write bit this process lacks says which.
            refused = denied(e.errno) or e.errno == errno.EACCES and sysfs.denied(rel)
            status = Status.NOT_PERMITTED if refused else Status.FAILED
            out.append(Outcome(s, status, error=e.reason))
            if e.errno in _VANISHED and not sysfs.exists(f"block/{s.device}"):
                blocked = "device vanished"
            elif s.attribute == "scheduler":
                blocked = f"scheduler switch to {s.after} failed"
            continue
        if s.attribute == "scheduler":
            readback, _ = parse_scheduler(text)
            scheduler = readback
            ok = readback == s.after
        else:
            if scheduler is None and s.attribute.startswith("iosched/"):
                scheduler, _ = parse_scheduler(sysfs.read_or(f"block/{s.device}/queue/scheduler", "") or "")
            spec = _spec(s.attribute, scheduler)
            readback = parse_value(spec, text) if spec else text
            ok = spec is not None and wanted_value_in_sync(spec, s.bounds or s.after, readback)
        if ok:
            out.append(Outcome(s, _changed(_spec(s.attribute, scheduler), s) if s.rewritten else Status.CHANGED,
                               readback))
        else:
            out.append(Outcome(s, Status.FAILED, readback, f"wrote {s.after}, kernel reads back {readback}"))
            if s.attribute == "scheduler":
                blocked = f"scheduler switch to {s.after} did not take"
    return out


def apply_settings(sysfs: Sysfs, plan: list[Setting], workers: int = 16) -> list[Outcome]:
    """Write every change of `plan`; devices in parallel, each in plan order."""
    by_device: dict[str, list[Setting]] = {}
    for s in plan:
        by_device.setdefault(s.device, []).append(s)
    groups = list(by_device.values())
    switching = sum(1 for g in groups if any(s.attribute == "scheduler" and s.status == Status.CHANGE for s in g))
    if switching > 1 and workers > 1:
        from tunectl.system.interrupts import in_threads

        results = in_threads(lambda g: _apply_device(sysfs, g), groups, workers)
    else:
        results = [_apply_device(sysfs, g) for g in groups]
    return [o for r in results for o in r]


def _changed(spec, s: Setting) -> Status:  # noqa: ANN001 (an Attribute, or None)
    """A rewritten setting now at its wanted value: changed, or in sync when it had that value before the run
    (the kernel's reset and tunectl's write in between changed nothing a reader can see)."""
    return Status.IN_SYNC if s.before is not None and _same(spec, s.before, s.after) else Status.CHANGED


def writable(sysfs: Sysfs, plan: list[Setting]) -> list[Setting]:
    """`plan` without the changes this process may not write (not root): their originals are not journalled."""
    def may(s: Setting) -> bool:
        rel = f"block/{s.device}/queue/{s.attribute}"
        if s.attribute.startswith("iosched/") and not sysfs.exists(rel):
            rel = f"block/{s.device}/queue/scheduler"  # the knob comes with the scheduler switch before it
        return sysfs.may_write(rel)

    return [s for s in plan if s.status != Status.CHANGE or may(s)]


def record_originals(journal: Journal, plan: list[Setting], devices: dict[str, Device],
                     changed_by: ChangedBy | None = None) -> Journal:
    """The journal with the value before tunectl's first change of each attribute (`!=`: it changed).

    Scheduler knobs are kept per scheduler (``iosched``: scheduler -> knobs, as
    first seen while that scheduler was active): the kernel resets the knobs on
    every switch, so after bfq -> mq-deadline -> bfq only the first bfq values
    are bfq's originals. `changed_by` is recorded per attribute: who set the
    value it has now. A re-apply of the same profile and version records nothing.
    """
    for s in plan:
        if s.status != Status.CHANGE:
            continue
        dev = devices[s.device]
        entry = journal.get(s.identity) or JournalEntry(s.device)
        attrs, by, iosched = dict(entry.attributes), dict(entry.changed_by), dict(entry.iosched)
        if changed_by is not None and not changed_by.same_writer(by.get(s.attribute)):
            by[s.attribute] = changed_by
        if dev.scheduler and dev.scheduler not in iosched:
            iosched[dev.scheduler] = dict(dev.iosched)
        if s.attribute not in attrs and not s.attribute.startswith("iosched/"):
            attrs[s.attribute] = s.before
            # Values the kernel changes by itself when this one is written (knobs: in the snapshot above).
            for attr in side_effects(s.attribute):
                current = _current(dev, attr)
                if attr not in attrs and current is not None and not attr.startswith("iosched/"):
                    attrs[attr] = current
                    if changed_by is not None and attr not in by:
                        by[attr] = replace(changed_by, via=s.attribute)
        journal = journal.with_entry(s.identity, replace(
            entry, name=s.device, attributes=attrs, changed_by=by, iosched=iosched,
            loop=entry.loop if entry.loop is not None else relink.proof(dev)))
    return journal


def forget_unwritten(before: Journal, journal: Journal, outcomes: list[Outcome]) -> Journal:
    """The journal without what `record_originals` added for writes that never happened (refused, failed).

    A device none of whose writes took gets its entry back as it was (or none);
    on a device partly written, who changed an attribute that was not written
    is put back. Originals of attributes that were written stay.
    """
    written = {(o.setting.identity, o.setting.attribute) for o in outcomes if o.status == Status.CHANGED}
    touched = {o.setting.identity for o in outcomes if o.status == Status.CHANGED}
    for o in outcomes:
        s = o.setting
        entry = journal.get(s.identity)
        if o.status not in (Status.FAILED, Status.NOT_PERMITTED) or entry is None:
            continue
        old = before.get(s.identity)
        if s.identity not in touched:
            journal = journal.without([s.identity]) if old is None else journal.with_entry(s.identity, old)
        elif (s.identity, s.attribute) not in written:
            was = old.changed_by.get(s.attribute) if old is not None else None
            if entry.changed_by.get(s.attribute) != was:
                by = {a: b for a, b in entry.changed_by.items() if a != s.attribute}
                if was is not None:
                    by[s.attribute] = was
                journal = journal.with_entry(s.identity, replace(entry, changed_by=by))
    return journal


def _current(dev: Device, attr: str) -> Any:
    if attr.startswith("iosched/"):
        return dev.iosched.get(attr.split("/", 1)[1])
    return dev.queue.get(attr)


def _same(spec, value: Any, wanted: Any) -> bool:  # noqa: ANN001 (an Attribute, or None: not in the catalogue)
    """`value` is `wanted`, as the kernel keeps it (whole jiffies, a multiple of the block size)."""
    return value == wanted or (spec is not None and value is not None and kernel_equivalent(spec, wanted, value))


def _restorer(out: list[Setting], dev: Device, scheduler: str | None) -> Callable[[str, Any, Any, bool], Status]:
    def add(attr: str, before: Any, original: Any, rewritten: bool) -> Status:
        """One restore; a `rewritten` one is written whatever its value now (apply decides on its value then)."""
        status = Status.CHANGE if rewritten or not _same(_spec(attr, scheduler), before, original) else Status.IN_SYNC
        reason = "an earlier write of this rollback makes the kernel reset it" if rewritten and before is not None else ""
        out.append(Setting(dev.name, dev.identity, attr, before, original, "journal", status, reason,
                           rewritten=rewritten))
        return status

    return add


def rollback_plan(journal: Journal, devices: list[Device], chosen: Callable[[Device], bool]) -> list[Setting]:
    """Settings that bring each journalled device back to its original values, in write order.

    Where two present devices share an identity, only the one the journal entry
    names (its kernel name when journalled) is restored: the other was never
    journalled and is never written.

    The kernel's order: the original scheduler first (the switch resets its
    knobs and nr_requests), nr_requests before the knobs (mq-deadline sizes
    async_depth from it), then the knobs, the other queue attributes, and
    read-ahead last (a limit write can raise it).
    """
    out: list[Setting] = []
    seen: dict[str, int] = {}
    for dev in devices:
        seen[dev.identity] = seen.get(dev.identity, 0) + 1
    for dev in devices:
        entry = journal.get(dev.identity)
        if entry is None or not chosen(dev):
            continue
        if seen[dev.identity] > 1 and entry.name != dev.name:
            continue  # two devices, one identity (multipath paths, cloned serials): only the one the journal names
        attrs = entry.attributes
        original_sched = attrs.get("scheduler") or dev.scheduler
        switching = original_sched != dev.scheduler
        restore: dict[str, Any] = {}
        if attrs.get("scheduler") is not None:
            restore["scheduler"] = attrs["scheduler"]
        restore.update({a: v for a, v in attrs.items() if a != "scheduler" and not a.startswith("iosched/")
                        and v is not None})
        restore.update(entry.original_knobs(original_sched))
        # What the kernel rewrites when an earlier restore of this device is written (a switch resets nr_requests,
        # an nr_requests write mq-deadline's async_depth): written again, decided on the value found then. Only
        # writes that happen count: an nr_requests already at its original leaves async_depth where it is.
        disturbed = set(side_effects("scheduler")) if switching else set()
        add = _restorer(out, dev, original_sched)
        for attr in sorted(restore, key=write_order):
            if attr.startswith("iosched/"):
                if attr.split("/", 1)[1] not in IOSCHED.get(original_sched or "", {}):
                    continue
                before = None if switching else _current(dev, attr)  # after a switch: a knob of another scheduler
            elif attr == "scheduler":
                before = dev.scheduler
            else:
                before = _current(dev, attr)
            if add(attr, before, restore[attr], attr in disturbed) == Status.CHANGE:
                disturbed |= side_effects(attr)
    return out
