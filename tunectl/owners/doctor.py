"""`tunectl doctor`: every other writer of an attribute the profile sets, and whether it undoes tunectl."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tunectl.context import Context
from tunectl.errors import ExitCode
from tunectl.owners.collect import device_facts, read_machine, writers_of
from tunectl.owners.model import Conflict, conflicts
from tunectl.profile.resolve import Profile
from tunectl.status import Status


@dataclass
class DoctorReport:
    profile: str
    rules_file: str | None  # tunectl's installed rules, as udev reads them
    tuned_profile: str | None
    found: list[Conflict] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (device, why the profile sets nothing on it)

    @property
    def undone(self) -> list[Conflict]:
        return [c for c in self.found if c.undoes]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DRIFT if self.undone else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "rules": self.rules_file, "tuned_profile": self.tuned_profile,
                "devices": self.devices, "undone": bool(self.undone),
                "writers": [c.to_json() for c in self.found], "unread": self.unread}


def diagnose(ctx: Context, profile: Profile, dev_refs: list[str] | None = None, scoped: bool = False,
             rules_path: str | None = None) -> DoctorReport:
    """The other writers of what `profile` sets on the devices (of `dev_refs`, or the last apply's scope)."""
    from tunectl.tuning import operations

    report = operations.plan(ctx, None, dev_refs, profile=profile, scoped=scoped)
    planned = {s.device for s in report.settings}
    wanted = {(s.device, s.attribute): (s.bounds if s.bounds is not None else s.after)
              for s in report.settings if s.status != Status.SKIP}
    machine = read_machine(ctx, rules_path)
    writers = []
    for dev in report.devices:
        if dev.name in planned:
            writers += writers_of(machine, dev, device_facts(ctx, dev))
    found = conflicts(wanted, writers, machine.rules_file if rules_path else None, machine.rules_order)
    return DoctorReport(profile.name, machine.rules_file if rules_path else None, machine.tuned_profile, found,
                        machine.unread, sorted(planned), list(report.skipped))
