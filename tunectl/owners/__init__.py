"""Who set each value, and who else writes it (issue #31).

`model` (who set a value) and `writers` (the other writers: `owner_of`, `conflicts`) are pure; `sources`
parses the other writers' files (pure); `collect` is the OS edge that reads them. `find_owners` joins them
for the commands that report values (status, verify, explain).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tunectl.context import Context
from tunectl.devices.model import Device
from tunectl.owners.model import DeviceOwners, KernelDefault, Owner, TunectlMark, journalled_owner
from tunectl.status import Status

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from tunectl.owners.collect import Machine
    from tunectl.owners.writers import Writer


def shown_attributes(dev: Device) -> list[str]:
    """The values `status` shows for a device: scheduler, its knobs, read-ahead and the queue attributes read."""
    attrs = ["scheduler"] if dev.has_scheduler else []
    return attrs + [f"iosched/{k}" for k in sorted(dev.iosched)] + sorted(dev.queue)


def current_value(dev: Device, attribute: str) -> object:
    if attribute == "scheduler":
        return dev.scheduler
    if attribute.startswith("iosched/"):
        return dev.iosched.get(attribute.split("/", 1)[1])
    return dev.queue.get(attribute)


def find_owners(ctx: Context, devices: Sequence[Device], settings: Iterable = (),
                attributes: dict[str, list[str]] | None = None, rules_path: str | None = None,
                machine: Machine | None = None) -> dict[str, DeviceOwners]:
    """Per device name: the owner of each value shown (`attributes`, default `shown_attributes`) and of each
    attribute a planned `Setting` names. `rules_path`: tunectl's installed rules file, if any.

    A value the journal says tunectl set, and that is not drift, is tunectl's whatever else writes it: the other
    writers' files (`machine`), a device's facts and its kernel defaults are read only for the other values, at
    the first that needs them (a verify after an apply needs none)."""
    by_device: dict[str, dict[str, object]] = {}
    for s in settings:
        by_device.setdefault(s.device, {})[s.attribute] = s
    out = {}
    marked: dict[str, dict[str, TunectlMark]] | None = None  # the journal, read once, for the first device shown
    for dev in devices:
        wanted = by_device.get(dev.name, {})
        shown = (attributes or {}).get(dev.name, shown_attributes(dev))
        attrs = list(dict.fromkeys(shown + list(wanted)))
        if not attrs:
            continue
        marked = journal_marks(ctx) if marked is None else marked
        marks = marked.get(dev.identity, {})
        found: tuple[list[Writer], dict[str, KernelDefault]] | None = None  # this device's, read at first need
        owners = DeviceOwners(dev.name)
        for attr in attrs:
            setting = wanted.get(attr)
            if getattr(setting, "status", None) == Status.SKIP:  # the profile's value does not apply here
                if attr not in shown:
                    continue
                setting = None
            in_sync = None if setting is None else setting.status == Status.IN_SYNC
            owner = journalled_owner(marks.get(attr), in_sync)
            if owner is None:
                # loaded here: the other writers, their parsers and the OS edge, for a value tunectl did not set
                from tunectl.owners import collect
                from tunectl.owners.writers import owner_of

                machine = machine if machine is not None else collect.read_machine(ctx, rules_path)
                if found is None:
                    facts = collect.device_facts(ctx, dev) if machine.assignments else {}  # no writer to match
                    found = collect.writers_of(machine, dev, facts), collect.kernel_defaults(ctx, dev)
                writers, defaults = found
                owner = owner_of(attr, current_value(dev, attr), [w for w in writers if w.attribute == attr],
                                 marks.get(attr), in_sync, rules_path is not None and machine.rules_file
                                 is not None and setting is not None, defaults.get(attr))
            owners.owners[attr] = owner
        out[dev.name] = owners
    return out


def journal_marks(ctx: Context) -> dict[str, dict[str, TunectlMark]]:
    """identity -> attribute -> what the journal says tunectl did to it on that device (the journal read once)."""
    from tunectl.tuning import journal

    kept = journal.load(ctx.state) if ctx.state.exists() else journal.Journal()
    return {identity: {attr: TunectlMark(by.profile, by.at, by.via) for attr, by in entry.changed_by.items()}
            for identity, entry in kept.devices.items()}


__all__ = ["DeviceOwners", "Owner", "find_owners", "journal_marks"]
