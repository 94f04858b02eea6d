"""Sizes with units, as profiles write them: ``4096``, ``"4 MiB"``, ``"100 GiB"``."""

from __future__ import annotations

from tunectl.errors import UsageError

# As dd(1) counts: K, M, G, T and KiB... are powers of 1024; KB, MB, GB, TB are SI, powers of 1000, as disk
# vendors and parted mean them ("300 GB" is 300 * 10^9 bytes).
_FACTORS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
}
SIZE_PATTERN = r"^\s*[0-9]+\s*([KkMmGgTt]i?[Bb]?|[Bb])?\s*$"
_SIZE_RE = r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$"  # compiled at first use (re keeps it): most runs never need it


def parse_bytes(value: int | str, default_unit: str = "") -> int:
    """``"4 MiB"`` -> 4194304; a bare number is in `default_unit`. ValueError if unreadable."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value * _FACTORS[default_unit.lower()]
    import re  # here: a boot-time replay counts and formats sizes but parses none

    m = re.match(_SIZE_RE, str(value))
    if not m or m.group(2).lower() not in _FACTORS:
        raise ValueError(f"not a size: {value!r} (write e.g. 4096 or \"4 MiB\")")
    unit = m.group(2).lower() or default_unit.lower()
    return int(m.group(1)) * _FACTORS[unit]


def parse_kib(value: int | str) -> int:
    """A size in KiB: a bare number is KiB already; ``"4 MiB"`` -> 4096."""
    size = parse_bytes(value, "kib")
    if size % 1024:
        import re

        m = re.match(_SIZE_RE, str(value))
        unit = m.group(2) if m else ""
        if unit.lower() in ("kb", "mb", "gb", "tb"):
            iec = unit[0].upper() + "iB"
            raise ValueError(f"{value!r} is {size} bytes ({unit} is an SI unit: 10^{3 * ' kmgt'.index(unit[0].lower())}"
                             f" bytes, as disk vendors and parted count), not a whole number of KiB; did you mean "
                             f"\"{m.group(1)} {iec}\"?")
        raise ValueError(f"{value!r} is not a whole number of KiB")
    return size // 1024


def counted(n: int, noun: str, plural: str = "") -> str:
    """``1 file``, ``2 files``, ``0 files``: a count and its noun, singular for one (`plural` when it is not
    the noun and an s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def format_bytes(n: int) -> str:
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


# One read(2) moves at most 2 GiB - 4 KiB on Linux (MAX_RW_COUNT) and its buffer is allocated whole: a read size
# past this costs memory (a typo'd "1 TiB" was a MemoryError), never a larger read.
MAX_READ_SIZE = 1 << 30


def size_option(text: str, option: str, most: int | None = None) -> int:
    """A command-line size (``--size 64M``): more than 0 bytes and at most `most`, else a UsageError naming the
    option."""
    try:
        value = parse_bytes(text)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None
    if value <= 0:
        raise UsageError(f"{option}: must be more than 0 bytes")
    if most is not None and value > most:
        raise UsageError(f"{option}: {text.strip()} is more than {format_bytes(most)}",
                         hint=f"give a size up to {format_bytes(most)}")
    return value
