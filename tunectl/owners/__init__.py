"""Who set each value, and who else writes it (issue #31).

`model` is pure (`owner_of`, `conflicts`); `sources` parses the other writers' files
(pure); `collect` is the OS edge that reads them. `find_owners` joins the three for
the commands that report values (status, verify, explain).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tunectl.context import Context
from tunectl.devices.model import Device
from tunectl.owners.collect import Machine, device_facts, journal_marks, kernel_defaults, read_machine, writers_of
from tunectl.owners.model import DeviceOwners, Owner, TunectlMark, Writer, owner_of
from tunectl.status import Status


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
    attribute a planned `Setting` names. `rules_path`: tunectl's installed rules file, if any."""
    machine = machine if machine is not None else read_machine(ctx, rules_path)
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
        writers = writers_of(machine, dev, device_facts(ctx, dev))
        marked = journal_marks(ctx) if marked is None else marked
        marks = marked.get(dev.identity, {})
        defaults = kernel_defaults(ctx, dev)
        owners = DeviceOwners(dev.name)
        for attr in attrs:
            setting = wanted.get(attr)
            if getattr(setting, "status", None) == Status.SKIP:  # the profile's value does not apply here
                if attr not in shown:
                    continue
                setting = None
            in_sync = None if setting is None else setting.status == Status.IN_SYNC
            owners.owners[attr] = owner_of(attr, current_value(dev, attr), [w for w in writers if w.attribute == attr],
                                           marks.get(attr), in_sync, rules_path is not None and machine.rules_file
                                           is not None and setting is not None, defaults.get(attr))
        out[dev.name] = owners
    return out


__all__ = ["DeviceOwners", "Machine", "Owner", "Writer", "find_owners", "owner_of", "read_machine"]
