"""The other writers that reach a device, and what they mean for tunectl's values: pure functions.

`owner_of` names the owner of one device attribute's current value: tunectl
(profile and time, from the journal), tunectl's installed udev rules, another
writer found on the machine (a udev rule, tuned, sysfs.conf, a tmpfiles line),
the kernel's default (with the rule it follows), or nobody tunectl can see.
`conflicts` lists, for the settings a profile makes, every other writer and
whether it undoes tunectl at boot or at hot-plug. `tunectl status -v`, `verify`,
`doctor` and `explain` all call these; `tunectl.owners.collect` gathers the facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tunectl.attributes import nearest_in_range
from tunectl.owners.model import KernelDefault, Owner, TunectlMark, journalled_owner, same_value, written_integer
from tunectl.owners.sources import BOOT, HOTPLUG, Assignment
from tunectl.record import record

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

# At boot the writers run in this order (later wins): udev's coldplug (rules in udev's order, tunectl's
# rules among them), then systemd-tmpfiles-setup and sysfsutils (sysinit, after the coldplug trigger), then
# tuned (a multi-user service). At hot-plug only udev rules run, then tuned (it listens to udev events).
_BOOT_RANK = {"udev-rule": 0, "tunectl-rules": 0, "tmpfiles": 1, "sysfs.conf": 2, "tuned": 3}
_HOTPLUG_RANK = {"udev-rule": 0, "tunectl-rules": 0, "tuned": 3}
@record
class Writer:
    """An assignment that reaches one device; `order`: its file's place in its service's order (udev: by name)."""

    device: str
    assignment: Assignment
    order: int = 0
    certain: bool = True  # False: the rule has conditions tunectl did not evaluate (it may not match)

    @property
    def kind(self) -> str:
        return self.assignment.kind

    @property
    def attribute(self) -> str:
        return self.assignment.attribute

    def runs_at(self, phase: str) -> bool:
        return self.assignment.runs in (phase, f"{BOOT}+{HOTPLUG}") and self.kind in (
            _BOOT_RANK if phase == BOOT else _HOTPLUG_RANK)

    def rank(self, phase: str) -> tuple[int, int, int]:
        table = _BOOT_RANK if phase == BOOT else _HOTPLUG_RANK
        return (table.get(self.kind, -1), self.order, self.assignment.line)

    def describe(self) -> str:
        a = self.assignment
        what = {"udev-rule": "udev rule", "tunectl-rules": "tunectl's udev rules", "tuned": "tuned",
                "sysfs.conf": "sysfs.conf (sysfsutils)", "tmpfiles": "systemd-tmpfiles",
                "cmdline": "kernel command line"}.get(a.kind, a.kind)
        maybe = "" if self.certain else f" (if {a.target.text()})"
        return f"{what} {a.where} writes {a.value}{maybe}"

    def to_json(self) -> dict[str, Any]:
        a = self.assignment
        return {"kind": a.kind, "attribute": a.attribute, "value": a.value, "file": a.path, "line": a.line or None,
                "runs": a.runs, "certain": self.certain, "matches": a.target.text(), "note": a.note or None}


def last_writer(writers: Sequence[Writer], phase: str) -> Writer | None:
    """The writer whose value stays after `phase` (the last one to run), or None."""
    running = [w for w in writers if w.runs_at(phase)]
    return max(running, key=lambda w: w.rank(phase)) if running else None


def owner_of(attribute: str, actual: object, writers: Sequence[Writer], mark: TunectlMark | None = None,
             in_sync: bool | None = None, rules_installed: bool = False,
             default: KernelDefault | None = None) -> Owner:
    """Who set `actual`, the current value of `attribute` on one device.

    `writers`: the other writers that reach this device's `attribute`; `mark`: the journal's entry;
    `in_sync`: whether `actual` is what the profile wants (None: the profile sets nothing here);
    `rules_installed`: tunectl's udev rules are installed and the profile sets this attribute.
    """
    journalled = journalled_owner(mark, in_sync)
    if journalled is not None:
        return journalled
    if rules_installed and in_sync:
        return Owner("tunectl-rules", "tunectl's udev rules (the installed rules file writes this value)")
    agreeing = [w for w in writers if same_value(attribute, w.assignment.value, actual)]
    winner = last_writer(agreeing, BOOT) or last_writer(agreeing, HOTPLUG)
    if winner is not None:
        a = winner.assignment
        detail = winner.describe()
        return Owner(a.kind, detail, a.where, certain=winner.certain)
    if default is not None and same_value(attribute, str(default.value), actual):
        return Owner("kernel-default", f"kernel default: {default.rule}")
    if mark is not None:
        return Owner("unknown", f"changed after tunectl set it ({mark.profile}, {mark.at}) by something tunectl "
                                "cannot see (a manual write or a program)", profile=mark.profile, at=mark.at)
    why = "not the kernel's default; " if default is not None else ""
    return Owner("unknown", f"{why}no other writer found: the driver's value, or a write by hand or a program",
                 certain=False)


@record
class Conflict:
    """Another writer of an attribute the profile sets on a device."""

    device: str
    attribute: str
    wanted: object
    writer: Writer
    agrees: bool  # it writes what the profile wants
    undoes_at: tuple[str, ...]  # the phases where it runs after tunectl with another value ("boot", "hotplug")

    @property
    def undoes(self) -> bool:
        return bool(self.undoes_at)

    def resolution(self) -> str:
        a = self.writer.assignment
        if self.agrees:
            return "harmless: it writes the same value"
        if a.kind == "cmdline":
            return "harmless on this kernel; remove elevator= from the kernel command line to avoid confusion"
        if a.kind == "tuned":
            return "stop tuned (systemctl disable --now tuned) or remove the [disk]/[sysfs] setting from its profile"
        if a.kind in ("udev-rule", "tunectl-rules"):
            return (f"delete or edit line {a.line} of {a.path}; a vendor rule is overridden by a file of the same "
                    f"name in /etc/udev/rules.d (copy it there without the line, or link it to /dev/null)")
        return f"delete line {a.line} of {a.path}"

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "attribute": self.attribute, "wanted": self.wanted,
                "writer": self.writer.to_json(), "agrees": self.agrees, "undoes": self.undoes,
                "undoes_at": list(self.undoes_at), "resolution": self.resolution()}


def conflicts(wanted: Mapping[tuple[str, str], object], writers: Sequence[Writer], rules_file: str | None,
              rules_order: int | None = None) -> list[Conflict]:
    """Every other writer of a (device, attribute) the profile sets (`wanted`: its values), and where it wins.

    `rules_file`: tunectl's installed rules (None: not installed), at `rules_order` in udev's order.
    A writer undoes tunectl in a phase when it runs there after the last tunectl write with another value:
    at boot everything that runs (nothing re-applies tunectl without rules, and tmpfiles, sysfs.conf and
    tuned run after udev's coldplug), at hot-plug a udev rule ordered after tunectl's, and tuned.
    """
    out = []
    for w in writers:
        key = (w.device, w.attribute)
        if key not in wanted or w.kind == "tunectl-rules":
            continue
        value = wanted[key]
        agrees = _agrees(w.attribute, w.assignment.value, value)
        phases: list[str] = []
        if not agrees and w.kind != "cmdline":
            for phase in (BOOT, HOTPLUG):
                if not w.runs_at(phase):
                    continue
                after_rules = w.kind != "udev-rule" or rules_order is None or w.order > rules_order
                if rules_file is None or after_rules:
                    phases.append(phase)
        out.append(Conflict(w.device, w.attribute, value, w, agrees, tuple(phases)))
    return out


def _agrees(attribute: str, written: str, wanted: object) -> bool:
    """Writing `written` gives what the profile wants: its value, or a value inside its range."""
    if isinstance(wanted, dict):
        number = written_integer(written)
        return number is not None and nearest_in_range(wanted, number) == number
    return same_value(attribute, written, wanted)
