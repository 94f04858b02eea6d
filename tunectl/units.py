"""Sizes with units, as profiles write them: ``4096``, ``"4 MiB"``, ``"100 GiB"``."""

from __future__ import annotations

import re

_FACTORS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}
SIZE_PATTERN = r"^\s*[0-9]+\s*([KkMmGgTt]i?[Bb]?|[Bb])?\s*$"
_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$")


def parse_bytes(value: int | str, default_unit: str = "") -> int:
    """``"4 MiB"`` -> 4194304; a bare number is in `default_unit`. ValueError if unreadable."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value * _FACTORS[default_unit.lower()]
    m = _SIZE_RE.match(str(value))
    if not m or m.group(2).lower() not in _FACTORS:
        raise ValueError(f"not a size: {value!r} (write e.g. 4096 or \"4 MiB\")")
    unit = m.group(2).lower() or default_unit.lower()
    return int(m.group(1)) * _FACTORS[unit]


def parse_kib(value: int | str) -> int:
    """A size in KiB: a bare number is KiB already; ``"4 MiB"`` -> 4096."""
    size = parse_bytes(value, "kib")
    if size % 1024:
        raise ValueError(f"{value!r} is not a whole number of KiB")
    return size // 1024


def format_bytes(n: int) -> str:
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def size_option(text: str, option: str) -> int:
    """A command-line size (``--size 64M``): more than 0 bytes, else a UsageError naming the option."""
    from tunectl.errors import UsageError

    try:
        value = parse_bytes(text)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None
    if value <= 0:
        raise UsageError(f"{option}: must be more than 0 bytes")
    return value
