"""The points of a sweep: every read-ahead under every scheduler, `runs` times, in a shuffled order.

Shuffling spreads slow drifts (a disk warming up, a neighbour's burst of I/O)
over all points instead of charging them to the last read-ahead values; the
seed is reported so a sweep can be repeated in the same order.
"""

from __future__ import annotations

import random

from tunectl.attributes import LEGACY_SCHEDULERS, QUEUE, SCHEDULERS
from tunectl.errors import UsageError
from tunectl.record import record
from tunectl.units import parse_kib

DEFAULT_READ_AHEAD = "4..8192"  # KiB, doubling: 4, 8, 16, ..., 8192
DEFAULT_RUNS = 3
MAX_RUNS = 1000  # cold reads per point: 1000 x the default 48 points of 32 MiB is days of reading already
DEFAULT_SIZE = 32 << 20  # bytes read per point
DEFAULT_BLOCK = 4 << 10  # bytes per read(2): small, so read-ahead (not the read size) shapes requests


@record(frozen=True)
class Point:
    scheduler: str | None  # None: the stack has no scheduler to choose (bio-based devices only)
    read_ahead_kb: int
    run: int  # 1..runs

    @property
    def key(self) -> tuple[str | None, int]:
        return (self.scheduler, self.read_ahead_kb)

    def describe(self) -> str:
        sched = f"{self.scheduler} " if self.scheduler else ""
        return f"{sched}read-ahead {self.read_ahead_kb} KiB, run {self.run}"


def _kib(item: str, option: str) -> int:
    try:
        value = parse_kib(item.strip())
    except ValueError as e:
        raise UsageError(f"{option}: {e}", hint="write sizes in KiB (128) or with a unit (\"4 MiB\"), "
                                                "a list with commas (16,128,1024) or a doubling range (4..8192)") from None
    spec = QUEUE["read_ahead_kb"]
    if not spec.minimum <= value <= spec.maximum:
        raise UsageError(f"{option}: {item.strip()} is outside {spec.minimum}..{spec.maximum} KiB",
                         hint="the kernel's read_ahead_kb range tunectl accepts")
    return value


def parse_read_ahead(text: str, option: str = "--read-ahead") -> list[int]:
    """``16,128,1 MiB`` or ``4..8192`` (doubling from the first to the last) -> sorted KiB values."""
    values: set[int] = set()
    for item in text.split(","):
        if not item.strip():
            raise UsageError(f"{option}: empty item in {text!r}", hint="e.g. --read-ahead 16,128,1024")
        if ".." in item:
            lo_text, hi_text = item.split("..", 1)
            lo, hi = _kib(lo_text, option), _kib(hi_text, option)
            if lo == 0 or hi < lo:
                raise UsageError(f"{option}: {item.strip()} is not a range from a smaller to a larger size",
                                 hint="e.g. 4..8192 (4, 8, 16, ... 8192 KiB)")
            v = lo
            while v < hi:
                values.add(v)
                v *= 2
            values.add(hi)
        else:
            values.add(_kib(item, option))
    return sorted(values)


def parse_schedulers(text: str) -> list[str]:
    """``mq-deadline,none`` -> names; legacy names map as in profiles (deadline -> mq-deadline)."""
    out: list[str] = []
    for item in text.split(","):
        name = item.strip()
        name = LEGACY_SCHEDULERS.get(name, name)
        if name not in SCHEDULERS:
            raise UsageError(f"--schedulers: unknown scheduler {item.strip()!r}",
                             hint=f"known schedulers: {', '.join(SCHEDULERS)}")
        if name not in out:
            out.append(name)
    return out


def plan_points(read_aheads: list[int], schedulers: list[str | None], runs: int, seed: int) -> list[Point]:
    """Every (scheduler, read-ahead) `runs` times, shuffled with `seed` (same seed, same order)."""
    points = [Point(s, ra, r) for r in range(1, runs + 1) for s in schedulers for ra in read_aheads]
    random.Random(seed).shuffle(points)
    return points
