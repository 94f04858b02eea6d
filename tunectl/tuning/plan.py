"""Planning: what each device should look like under a profile, and what differs.

Pure: takes discovered Device records and a resolved Profile, returns Settings.
`verify` is this same function on a fresh discovery; an empty set of changes
means in sync.
"""

from __future__ import annotations

from collections.abc import Iterable

from tunectl.attributes import IOSCHED, QUEUE, is_range, side_effects, wanted_value, wanted_value_in_sync, write_order
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.match import matches
from tunectl.devices.model import Device
from tunectl.profile.resolve import Profile
from tunectl.record import field, record
from tunectl.status import Status

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

# Statuses of a planned setting.


@record
class Setting:
    """One planned change of one attribute on one device: before, after, and whether it is needed."""

    device: str
    identity: str
    attribute: str  # relative to queue/: "scheduler", "iosched/read_expire", "read_ahead_kb"
    before: Any
    after: Any
    source: str  # which part of the profile asked for it
    status: Status
    reason: str = ""
    bounds: dict | None = None  # the wanted range ({min, max}); `after` is then its value nearest `before`
    # the kernel rewrites it when an earlier write of the plan lands (attributes.side_effects): written again,
    # decided on its value then; `before` is its value when the plan was made
    rewritten: bool = False

    @property
    def is_drift(self) -> bool:
        return self.status in (Status.CHANGE, Status.UNAVAILABLE)

    def to_json(self) -> dict:
        return {"device": self.device, "identity": self.identity, "attribute": self.attribute,
                "before": self.before, "after": self.after, "range": self.bounds, "source": self.source,
                "status": self.status, "reason": self.reason}


@record
class Wanted:
    """Attribute -> (value, source) for one device, built up layer by layer."""

    values: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def layer(self, settings: dict, source: str) -> None:
        if "scheduler" in settings:
            self.values["scheduler"] = (settings["scheduler"], source)
        for knob, value in (settings.get("iosched") or {}).items():
            self.values[f"iosched/{knob}"] = (value, source)
        if "read_ahead_kb" in settings:
            self.values["read_ahead_kb"] = (settings["read_ahead_kb"], source)
        for attr, value in (settings.get("queue") or {}).items():
            self.values[attr] = (value, source)


def wanted_for(devices: list[Device], profile: Profile, graph: DeviceGraph | None = None) -> dict[str, Wanted]:
    """Per device name: the attributes the profile wants, with their source.

    Layers, later wins: own class, `below` of stacked classes above, own
    `devices` entries in file order, `below` of `devices` entries above.
    """
    graph = graph or DeviceGraph.of(devices)
    known = {d.name for d in devices}
    below_class: dict[str, list[tuple[dict, str]]] = {}
    below_entry: dict[str, list[tuple[dict, str]]] = {}
    for dev in devices:
        if not dev.slaves:
            continue
        lowers = [low for low in graph.bottom(dev.name) if low in known]
        cls_settings = profile.classes.get(dev.cls) or {}
        if cls_settings.get("below"):
            for low in lowers:
                below_class.setdefault(low, []).append((cls_settings["below"], f"classes.{dev.cls}.below (from {dev.name})"))
        for i, entry in enumerate(profile.devices):
            if entry.get("below") and matches(dev, entry["match"]):
                for low in lowers:
                    below_entry.setdefault(low, []).append((entry["below"], f"devices[{i}].below (from {dev.name})"))
    result = {}
    for dev in devices:
        w = Wanted()
        w.layer(profile.classes.get(dev.cls) or {}, f"classes.{dev.cls}")
        for settings, source in below_class.get(dev.name, []):
            w.layer(settings, source)
        for i, entry in enumerate(profile.devices):
            if matches(dev, entry["match"]):
                w.layer(entry, f"devices[{i}]")
        for settings, source in below_entry.get(dev.name, []):
            w.layer(settings, source)
        result[dev.name] = w
    return result


def plan_device(dev: Device, wanted: Wanted) -> list[Setting]:
    """Settings for one device, in the order they must be written (attributes.write_order)."""
    out: list[Setting] = []

    def add(attr: str, before: Any, after: Any, source: str, status: Status, reason: str = "",
            rewritten: bool = False) -> None:
        bounds = after if is_range(after) else None
        out.append(Setting(dev.name, dev.identity, attr, before, wanted_value(after, before), source, status, reason,
                           bounds, rewritten))

    values = wanted.values
    target = dev.scheduler
    switching = False
    if "scheduler" in values:
        prefs, source = values["scheduler"]
        if not dev.has_scheduler:
            add("scheduler", None, prefs[0], source, Status.SKIP, "device has no I/O scheduler (bio-based); "
                "tune the disks below it with below:")
            target = None
        else:
            chosen = next((p for p in prefs if dev.offers(p)), None)
            if chosen is None:
                add("scheduler", dev.scheduler, prefs[0], source, Status.UNAVAILABLE,
                    f"device offers {' '.join(dev.schedulers + dev.loadable)}; none of {', '.join(prefs)}")
            else:
                switching = chosen != dev.scheduler
                add("scheduler", dev.scheduler, chosen, source, Status.CHANGE if switching else Status.IN_SYNC)
                target = chosen
    # Attributes an earlier write of this plan makes the kernel rewrite: they are written again.
    disturbed = set(side_effects("scheduler")) if switching else set()
    for attr in sorted((a for a in values if a != "scheduler"), key=write_order):
        value, source = values[attr]
        if attr.startswith("iosched/"):
            knob_name = attr.split("/", 1)[1]
            spec = IOSCHED.get(target or "", {}).get(knob_name)
            if not dev.has_scheduler or target is None:
                add(attr, None, value, source, Status.SKIP, "device has no I/O scheduler")
                continue
            if spec is None:
                add(attr, None, value, source, Status.SKIP, f"not a knob of {target}")
                continue
            if switching:
                add(attr, None, value, source, Status.CHANGE, f"after switching to {target}" + (
                    ": the kernel's default stays if inside the range" if is_range(value) else ""))
                continue
            before = dev.iosched.get(knob_name)
        elif attr not in dev.queue:
            add(attr, None, value, source, Status.SKIP, f"device has no queue/{attr}")
            continue
        else:
            spec, before = QUEUE[attr], dev.queue[attr]
        if attr not in disturbed and wanted_value_in_sync(spec, value, before):
            add(attr, before, value, source, Status.IN_SYNC)
        else:
            add(attr, before, value, source, Status.CHANGE,
                "an earlier write of this plan makes the kernel reset it" + (
                    "; kept if the reset value is inside the range" if is_range(value) else "") if attr in disturbed else "",
                attr in disturbed)
            disturbed |= side_effects(attr)
    return out


def make_plan(devices: list[Device], profile: Profile, graph: DeviceGraph | None = None,
              only: Iterable[str] | None = None) -> list[Setting]:
    """Every wanted setting of every device (or of `only`), with its status; `graph`: how they stack."""
    wanted = wanted_for(devices, profile, graph)
    chosen = set(only) if only is not None else None
    out: list[Setting] = []
    for dev in devices:
        if chosen is not None and dev.name not in chosen:
            continue
        out.extend(plan_device(dev, wanted[dev.name]))
    return out


def queue_attrs_of(profile: Profile) -> set[str]:
    """Queue attributes a profile can touch, so discovery reads only those.

    read_ahead_kb and nr_requests always: the kernel changes them as a side
    effect (limits, scheduler switches) and the journal must hold their originals.
    """
    attrs = {"read_ahead_kb", "nr_requests"}
    blocks = [*profile.classes.values(), *profile.devices]
    blocks += [b["below"] for b in blocks if b.get("below")]
    for block in blocks:
        if "read_ahead_kb" in block:
            attrs.add("read_ahead_kb")
        attrs.update((block.get("queue") or {}).keys())
    return attrs
