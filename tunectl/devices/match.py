"""Whether a device matches a profile's `match:` keys (SPEC §3): the same keys the udev rules test."""

from __future__ import annotations

from fnmatch import fnmatchcase

from tunectl.devices.model import Device

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any


def _holds(dev: Device, key: str, want: Any) -> bool:
    if key in ("kernel", "model", "vendor", "serial", "wwn"):
        have = dev.name if key == "kernel" else getattr(dev, key)
        return have is not None and fnmatchcase(have, want)
    if key == "bus":
        return dev.bus is not None and any(fnmatchcase(dev.bus, b) for b in want)
    if key == "class":
        return dev.cls in want
    if key == "dm_type":
        return dev.dm_type in want
    if key in ("rotational", "removable"):
        return bool(getattr(dev, key)) == want
    if key == "size":
        return want.get("min", 0) <= dev.size_bytes <= want.get("max", float("inf"))
    return False


def matches(dev: Device, match: dict) -> bool:
    """All given match keys must hold (SPEC §3)."""
    return all(_holds(dev, key, want) for key, want in match.items())
