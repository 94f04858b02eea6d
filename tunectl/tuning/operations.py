"""The tuning operations behind status, plan, apply, verify and rollback.

Each returns a report object; rendering and exit codes are the CLI's business.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import field, replace

from tunectl import __version__
from tunectl.attributes import modular_schedulers
from tunectl.context import Context
from tunectl.devices.classes import OPT_IN_CLASSES
from tunectl.devices.discover import discover, shared_identity_warnings
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.match import matches
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.errors import ExitCode, StateError, UsageError
from tunectl.profile.resolve import Profile
from tunectl.record import record
from tunectl.report import Report
from tunectl.status import Status
from tunectl.system import rulesfile
from tunectl.system.roots import under_dev
from tunectl.system.state import ACTIVE
from tunectl.tuning import apply as applying
from tunectl.tuning import intent, journal, relink, text
from tunectl.tuning.intent import Intent, load_profile_for
from tunectl.tuning.journal import ChangedBy, Journal
from tunectl.tuning.plan import Setting, make_plan, queue_attrs_of
from tunectl.tuning.topology import DeviceWarning, read_ahead_warnings
from tunectl.units import format_bytes

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from tunectl.owners.model import DeviceOwners, Owner

# Who set each value: `tunectl.owners.find_owners`, handed in by the commands that show it (status, verify),
# so plan and apply never load the owners check (its import is a tenth of their CPU).
OwnersOf = Callable[..., dict]


@record
class Scope:
    """The devices a command was limited to: named on its command line, or those of the last apply.

    By stable identity (the active-profile record outlives kernel names); `devices`
    are the kernel names present now, `absent` the identities not present.
    """

    origin: str  # "arguments" | "last-apply"
    devices: tuple[str, ...]
    identities: tuple[str, ...]
    absent: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"from": self.origin, "devices": list(self.devices), "identities": list(self.identities),
                "absent": list(self.absent)}

    def describe(self, profile: str) -> str:
        names = ", ".join(self.devices) or "none present"
        if self.origin == "arguments":
            return f"scope: {names}"
        said = f"scope: {names} (the devices the last apply of {profile} was limited to; --all for every device)"
        return said + (f"; not present: {', '.join(self.absent)}" if self.absent else "")


@record
class PlanReport(Report):
    """The report of status, plan and verify: the devices, the planned settings, warnings and owners."""

    profile: str
    devices: list[Device]
    settings: list[Setting]
    warnings: list = field(default_factory=list)
    scope: Scope | None = None  # None: every device
    device_warnings: list[DeviceWarning] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (device, why the profile sets nothing on it)
    kind: str = "plan"  # "status" | "plan" | "verify": which command's document and exit code
    owners: dict[str, DeviceOwners] = field(default_factory=dict)  # status, verify: who set each value shown
    relinked: list[str] = field(default_factory=list)  # verify: tuned loop devices whose identity changed (warnings)
    notes: list[str] = field(default_factory=list)  # what chose the profile (the cli says them first, on stderr)
    held: list[str] = field(default_factory=list)  # verify: devices a running bench holds temporary values on
    applied: bool = False  # status: a profile is recorded (the record of intent)
    rules: intent.Rules | None = None  # status: the installed udev rules the record names (None: none)

    def owner(self, device: str, attribute: str) -> Owner | None:
        found = self.owners.get(device)
        return found.owners.get(attribute) if found is not None else None

    @property
    def changes(self) -> list[Setting]:
        return [s for s in self.settings if s.status == Status.CHANGE]

    @property
    def drift(self) -> list[Setting]:
        return [s for s in self.settings if s.is_drift]

    @property
    def counted_drift(self) -> list[Setting]:
        """The drift verify counts: not the temporary values of a running bench."""
        return [s for s in self.drift if s.device not in self.held]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DRIFT if self.kind == "verify" and (self.counted_drift or self.relinked) else ExitCode.OK

    def to_json(self) -> dict:
        scope = self.scope.to_json() if self.scope is not None else None
        if self.kind == "status":
            return {"profile": self.profile, "scope": scope,
                    "devices": [dict(d.to_json(), drift=[s.to_json() for s in self.drift if s.device == d.name],
                                     warnings=[w.to_json() for w in self.device_warnings if w.device == d.name],
                                     owners=self.owners[d.name].to_json() if d.name in self.owners else {})
                                for d in self.devices],
                    "applied": self.applied, "notes": self.notes,
                    "rules": self.rules.to_json() if self.rules is not None else None}
        settings = [s.to_json() for s in self.settings]
        if self.kind == "verify":
            settings = [dict(j, owner=_owner_json(self.owner(s.device, s.attribute)))
                        for s, j in zip(self.settings, settings)]
        return {"profile": self.profile, "in_sync": not self.counted_drift and not self.relinked, "scope": scope,
                "settings": settings,
                "skipped": [{"device": d, "reason": r} for d, r in self.skipped],
                "device_warnings": [w.to_json() for w in self.device_warnings], "notes": self.notes}

    def print_text(self, out) -> None:
        """status: a row per device; plan and verify: a row per setting, then the summary (tunectl.tuning.text)."""
        if self.kind == "status":
            text.print_status(self, out)
        else:
            text.print_plan(self, out)


@record
class NothingAppliedReport(Report):
    """`verify` without -p when no profile is recorded: nothing to compare with, so in sync (exit 0)."""

    state_dir: str

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def to_json(self) -> dict:
        return {"profile": None, "in_sync": True, "applied": False, "scope": None, "settings": [], "skipped": [],
                "device_warnings": []}

    def print_text(self, out) -> None:
        out.print(f"nothing applied: no profile is recorded in {self.state_dir} (none applied yet, or all rolled "
                  "back); `tunectl verify -p PROFILE` compares with one")


def _owner_json(owner: Owner | None) -> dict | None:
    return owner.to_json() if owner is not None else None


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


def last_apply_scope(ctx: Context, profile: Profile, devices: list[Device]) -> Scope | None:
    """The scope of the last apply, when it applied `profile` to some devices only; else None (every device)."""
    record = intent.current(ctx)
    wanted = record.scope if record is not None else None
    if wanted is None or not record.of_profile(profile.name, profile.files):
        return None  # another profile than the one last applied: no scope of its own
    present = {d.identity: d.name for d in devices}
    return Scope("last-apply", tuple(present[i] for i in wanted if i in present), tuple(wanted),
                 tuple(i for i in wanted if i not in present))


def _discover(ctx: Context, queue_attrs: set[str] | None = None, names: set[str] | None = None,
              graph: DeviceGraph | None = None) -> list[Device]:
    """Discovery on this machine (of `names` only, if given): a scheduler the running kernel has as a module
    counts as offered. `graph`: the run's graph, when it was read already."""
    return discover(ctx.sysfs, ctx.udev, queue_attrs, modular_schedulers(ctx.modules.loadable()), names, graph)


def discover_devices(ctx: Context) -> list[Device]:
    """Every device on this machine, as the tuning commands see them (for a command that adopts before it acts)."""
    return _discover(ctx)


def plan(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
         profile: Profile | None = None, stack: bool = False, scoped: bool = False, verify: bool = False,
         owners_of: OwnersOf | None = None) -> PlanReport:
    """The plan for all devices, or for `dev_refs` (with `stack`: and the disks below them).

    `scoped` (without DEV): only the devices the last apply of this profile was limited to.
    `verify`: the report is verify's (drift exits 1); `owners_of` (verify): who set each planned value.
    """
    profile = profile or load_profile_for(ctx, profile_ref)
    # One graph a run: read first when DEV arguments need it (kernel names of whole devices, the usual
    # `apply -p P sda sdb`: discovery then reads only them and their stacks), else built from discovery.
    graph = DeviceGraph.read(ctx.sysfs) if dev_refs else None
    named = [under_dev(ref) or ref for ref in dev_refs or ()]
    reading = graph.stack_of(named) if graph is not None and named and set(graph.slaves).issuperset(named) else None
    devices = _discover(ctx, queue_attrs_of(profile), reading, graph)
    graph = graph or DeviceGraph.of(devices)
    scope = _scope(ctx, profile, devices, graph, dev_refs, stack, scoped)
    settings = make_plan(devices, profile, graph, None if scope is None else scope.devices)
    planned = [d for d in devices if scope is None or d.name in scope.devices]
    # Warn about the devices this command resolves (DEV, the scope) or would write, not every device there is.
    touched = planned if scope is not None else [d for d in planned if d.name in {s.device for s in settings}]
    owners = owners_of(ctx, planned, settings, {d.name: [] for d in planned}, _rules_path(ctx)) if owners_of else {}
    relinked = _relinked(ctx, devices) if verify else []
    return PlanReport(profile.name, devices, settings,
                      list(profile.warnings) + ctx.state.warnings + shared_identity_warnings(touched, devices)
                      + relinked, scope, read_ahead_warnings(planned, settings), skip_reasons(profile, planned, settings),
                      "verify" if verify else "plan", owners, relinked)


def _relinked(ctx: Context, devices: list[Device]) -> list[str]:
    """verify: one warning per present loop device that an orphaned journal entry proves it is (see `relink`)."""
    if not any(d.backing for d in devices):
        return []
    try:
        kept = journal.load(ctx.state)
    except StateError:
        return []  # a journal rollback cannot use: status and rollback say why
    return [relink.warning(identity, dev, restored=False) for identity, dev in relink.orphans(kept, devices).items()]


def _rules_path(ctx: Context) -> str | None:
    record = intent.current(ctx)
    return record.rules.path if record is not None and record.rules is not None else None


def skip_reasons(profile: Profile, devices: list[Device], settings: list[Setting]) -> list[tuple[str, str]]:
    """One reason per device the profile sets nothing on, with the fragment that would (opt-in classes)."""
    planned = {s.device for s in settings}
    out = []
    for dev in devices:
        if dev.name in planned:
            continue
        size = _size_miss(profile, dev)
        if size:
            out.append((dev.name, size))
        elif dev.cls in OPT_IN_CLASSES and dev.cls not in profile.classes:
            out.append((dev.name, f"class {dev.cls} is tuned only by a profile that names it; e.g. add "
                                  f"`{dev.cls}: {{read_ahead_kb: 128}}` under `classes:` of {profile.name}"))
        else:
            out.append((dev.name, f"profile {profile.name} sets nothing for class {dev.cls}"))
    return out


def _size_miss(profile: Profile, dev: Device) -> str | None:
    """Why a `devices:` entry that matches `dev` in every key but `size` does not tune it, or None."""
    for i, entry in enumerate(profile.devices):
        match = entry.get("match") or {}
        if "size" in match and not matches(dev, match) and matches(dev, {k: v for k, v in match.items() if k != "size"}):
            lo, hi = match["size"].get("min"), match["size"].get("max")
            wanted = " and ".join(filter(None, (lo is not None and f"at least {format_bytes(lo)} ({lo} bytes)",
                                                hi is not None and f"at most {format_bytes(hi)} ({hi} bytes)")))
            return (f"devices[{i}] of {profile.name} matches it but for its size: it is {format_bytes(dev.size_bytes)} "
                    f"({dev.size_bytes} bytes), the entry wants {wanted} (KB, MB, GB are powers of 1000; "
                    "KiB, MiB, GiB of 1024)")
    return None


def _scope(ctx: Context, profile: Profile, devices: list[Device], graph: DeviceGraph,
           dev_refs: list[str] | None, stack: bool, scoped: bool) -> Scope | None:
    if not dev_refs:
        return last_apply_scope(ctx, profile, devices) if scoped else None
    only = Resolver(ctx, devices, graph).whole_devices(dev_refs)
    by_name = {d.name: d for d in devices}
    if stack:
        only = only + [low for name in only for low in graph.bottom(name) if low in by_name]
    only = list(dict.fromkeys(only))
    return Scope("arguments", tuple(only), tuple(sorted({by_name[n].identity for n in only})))


def status(ctx: Context, profile: Profile, owners_of: OwnersOf, dev_refs: list[str] | None = None,
           scoped: bool = True) -> PlanReport:
    """Every device (or those of `dev_refs`, or, `scoped`, those of the last apply's scope) with its drift, and
    who set each value shown (`owners_of`: `tunectl.owners.find_owners`)."""
    devices = _discover(ctx)
    graph = DeviceGraph.of(devices)
    scope = _scope(ctx, profile, devices, graph, dev_refs, False, scoped)
    # Plan over every device (a below: block comes from the stacked device above), show the scope's.
    settings = make_plan(devices, profile, graph, None if scope is None else scope.devices)
    shown = devices if scope is None else [d for d in devices if d.name in scope.devices]
    return PlanReport(profile.name, shown, settings,
                      list(profile.warnings) + ctx.state.warnings + shared_identity_warnings(shown, devices), scope,
                      read_ahead_warnings(devices), kind="status",
                      owners=owners_of(ctx, shown, settings, rules_path=_rules_path(ctx)))


def apply(ctx: Context, choice: intent.Choice, dev_refs: list[str] | None = None, check: bool = False,
          stack: bool = False, scoped: bool = False) -> ApplyReport:
    """Write the plan of `choice.profile` (`scoped`, without DEV: on the record's scope), journalling originals first.

    Nothing is recorded for writes that never happened: the journal entries of
    refused or failed writes are taken back, and the record of intent is saved
    only when something was written or everything already was as wanted.
    """
    profile = choice.profile
    if check:
        report = plan(ctx, None, dev_refs, profile, stack, scoped)
        return ApplyReport(profile.name, [applying.Outcome(s, s.status) for s in report.settings], check=True,
                           warnings=report.warnings, skipped=report.skipped)
    with ctx.state.locked():
        # Plan under the lock: another run may have changed things while we waited.
        report = plan(ctx, None, dev_refs, profile, stack, scoped)
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


def rollback(ctx: Context, dev_refs: list[str] | None = None, check: bool = False,
             remove_rules: bool = False) -> ApplyReport:
    """Restore the journalled originals (of `dev_refs`, else of every device), then update the record of intent.

    While udev rules are installed a rollback is refused (the next change event
    would write their values again) unless `remove_rules` removes them first. A
    full rollback that restores everything clears the record. `check` writes nothing, so it takes no lock (a
    user who cannot create the lock can still ask what a rollback would do).
    """
    with contextlib.nullcontext() if check else ctx.state.locked():
        read = journal.load(ctx.state)
        record = intent.load(ctx.state)
        devices = _discover(ctx)
        kept, _ = adopt_rules_originals(ctx, record, read, devices)
        notes = _rules_before_rollback(ctx, record, check, remove_rules)
        chosen = set(Resolver(ctx, devices).whole_devices(dev_refs)) if dev_refs else None
        # A loop device whose identity changed while tuned, proven the journalled one: restored under its new identity.
        relinked = {i: d for i, d in relink.orphans(kept, devices).items() if chosen is None or d.name in chosen}
        kept = relink.stamp(relink.rekey(kept, relinked), devices)
        settings = applying.rollback_plan(kept, devices, lambda d: chosen is None or d.name in chosen)
        present = {d.identity for d in devices}
        notes += [f"{entry.name} ({identity}) is not present; its originals stay in the journal"
                  for identity, entry in kept.devices.items() if identity not in present and chosen is None]
        # Warn about the devices this rollback resolves (DEV) or restores, not every device there is.
        restoring = {s.device for s in settings}
        warnings = list(ctx.state.warnings) + shared_identity_warnings(
            [d for d in devices if d.name in restoring or chosen is not None and d.name in chosen], devices)
        unmatched = _lost_loop_identities(kept, devices, chosen or set(), present)
        warnings += unmatched + [relink.warning(i, d, restored=False) for i, d in relinked.items()]
        if check:
            return ApplyReport("journal", [applying.Outcome(s, s.status) for s in settings], check=True, notes=notes,
                               warnings=warnings, unmatched=unmatched)
        if remove_rules and record is not None and record.rules is not None:
            record = replace(record, rules=None)
            intent.save(ctx.state, record)
        writes_before = ctx.sysfs.writes
        outcomes = applying.apply_settings(ctx.sysfs, settings)
        failed = {o.setting.identity for o in outcomes if o.status not in (Status.CHANGED, Status.IN_SYNC)}
        restored = {o.setting.identity for o in outcomes} - failed
        kept = kept.without(restored)
        try:
            if kept != read or ctx.state.recovered():
                journal.save(ctx.state, kept)
            if record is not None:
                left = record.without(restored | {i for i, d in relinked.items() if d.identity in restored})
                if (chosen is None and not kept.devices) or left.scope == ():
                    intent.clear(ctx.state)  # nothing is tuned any more: verify says "nothing applied"
                elif left != record:
                    intent.save(ctx.state, left)
        except StateError as e:  # the devices are restored already: say so, not only that the state is stuck
            done = sorted({o.setting.device for o in outcomes if o.status == Status.CHANGED})
            raise StateError(f"{e.message}. The devices were restored ({len(done)} changed: {', '.join(done) or 'none'}"
                             "); the journal still lists their originals, so the next rollback finds them in sync",
                             hint=e.hint) from None
    return ApplyReport("journal", outcomes, writes=ctx.sysfs.writes - writes_before, notes=notes,
                       warnings=warnings, unmatched=unmatched)


def _lost_loop_identities(kept: Journal, devices: list[Device], chosen: set[str], present: set[str]) -> list[str]:
    """A named loop device with no journal entry of its own, whose name an entry of a loop device no longer present
    holds: its backing file was renamed or deleted (or its twin detached) while it was tuned. Nothing tells tunectl
    it is the same device, so nothing is written; the rollback says so and does not exit 0."""
    found = []
    for dev in devices:
        if dev.name not in chosen or dev.cls != "loop" or dev.identity in kept:
            continue
        for identity, entry in kept.devices.items():
            if identity.startswith("loop:") and identity not in present and entry.name == dev.name:
                found.append(f"tunectl: warning: {dev.name} ({dev.identity}) was journalled as {identity}: its backing "
                             "file was renamed, deleted or re-attached since it was tuned; its originals stay in the "
                             f"journal and nothing was restored on it (check it with `tunectl status -v {dev.name}`)")
    return found


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


def _rules_before_rollback(ctx: Context, record: Intent | None, check: bool, remove_rules: bool) -> list[str]:
    """Refuse a rollback the installed udev rules would undo; with `remove_rules`, remove them first."""
    rules = record.rules if record is not None else None
    if rules is None or not os.path.exists(rules.path):
        return []
    if check and remove_rules:
        return [f"would remove udev rules {rules.path} (profile {rules.profile}) before restoring"]
    if check:
        return [f"udev rules {rules.path} are installed: a rollback needs --remove-rules, or the next change "
                "event writes their values again"]
    if not remove_rules:
        raise UsageError(f"udev rules {rules.path} (profile {rules.ref}) are installed: the next change "
                         "event would write their values again after a rollback, so nothing was restored",
                         hint="tunectl rollback --remove-rules removes the rules first; or keep the rules")
    problems = rulesfile.remove(rules.path, ctx.run)
    return [f"removed udev rules {rules.path} (profile {rules.profile}) before restoring"] + problems
