"""`tunectl doctor`: every other writer of an attribute the profile sets, and whether it undoes tunectl."""

from __future__ import annotations

from tunectl.context import Context
from tunectl.errors import ExitCode
from tunectl.owners.collect import device_facts, read_machine, writers_of
from tunectl.owners.writers import Conflict, conflicts
from tunectl.profile.resolve import Profile
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.status import Status
from tunectl.system.rulesfile import unread_by_udev

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

    from tunectl.tuning.operations import PlanReport


@record
class DoctorReport(Report):
    profile: str
    rules_file: str | None  # tunectl's installed rules, as udev reads them
    tuned_profile: str | None
    found: list[Conflict] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (device, why the profile sets nothing on it)
    unread_rules: tuple[str, str] | None = None  # (path, why): installed where udev never reads them (--rules-dir)

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

    def print_text(self, out) -> None:
        """What was read, then a row per other writer and its verdict, how to resolve each that undoes tunectl."""
        from tunectl.attributes import is_range, range_text
        from tunectl.report import show

        for why in self.unread:
            out.warn(f"tunectl: warning: not read: {why}")
        out.print(f"profile: {self.profile}")
        if self.rules_file:
            out.say(f"tunectl's udev rules: {self.rules_file}")
        elif self.unread_rules:
            out.say(f"tunectl's udev rules: {self.unread_rules[0]}, not read: {self.unread_rules[1]}; "
                    "`tunectl udev install` without --rules-dir installs them where udev reads them")
        else:
            out.say("tunectl's udev rules: not installed (nothing re-applies the profile at boot or hot-plug; "
                    "`tunectl udev install` does)")
        if self.tuned_profile:
            out.say(f"tuned: active profile {self.tuned_profile}")
        if not self.devices:
            for device, why in self.skipped:
                out.say(f"skipped {device}: {why}")
            out.say(f"{self.profile} sets nothing on these devices: no writer to check")
            return
        if not self.found:
            out.say(f"no other writer of what {self.profile} sets on {', '.join(self.devices)}")
            return
        rows = []
        for c in self.found:
            verdict = "undoes at " + " and ".join(c.undoes_at) if c.undoes else ("agrees" if c.agrees else "loses")
            wanted = range_text(c.wanted) if is_range(c.wanted) else show(c.wanted)
            rows.append([c.device, c.attribute, wanted, c.writer.assignment.where, c.writer.kind,
                         c.writer.assignment.value, verdict])
        out.print(out.table(["DEVICE", "ATTRIBUTE", "WANTED", "WRITER", "KIND", "WRITES", "VERDICT"], rows,
                            middle=("WRITER",), keep=("DEVICE", "VERDICT")))
        for c in self.undone:
            note = c.writer.assignment.note
            out.say(f"{c.device} {c.attribute}: {c.writer.describe()}; {note + '; ' if note else ''}resolve: {c.resolution()}")
        n = len(self.undone)
        out.say(f"{n} writer(s) would undo tunectl" if n else "no other writer undoes tunectl")


def diagnose(ctx: Context, profile: Profile, dev_refs: list[str] | None = None, scoped: bool = False,
             rules_path: str | None = None, plan: PlanReport | None = None) -> DoctorReport:
    """The other writers of what `profile` sets on the devices (of `dev_refs`, or the last apply's scope); of
    those `plan` sets, when the caller planned already (`udev install`: the devices its rules match). What is read
    of a plan holds after its values were written (the devices, what is wanted of them, what is skipped: never the
    values they hold), and the writers are read here, now."""
    from tunectl.tuning import operations

    report = plan if plan is not None else operations.plan(ctx, None, dev_refs, profile=profile, scoped=scoped)
    planned = {s.device for s in report.settings}
    wanted = {(s.device, s.attribute): (s.bounds if s.bounds is not None else s.after)
              for s in report.settings if s.status != Status.SKIP}
    machine = read_machine(ctx, rules_path)
    writers = []
    for dev in report.devices:
        if dev.name in planned:
            writers += writers_of(machine, dev, device_facts(ctx, dev))
    found = conflicts(wanted, writers, machine.rules_file if rules_path else None, machine.rules_order)
    unread = unread_by_udev(rules_path) if rules_path else None
    return DoctorReport(profile.name, machine.rules_file if rules_path else None, machine.tuned_profile, found,
                        machine.unread, sorted(planned), list(report.skipped),
                        (rules_path, unread) if unread else None)
