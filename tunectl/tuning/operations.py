"""The tuning operations behind status, plan, apply, verify and rollback.

Each returns a report object; rendering and exit codes are the CLI's business.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tunectl.attributes import modular_schedulers
from tunectl.context import Context
from tunectl.devices.discover import discover
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.errors import ExitCode, StateError
from tunectl.profile.resolve import Profile, load_profile
from tunectl.status import Status
from tunectl.system.roots import under_dev
from tunectl.system.state import ACTIVE
from tunectl.tuning import apply as applying
from tunectl.tuning.active import profile_record, recorded_ref, same_profile
from tunectl.tuning.plan import Setting, make_plan, queue_attrs_of
from tunectl.tuning.topology import DeviceWarning, read_ahead_warnings


@dataclass(frozen=True)
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
        text = f"scope: {names} (the devices the last apply of {profile} was limited to; --all for every device)"
        return text + (f"; not present: {', '.join(self.absent)}" if self.absent else "")


@dataclass
class PlanReport:
    profile: str
    devices: list[Device]
    settings: list[Setting]
    warnings: list = field(default_factory=list)
    scope: Scope | None = None  # None: every device
    device_warnings: list[DeviceWarning] = field(default_factory=list)
    kind: str = "plan"  # "status" | "plan" | "verify": which command's document and exit code

    @property
    def changes(self) -> list[Setting]:
        return [s for s in self.settings if s.status == Status.CHANGE]

    @property
    def drift(self) -> list[Setting]:
        return [s for s in self.settings if s.is_drift]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DRIFT if self.kind == "verify" and self.drift else ExitCode.OK

    def to_json(self) -> dict:
        scope = self.scope.to_json() if self.scope is not None else None
        if self.kind == "status":
            return {"profile": self.profile, "scope": scope,
                    "devices": [dict(d.to_json(), drift=[s.to_json() for s in self.drift if s.device == d.name],
                                     warnings=[w.to_json() for w in self.device_warnings if w.device == d.name])
                                for d in self.devices]}
        return {"profile": self.profile, "in_sync": not self.drift, "scope": scope,
                "settings": [s.to_json() for s in self.settings],
                "device_warnings": [w.to_json() for w in self.device_warnings]}


@dataclass
class ApplyReport:
    profile: str
    outcomes: list[applying.Outcome]
    check: bool = False
    writes: int = 0
    write_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(o.status in (Status.CHANGED,) or (self.check and o.status == Status.CHANGE) for o in self.outcomes)

    def to_json(self) -> dict:
        return {"profile": self.profile, "changed": self.changed, "check": self.check, "writes": self.writes,
                "write_phase_ms": round(self.write_seconds * 1000, 3), "notes": self.notes,
                "warnings": [str(w) for w in self.warnings], "settings": [o.to_json() for o in self.outcomes]}

    @property
    def exit_code(self) -> ExitCode:
        statuses = {o.status for o in self.outcomes}
        if Status.NOT_PERMITTED in statuses and not statuses & {Status.CHANGED, Status.IN_SYNC, Status.CHANGE}:
            return ExitCode.NOT_PERMITTED
        if statuses & {Status.FAILED, Status.NOT_PERMITTED, Status.UNAVAILABLE}:
            return ExitCode.PARTIAL
        return ExitCode.OK


def active_profile_ref(ctx: Context, ref: str | None) -> str | None:
    """An explicit -p wins; else the profile of the last apply; else the default."""
    if ref:
        return ref
    record = ctx.state.active_profile() if ctx.state.exists() else None
    return recorded_ref(record) if record else None


def scoped_record(record: dict, previous: dict | None, scope: list[str] | None) -> dict:
    """The active-profile record after an apply limited to `scope` (identities; None: every device).

    An apply without DEV clears the scope. One with DEV keeps the profile's
    record unscoped when the same profile was last applied to every device (they
    are all tuned by it), adds to the scope of an earlier limited apply of the
    same profile, and otherwise starts a new scope. Records without a scope (all
    records before scopes existed) mean every device.
    """
    if scope is None:
        return dict(record)
    same = same_profile(previous, record["name"], record["files"])
    if same and "scope" not in previous:
        return dict(record)
    earlier = previous.get("scope", []) if same else []
    return dict(record, scope=sorted(set(earlier) | set(scope)))


def last_apply_scope(ctx: Context, profile: Profile, devices: list[Device]) -> Scope | None:
    """The scope of the last apply, when it applied `profile` to some devices only; else None (every device)."""
    record = ctx.state.active_profile() if ctx.state.exists() else None
    if not record or not isinstance(record.get("scope"), list):
        return None
    if not same_profile(record, profile.name, profile.files):
        return None  # another profile than the one last applied: no scope of its own
    wanted = [str(i) for i in record["scope"]]
    present = {d.identity: d.name for d in devices}
    return Scope("last-apply", tuple(present[i] for i in wanted if i in present), tuple(wanted),
                 tuple(i for i in wanted if i not in present))


def _discover(ctx: Context, queue_attrs: set[str] | None = None, names: set[str] | None = None) -> list[Device]:
    """Discovery on this machine (of `names` only, if given): a scheduler the running kernel has as a module
    counts as offered."""
    return discover(ctx.sysfs, ctx.udev, queue_attrs, modular_schedulers(ctx.modules.loadable()), names)


def load_profile_for(ctx: Context, ref: str | None) -> Profile:
    """The profile `ref` (None: the default), checked once per content: the verdict is cached in the state dir."""
    return load_profile(ref, ctx.search_path, ctx.state.validation_cache())


def plan(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
         profile: Profile | None = None, stack: bool = False, scoped: bool = False, verify: bool = False) -> PlanReport:
    """The plan for all devices, or for `dev_refs` (with `stack`: and the disks below them).

    `scoped` (verify without DEV): only the devices the last apply of this profile was limited to.
    `verify`: the report is verify's (drift exits 1).
    """
    profile = profile or load_profile_for(ctx, profile_ref)
    graph = DeviceGraph.read(ctx.sysfs)
    # Kernel names of whole devices (the usual `apply -p P sda sdb`): read only them and their stacks.
    named = [under_dev(ref) or ref for ref in dev_refs or ()]
    reading = graph.stack_of(named) if named and set(graph.slaves).issuperset(named) else None
    devices = _discover(ctx, queue_attrs_of(profile), reading)
    scope = _scope(ctx, profile, devices, graph, dev_refs, stack, scoped)
    settings = make_plan(devices, profile, graph, None if scope is None else scope.devices)
    planned = [d for d in devices if scope is None or d.name in scope.devices]
    return PlanReport(profile.name, devices, settings, list(profile.warnings) + ctx.state.warnings, scope,
                      read_ahead_warnings(planned, settings), "verify" if verify else "plan")


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


def status(ctx: Context, profile_ref: str | None, scoped: bool = True) -> PlanReport:
    """Every device (or, `scoped`, those of the last apply's scope) with its drift from the profile."""
    profile = load_profile_for(ctx, active_profile_ref(ctx, profile_ref))
    devices = _discover(ctx)
    scope = last_apply_scope(ctx, profile, devices) if scoped else None
    # Plan over every device (a below: block comes from the stacked device above), show the scope's.
    settings = make_plan(devices, profile, DeviceGraph.of(devices), None if scope is None else scope.devices)
    if scope is not None:
        devices = [d for d in devices if d.name in scope.devices]
    return PlanReport(profile.name, devices, settings, list(profile.warnings) + ctx.state.warnings, scope,
                      read_ahead_warnings(devices), "status")


def apply(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None, check: bool = False,
          stack: bool = False) -> ApplyReport:
    profile = load_profile_for(ctx, profile_ref)
    if check:
        report = plan(ctx, None, dev_refs, profile, stack)
        return ApplyReport(profile.name, [applying.Outcome(s, s.status) for s in report.settings], check=True,
                           warnings=report.warnings)
    with ctx.state.locked():
        # Plan under the lock: another run may have changed things while we waited.
        report = plan(ctx, None, dev_refs, profile, stack)
        journal = ctx.state.journal()
        record = profile_record(profile_ref or profile.name, profile.name, profile.files)
        # Read before any write: a state file tunectl cannot use stops the run here.
        previous = ctx.state.active_profile()
        record = scoped_record(record, previous, None if report.scope is None else list(report.scope.identities))
        # `--stack` is what a udev event runs: the values it finds may be ones the rules wrote moments before,
        # so it journals no originals and leaves the record (and scope) of the user's last apply alone.
        new_active = not stack and (previous != record or ctx.state.recovered(ACTIVE))
        by_name = {d.name: d for d in report.devices}
        if not stack and (applying.record_originals(journal, report.settings, by_name,
                                                    _changed_by(profile_ref or profile.name)) or ctx.state.recovered()):
            ctx.state.save_journal(journal)
        writes_before = ctx.sysfs.writes
        started = time.perf_counter()
        outcomes = applying.apply_settings(ctx.sysfs, report.settings)
        write_seconds = time.perf_counter() - started
        if new_active:
            try:
                ctx.state.save_active_profile(record)
            except StateError as e:
                raise StateError(f"{e.message}; the settings were applied and their originals journalled, "
                                 "only the record of the profile in use (for verify and status) is stale",
                                 e.hint) from None
    return ApplyReport(profile.name, outcomes, writes=ctx.sysfs.writes - writes_before, write_seconds=write_seconds,
                       warnings=list(dict.fromkeys(report.warnings + ctx.state.warnings)))


def _changed_by(ref: str) -> dict:
    from tunectl import __version__

    return {"profile": ref, "tunectl": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def rollback(ctx: Context, dev_refs: list[str] | None = None, check: bool = False) -> ApplyReport:
    with ctx.state.locked():
        journal = ctx.state.journal()
        devices = _discover(ctx)
        chosen = set(Resolver(ctx, devices).whole_devices(dev_refs)) if dev_refs else None
        settings = applying.rollback_plan(journal, devices, lambda d: chosen is None or d.name in chosen)
        present = {d.identity for d in devices}
        notes = [f"{entry['name']} ({identity}) is not present; its originals stay in the journal"
                 for identity, entry in journal["devices"].items() if identity not in present and chosen is None]
        if check:
            return ApplyReport("journal", [applying.Outcome(s, s.status) for s in settings], check=True, notes=notes,
                               warnings=list(ctx.state.warnings))
        writes_before = ctx.sysfs.writes
        outcomes = applying.apply_settings(ctx.sysfs, settings)
        failed = {o.setting.identity for o in outcomes if o.status not in (Status.CHANGED, Status.IN_SYNC)}
        restored = {o.setting.identity for o in outcomes} - failed
        for identity in restored:
            journal["devices"].pop(identity, None)
        if restored or ctx.state.recovered():
            ctx.state.save_journal(journal)
    return ApplyReport("journal", outcomes, writes=ctx.sysfs.writes - writes_before, notes=notes,
                       warnings=list(ctx.state.warnings))
