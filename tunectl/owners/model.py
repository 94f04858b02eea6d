"""Who set a value: the owner records, pure.

`Owner` names who set one device attribute's current value; `journalled_owner` decides it when the
journal says tunectl set it (`TunectlMark`) and it is not drift, which a verify after an apply finds for
every value. The other writers, and `owner_of` that weighs them against the journal and the kernel's
default (`KernelDefault`), are in `tunectl.owners.writers`, loaded only when a value needs them.
"""

from __future__ import annotations

import re

from tunectl.attributes import IOSCHED, LEGACY_SCHEDULERS, QUEUE, Attribute, kernel_equivalent
from tunectl.record import field, record

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

KINDS = ("tunectl", "tunectl-rules", "udev-rule", "tuned", "sysfs.conf", "tmpfiles", "cmdline", "kernel-default",
         "unknown")


@record
class TunectlMark:
    """What the journal says about one attribute: tunectl changed it (profile, time; via its udev rules)."""

    profile: str
    at: str
    via: str = ""  # "udev rules" when the installed rules wrote it


@record
class KernelDefault:
    """The value the kernel would give an attribute by itself, and the rule that says so."""

    value: int | str
    rule: str


@record
class Owner:
    """Who set an attribute's value: tunectl, another writer, or the kernel's default."""

    kind: str  # one of KINDS
    detail: str  # for people: who, and why tunectl thinks so
    where: str | None = None  # file:line of the writer
    profile: str | None = None
    at: str | None = None
    certain: bool = True

    def text(self) -> str:
        return self.detail

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "where": self.where, "profile": self.profile,
                "at": self.at, "certain": self.certain}


def _spec(attribute: str) -> Attribute | None:
    if attribute.startswith("iosched/"):
        name = attribute.split("/", 1)[1]
        return next((knobs[name] for knobs in IOSCHED.values() if name in knobs), None)
    return QUEUE.get(attribute)


def same_value(attribute: str, written: str, actual: object) -> bool:
    """True when writing `written` to `attribute` leaves `actual` (kernel rounding and scheduler aliases allowed)."""
    text = written.strip()
    if attribute == "scheduler":
        return LEGACY_SCHEDULERS.get(text, text) == actual
    spec = _spec(attribute)
    if spec is None or not spec.is_int:
        return text == str(actual)
    value = written_integer(text)
    return value is not None and isinstance(actual, int) and kernel_equivalent(spec, value, actual)


def written_integer(text: str) -> int | None:
    """A written value as the kernel's kstrto* reads it, None when it is none (or longer than any sysfs number)."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[-+]?[0-9]{1,40}", text) else None


def journalled_owner(mark: TunectlMark | None, in_sync: bool | None) -> Owner | None:
    """tunectl (or its udev rules) when the journal says it set the value and the value is not drift; None when
    the owner is to be found among the other writers (`owner_of`). Decides before anything else does."""
    if mark is None or in_sync is False:
        return None
    if mark.via == "udev rules":
        return Owner("tunectl-rules", f"tunectl's udev rules (profile {mark.profile}, journalled {mark.at})",
                     profile=mark.profile, at=mark.at)
    return Owner("tunectl", f"tunectl apply -p {mark.profile} at {mark.at}", profile=mark.profile, at=mark.at)


@record
class DeviceOwners:
    """The owners of the values shown for one device (attribute -> Owner)."""

    device: str
    owners: dict[str, Owner] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {attr: owner.to_json() for attr, owner in sorted(self.owners.items())}
