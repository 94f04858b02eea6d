"""apply: the tuning operation that writes devices and the journal, and what reads the journal for it and for
rollback (`tuning.rollback`): the originals-first step, adoption of what udev rules kept, verify's relinked loops.

A module apart from `operations` so that plan (and status) load no journal: only a command that writes, verify,
or a record with udev rules installed needs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from tunectl import __version__
from tunectl.context import Context
from tunectl.devices.model import Device
from tunectl.errors import ExitCode, StateError
from tunectl.record import field, record, replace
from tunectl.report import Report
from tunectl.status import Status
from tunectl.system.state import ACTIVE
from tunectl.tuning import apply as applying
from tunectl.tuning import intent, journal, operations, relink, text
from tunectl.tuning.intent import Intent
from tunectl.tuning.journal import ChangedBy, Journal
from tunectl.tuning.plan import Setting


@record
class ApplyReport(Report):
    """The report of apply and rollback: what each write did."""

    profile: str
    outcomes: list[applying.Outcome]
    check: bool = False
    writes: int = 0
    write_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    warnings: list = field(default_factory=list)
    record_error: str = ""  # the settings were written, the record of intent could not be saved
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (device, why the profile sets nothing on it)
    unmatched: list[str] = field(default_factory=list)  # named devices that may be a journalled one (in warnings)
    show_diff: bool = False  # the text: the changes as a patch (apply --diff)

    @property
    def changed(self) -> bool:
        return any(o.status in (Status.CHANGED,) or (self.check and o.status == Status.CHANGE) for o in self.outcomes)

    def to_json(self) -> dict:
        return {"profile": self.profile, "changed": self.changed, "check": self.check, "writes": self.writes,
                "write_phase_ms": round(self.write_seconds * 1000, 3), "notes": self.notes,
                "warnings": [str(w) for w in self.warnings], "record_error": self.record_error or None,
                "skipped": [{"device": d, "reason": r} for d, r in self.skipped],
                "settings": [o.to_json() for o in self.outcomes]}

    @property
    def exit_code(self) -> ExitCode:
        statuses = {o.status for o in self.outcomes}
        if Status.NOT_PERMITTED in statuses and Status.CHANGED not in statuses:
            return ExitCode.NOT_PERMITTED  # nothing written, and nothing recorded
        if self.record_error or self.unmatched or statuses & {Status.FAILED, Status.NOT_PERMITTED,
                                                               Status.UNAVAILABLE}:
            return ExitCode.PARTIAL
        return ExitCode.OK

    def print_text(self, out) -> None:
        """The settings written (or that would be), skips, a summary; what failed and how to go on."""
        text.print_apply(self, out)


def relinked(ctx: Context, devices: list[Device]) -> list[str]:
    """verify (`operations.plan`'s `relinked_of`): one warning per present loop device that an orphaned journal
    entry proves it is (see `relink`)."""
    if not any(d.backing for d in devices):
        return []
    try:
        kept = journal.load(ctx.state)
    except StateError:
        return []  # a journal rollback cannot use: status and rollback say why
    return [relink.warning(identity, dev, restored=False) for identity, dev in relink.orphans(kept, devices).items()]


def apply(ctx: Context, choice: intent.Choice, dev_refs: list[str] | None = None, check: bool = False,
          stack: bool = False, scoped: bool = False) -> ApplyReport:
    """Write the plan of `choice.profile` (`scoped`, without DEV: on the record's scope), journalling originals first.

    Nothing is recorded for writes that never happened: the journal entries of
    refused or failed writes are taken back, and the record of intent is saved
    only when something was written or everything already was as wanted.
    """
    profile = choice.profile
    if check:
        report = operations.plan(ctx, None, dev_refs, profile, stack, scoped)
        return ApplyReport(profile.name, [applying.Outcome(s, s.status) for s in report.settings], check=True,
                           warnings=report.warnings, skipped=report.skipped)
    with ctx.state.locked():
        # Plan under the lock: another run may have changed things while we waited.
        report = operations.plan(ctx, None, dev_refs, profile, stack, scoped)
        # Read before any write: a state file tunectl cannot use stops the run here.
        journal.load(ctx.state)
        previous = intent.load(ctx.state)
        record = intent.of(profile, choice.ref).scoped(
            previous, None if report.scope is None else list(report.scope.identities))
        # `--stack` is what a udev event runs: the values it finds may be ones the rules wrote moments before,
        # so it journals no originals and leaves the record (and scope) of the user's last apply alone.
        # Only what this process may write (not root: nothing) is journalled: a refused write keeps no original.
        originals = None if stack else journal_originals(ctx, previous, report.devices,
                                                         applying.writable(ctx.sysfs, report.settings),
                                                         changed_by(choice.ref))
        writes_before = ctx.sysfs.writes
        started = time.perf_counter()
        outcomes = applying.apply_settings(ctx.sysfs, report.settings)
        write_seconds = time.perf_counter() - started
        if originals is not None:
            kept = applying.forget_unwritten(originals.before, originals.journal, outcomes)
            if kept != originals.journal:
                journal.save(ctx.state, kept)
        result = ApplyReport(profile.name, outcomes, writes=ctx.sysfs.writes - writes_before,
                             write_seconds=write_seconds, warnings=list(dict.fromkeys(report.warnings + ctx.state.warnings)),
                             skipped=report.skipped)
        statuses = {o.status for o in outcomes}
        wrote = Status.CHANGED in statuses or not statuses & {Status.FAILED, Status.NOT_PERMITTED}
        if wrote and not stack and (previous != record or ctx.state.recovered(ACTIVE)):
            try:
                intent.save(ctx.state, record)
            except StateError as e:
                result.record_error = (f"the settings were applied and their originals journalled, but the record "
                                       f"of what is tuned could not be saved: {e}")
    return result


@record
class Originals:
    """The journal after the originals-first step (saved), as it was before this run's own originals were
    added (`before`: what a write that never happened goes back to), and the devices adopted from udev rules."""

    journal: Journal
    before: Journal
    adopted: list[str]


def journal_originals(ctx: Context, record: Intent | None, devices: list[Device], settings: list[Setting] | None,
                      by: ChangedBy | None) -> Originals:
    """The originals-first step, under the state lock and before anything is written: apply, `udev install` (before
    the rules are live) and adoption (plan, verify, status meeting values the rules wrote) all take it here.

    1. What installed udev rules kept of devices they tuned before tunectl saw them (`adopt_rules_originals`).
    2. With `settings`: a tuned loop device whose identity changed keeps its entry (and originals) under the
       identity it has now, loop entries get their proof (`relink`), and the value before each change of
       `settings` is journalled, with `by` (`applying.record_originals`). None: adoption only.
    The journal is saved when it changed, or when it was read from an older generation.
    """
    read = journal.load(ctx.state)
    kept, adopted = adopt_rules_originals(ctx, record, read, devices)
    before = kept
    if settings is not None:
        before = relink.stamp(relink.rekey(kept, relink.orphans(kept, devices)), devices)
        kept = applying.record_originals(before, settings, {d.name: d for d in devices}, by)
    if kept != read or ctx.state.recovered():
        journal.save(ctx.state, kept)
    return Originals(kept, before, adopted)


def changed_by(ref: str) -> ChangedBy:
    return ChangedBy(ref, __version__, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def adopt_rules_originals(ctx: Context, record: Intent | None, kept: Journal,
                          devices: list[Device]) -> tuple[Journal, list[str]]:
    """The journal with what installed rules kept of devices tuned before any tunectl command saw them
    (tuning.adopt), and the devices adopted."""
    if record is None or record.rules is None:
        return kept, []
    from tunectl.tuning.adopt import adopt  # here: most applies have no rules installed and need no adoption
    by = replace(changed_by(str(record.rules.ref)), via="udev rules")
    # What install kept for below: wins over udev's database: a disk's first event after install may come after the
    # RUN of a stack above it wrote below:, and the rules would keep that value. The database has the rest, and the
    # devices that appeared after install (their first event comes before any stack over them).
    # Only for a device under a stack now (it, or a partition, has holders): below: is written by the RUN of a stack
    # alone, so on a standalone disk a value that differs from what install kept is someone else's change (an admin's
    # blockdev --setra), which a rollback must not undo. Its below: originals, from install or the database, are not
    # adopted there. For a disk that appeared after install, install kept nothing: the record's `below_only` says which
    # of the database's originals below: alone keeps.
    found, below_only = record.rules.kept, frozenset(record.rules.below_only or ())
    return adopt(kept, devices, lambda d: _rules_kept(ctx.udev.record(d.devnum).properties,
                                                      found.get(d.identity, {}), below_only, bool(d.holders)), by,
                 scope=record.rules.scope)


def _rules_kept(database: Mapping[str, str], below: Mapping[str, str], below_only: frozenset[str],
                stacked: bool) -> dict[str, str]:
    """What the rules kept of one device: udev's database with install's below: originals over it, for a device
    under a stack; for one that is not, the database without the below: attributes install kept and without those
    only below: sets."""
    if stacked:
        return {**database, **below}
    return {k: v for k, v in database.items() if k not in below and k not in below_only}


def adopt_seen(ctx: Context, devices: list[Device]) -> list[str]:
    """For commands that only read (plan, verify, status): journal what the rules kept, the first time they see it.

    Takes the lock only when there is something to journal and the state directory is writable.
    """
    record = intent.current(ctx)
    if record is None or record.rules is None or not os.access(ctx.state.dir, os.W_OK):
        return []
    if not adopt_rules_originals(ctx, record, journal.load(ctx.state), devices)[1]:
        return []
    with ctx.state.locked():
        return journal_originals(ctx, intent.load(ctx.state), devices, None, None).adopted
