"""The tuning operations behind status, plan, apply, verify and rollback.

Each returns a report object; rendering and exit codes are the CLI's business.
"""

from __future__ import annotations

from collections.abc import Callable

from tunectl.attributes import SCHEDULER_MODULE_NAMES, modular_schedulers
from tunectl.context import Context
from tunectl.devices.classes import OPT_IN_CLASSES
from tunectl.devices.discover import discover, shared_identity_warnings
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.match import matches
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.errors import ExitCode
from tunectl.profile.resolve import Profile
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.status import Status
from tunectl.system.roots import under_dev
from tunectl.tuning import intent, text
from tunectl.tuning.intent import load_profile_for
from tunectl.tuning.plan import Setting, make_plan, queue_attrs_of
from tunectl.tuning.topology import DeviceWarning, read_ahead_warnings
from tunectl.units import format_bytes

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from tunectl.owners.model import DeviceOwners, Owner

# Who set each value: `tunectl.owners.find_owners`, handed in by the commands that show it (status, verify),
# so plan and apply never load the owners check (its import is a tenth of their CPU).
OwnersOf = Callable[..., dict]
# verify's warnings of relinked loop devices: `tunectl.tuning.changes.relinked` (it reads the journal, which
# plan never loads).
RelinkedOf = Callable[[Context, list[Device]], list[str]]


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
        from tunectl.report import shown

        out.print(f"nothing applied: no profile is recorded in {shown(str(self.state_dir))} (none applied yet, or all rolled "
                  "back); `tunectl verify -p PROFILE` compares with one")


def _owner_json(owner: Owner | None) -> dict | None:
    return owner.to_json() if owner is not None else None


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
    modular = modular_schedulers(ctx.modules.loadable(SCHEDULER_MODULE_NAMES))
    return discover(ctx.sysfs, ctx.udev, queue_attrs, modular, names, graph)


def discover_devices(ctx: Context) -> list[Device]:
    """Every device on this machine, as the tuning commands see them (for a command that adopts before it acts)."""
    return _discover(ctx)


def plan(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
         profile: Profile | None = None, stack: bool = False, scoped: bool = False, verify: bool = False,
         owners_of: OwnersOf | None = None, relinked_of: RelinkedOf | None = None) -> PlanReport:
    """The plan for all devices, or for `dev_refs` (with `stack`: and the disks below them).

    `scoped` (without DEV): only the devices the last apply of this profile was limited to.
    `verify`: the report is verify's (drift exits 1); `owners_of` (verify): who set each planned value.
    `relinked_of` (verify): the warnings of tuned loop devices whose identity changed.
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
    relinked = relinked_of(ctx, devices) if relinked_of else []
    return PlanReport(profile.name, devices, settings,
                      list(profile.warnings) + ctx.state.warnings + shared_identity_warnings(touched, devices)
                      + relinked, scope, read_ahead_warnings(planned, settings), skip_reasons(profile, planned, settings),
                      "verify" if verify else "plan", owners, relinked)


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
