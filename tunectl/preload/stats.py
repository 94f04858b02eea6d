"""Numbers a person can act on (pure arithmetic): the floor, how close a replay came, and the hit rate.

The floor of a replay is its bytes over the disk's measured sequential rate:
no ordering can bring the data in faster. The hit rate compares a list with
what a boot really read (a `preload record` of that boot, or a list collected
after it): the share of the list's bytes the boot used, and the bytes the boot
read that the list missed (MeeGo's two numbers). A list whose used share falls
below RECOLLECT_USED, or that misses more than RECOLLECT_MISSED of what boot
read, is worth collecting again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tunectl.preload import order
from tunectl.preload.listing import Entry

RECOLLECT_USED = 0.70  # collect again when less than this share of the list's bytes was read by the boot
RECOLLECT_MISSED = 0.20  # ... or when more than this share of what the boot read was not on the list


def floor_seconds(nbytes: int, sequential_rate: float | None) -> float | None:
    """The least time `nbytes` can take at `sequential_rate` bytes/s (None when the rate is unknown or 0)."""
    if not sequential_rate or sequential_rate <= 0:
        return None
    return nbytes / sequential_rate


def times_floor(seconds: float, floor: float | None) -> float | None:
    """How many floors a run took: 1.0 is as fast as the disk reads sequentially."""
    if floor is None or floor <= 0:
        return None
    return seconds / floor


class Floor:
    """The disk's measured sequential rate (bytes/s) and the least time the bytes can take at it."""

    def __init__(self, rate: float | None, nbytes: int) -> None:
        self.rate, self.seconds = rate, floor_seconds(nbytes, rate)

    def to_json(self) -> dict:
        return {"sequential_mb_s": round(self.rate / 1e6, 1) if self.rate else None,
                "seconds": round(self.seconds, 4) if self.seconds is not None else None}


def requests(entries: Iterable[Entry], windows: Mapping[str, int]) -> int:
    """The WILLNEED calls a replay issues for these entries: one per read-ahead window of each range."""
    total = 0
    for e in entries:
        window = windows[e.device]
        for start, length in order.merge_ranges(e.ranges):
            end = min(start + length, e.size)
            if end > start:
                total += (end - start + window - 1) // window
    return total


def _pages(entries: Iterable[Entry]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(device, inode) -> merged ranges, whole pages: the same file listed twice counts once."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    page = order.PAGE
    for e in entries:
        pages = out.setdefault((e.device, e.inode), [])
        for start, length in e.ranges:
            end = min(start + length, e.size)
            if end > start:
                lo, hi = start // page * page, (end + page - 1) // page * page
                pages.append((lo, hi - lo))
    return {k: order.merge_ranges(v) for k, v in out.items()}


class HitRate:
    """A list against what a boot read: bytes of each, shared, used share and missed share."""

    def __init__(self, listed: int, read: int, shared: int) -> None:
        self.listed, self.read, self.shared = listed, read, shared

    @property
    def used(self) -> float:
        """The share of the list's bytes the boot read (1.0: nothing preloaded in vain)."""
        return self.shared / self.listed if self.listed else 1.0

    @property
    def missed(self) -> float:
        """The share of the boot's bytes the list did not hold (0.0: the list had everything)."""
        return (self.read - self.shared) / self.read if self.read else 0.0

    @property
    def recollect(self) -> bool:
        return self.used < RECOLLECT_USED or self.missed > RECOLLECT_MISSED

    def to_json(self) -> dict:
        return {"listed_bytes": self.listed, "read_bytes": self.read, "shared_bytes": self.shared,
                "used": round(self.used, 4), "missed": round(self.missed, 4), "recollect": self.recollect,
                "thresholds": {"used_below": RECOLLECT_USED, "missed_above": RECOLLECT_MISSED}}


def hit_rate(listed: Iterable[Entry], read: Iterable[Entry]) -> HitRate:
    """The list `listed` against `read`, what a boot read; files match by device and inode, bytes by page."""
    a, b = _pages(listed), _pages(read)
    shared = sum(order.overlap_bytes(ranges, b[key]) for key, ranges in a.items() if key in b)
    return HitRate(sum(n for r in a.values() for _, n in r), sum(n for r in b.values() for _, n in r), shared)
