"""The tuning operations behind status, plan, apply, verify and rollback.

Each returns a report object; rendering and exit codes are the CLI's business.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tunectl.context import Context
from tunectl.errors import ExitCode, UsageError
from tunectl.profile.resolve import Profile, load_profile
from tunectl.tuning import apply as applying
from tunectl.tuning.device import Device
from tunectl.tuning.discover import discover, partition_parent, stack_of
from tunectl.tuning.plan import CHANGE, UNAVAILABLE, Setting, lower_disks, make_plan, queue_attrs_of


@dataclass
class PlanReport:
    profile: str
    devices: list[Device]
    settings: list[Setting]
    warnings: list = field(default_factory=list)

    @property
    def changes(self) -> list[Setting]:
        return [s for s in self.settings if s.status == CHANGE]

    @property
    def drift(self) -> list[Setting]:
        return [s for s in self.settings if s.is_drift]


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
        return any(o.status in (applying.CHANGED,) or (self.check and o.status == CHANGE) for o in self.outcomes)

    @property
    def exit_code(self) -> ExitCode:
        statuses = {o.status for o in self.outcomes}
        if applying.NOT_PERMITTED in statuses and not statuses & {applying.CHANGED, "ok", CHANGE}:
            return ExitCode.NOT_PERMITTED
        if statuses & {applying.FAILED, applying.NOT_PERMITTED, UNAVAILABLE}:
            return ExitCode.PARTIAL
        return ExitCode.OK


def active_profile_ref(ctx: Context, ref: str | None) -> str | None:
    """An explicit -p wins; else the profile of the last apply; else the default."""
    if ref:
        return ref
    record = ctx.state.active_profile() if ctx.state.dir.exists() else None
    return record.get("ref") if record else None


def resolve_names(ctx: Context, devices: list[Device], refs: list[str]) -> list[str]:
    """DEV arguments (sda, /dev/sda, /dev/disk/by-id/..., a partition, a mountpoint or any path) -> kernel names
    of whole devices (a path: the whole disks under its filesystem)."""
    by_name = {d.name: d for d in devices}
    out = []
    for ref in refs:
        name = ref[len("/dev/"):] if ref.startswith("/dev/") else ref
        found = name if name in by_name else None
        if found is None:
            found = next((d.name for d in devices if name in d.links), None)
        if found is None and ref.startswith("/dev/") and os.path.exists(ref) and str(ctx.sysfs.root) == "/sys":
            found = os.path.basename(os.path.realpath(ref))
        if found is not None and found not in by_name:
            found = partition_parent(ctx.sysfs, found)
        if found is None or found not in by_name:
            parent = partition_parent(ctx.sysfs, name)
            found = parent if parent in by_name else None
        if found is None and "/" in ref and not ref.startswith("/dev/"):
            from tunectl.system.blockpath import disks_under_path  # a mountpoint or any path: its disks

            out.extend(d for d in disks_under_path(ctx, ref) if d in by_name and d not in out)
            continue
        if found is None:
            known = ", ".join(sorted(by_name)) or "none"
            raise UsageError(f"no block device {ref!r} under {ctx.sysfs.root}", hint=f"devices here: {known}")
        out.append(found)
    return out


def _parents(ctx: Context, devices: list[Device]) -> dict[str, str]:
    parents = {}
    for dev in devices:
        for part in dev.partitions:
            parents[part.name] = dev.name
    return parents


def _load(ctx: Context, ref: str | None) -> Profile:
    cache = ctx.state.dir / "validated" if os.access(ctx.state.dir, os.W_OK) else None
    return load_profile(ref, ctx.search_path, cache)


def plan(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
         profile: Profile | None = None, stack: bool = False) -> PlanReport:
    """The plan for all devices, or for `dev_refs` (with `stack`: and the disks below them)."""
    profile = profile or _load(ctx, profile_ref)
    # Kernel names of whole devices (the usual `apply -p P sda sdb`): read only them and their stacks.
    whole = set(ctx.sysfs.listdir("block"))
    named = [ref[len("/dev/"):] if ref.startswith("/dev/") else ref for ref in dev_refs or ()]
    scope = stack_of(ctx.sysfs, named) if named and whole.issuperset(named) else None
    devices = discover(ctx.sysfs, ctx.udev, queue_attrs_of(profile), scope)
    parents = _parents(ctx, devices)
    only = resolve_names(ctx, devices, dev_refs) if dev_refs else None
    if only is not None and stack:
        by_name = {d.name: d for d in devices}
        only = only + [low for name in only for low in lower_disks(by_name, name, parents)]
    settings = make_plan(devices, profile, parents, only)
    return PlanReport(profile.name, devices, settings, list(profile.warnings))


def status(ctx: Context, profile_ref: str | None) -> PlanReport:
    profile = _load(ctx, active_profile_ref(ctx, profile_ref))
    devices = discover(ctx.sysfs, ctx.udev)
    return PlanReport(profile.name, devices, make_plan(devices, profile, _parents(ctx, devices)), list(profile.warnings))


def apply(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None, check: bool = False,
          stack: bool = False) -> ApplyReport:
    profile = _load(ctx, profile_ref)
    if check:
        report = plan(ctx, None, dev_refs, profile, stack)
        return ApplyReport(profile.name, [applying.Outcome(s, s.status) for s in report.settings], check=True,
                           warnings=report.warnings)
    with ctx.state.locked():
        # Plan under the lock: another run may have changed things while we waited.
        report = plan(ctx, None, dev_refs, profile, stack)
        journal = ctx.state.journal()
        by_name = {d.name: d for d in report.devices}
        if applying.record_originals(journal, report.settings, by_name):
            ctx.state.save_journal(journal)
        writes_before = ctx.sysfs.writes
        started = time.perf_counter()
        outcomes = applying.apply_settings(ctx.sysfs, report.settings)
        write_seconds = time.perf_counter() - started
        record = {"ref": profile_ref or profile.name, "name": profile.name, "files": profile.files}
        if ctx.state.active_profile() != record:
            ctx.state.save_active_profile(record)
    return ApplyReport(profile.name, outcomes, writes=ctx.sysfs.writes - writes_before, write_seconds=write_seconds,
                       warnings=report.warnings)


def rollback(ctx: Context, dev_refs: list[str] | None = None, check: bool = False) -> ApplyReport:
    with ctx.state.locked():
        journal = ctx.state.journal()
        devices = discover(ctx.sysfs, ctx.udev)
        chosen = set(resolve_names(ctx, devices, dev_refs)) if dev_refs else None
        settings = applying.rollback_plan(journal, devices, lambda d: chosen is None or d.name in chosen)
        present = {d.identity for d in devices}
        notes = [f"{entry['name']} ({identity}) is not present; its originals stay in the journal"
                 for identity, entry in journal["devices"].items() if identity not in present and chosen is None]
        if check:
            return ApplyReport("journal", [applying.Outcome(s, s.status) for s in settings], check=True, notes=notes)
        writes_before = ctx.sysfs.writes
        outcomes = applying.apply_settings(ctx.sysfs, settings)
        failed = {o.setting.identity for o in outcomes if o.status not in (applying.CHANGED, "ok")}
        restored = {o.setting.identity for o in outcomes} - failed
        for identity in restored:
            journal["devices"].pop(identity, None)
        if restored:
            ctx.state.save_journal(journal)
    return ApplyReport("journal", outcomes, writes=ctx.sysfs.writes - writes_before, notes=notes)
