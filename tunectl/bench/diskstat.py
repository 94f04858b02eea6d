"""The /sys/block/<dev>/stat layout and the per-point deltas a sweep reports.

Documentation/block/stat.rst: eleven fields since 2.6, four discard fields
since 4.18, two flush fields since 5.5; all counters are unsigned and only grow
(they wrap at 2^32 on 32-bit kernels, which a delta over one point never sees
in practice; a negative delta is reported as zero instead of nonsense).
"""

from __future__ import annotations

from tunectl.errors import TunectlError
from tunectl.record import record

# field index -> name, for the fields bench uses
FIELDS = (
    "reads",  # read I/Os completed (requests, after merging)
    "reads_merged",  # read I/Os merged into an already queued one
    "sectors_read",  # in 512-byte units, whatever the logical block size
    "read_ms",  # total wait of reads, ms
    "writes",
    "writes_merged",
    "sectors_written",
    "write_ms",
    "in_flight",  # a gauge, not a counter
    "io_ticks_ms",  # time the device had I/O in flight
    "time_in_queue_ms",  # weighted: sum of every request's time in queue
)


@record(frozen=True)
class DiskStat:
    reads: int
    reads_merged: int
    sectors_read: int
    read_ms: int
    writes: int
    io_ticks_ms: int
    time_in_queue_ms: int


def parse_stat(text: str) -> DiskStat:
    """One stat line -> DiskStat; ValueError for anything that is not at least eleven integers."""
    parts = text.split()
    if len(parts) < len(FIELDS):
        raise ValueError(f"expected at least {len(FIELDS)} fields in a block stat line, got {len(parts)}: {text!r}")
    v = [int(p) for p in parts[: len(FIELDS)]]
    return DiskStat(reads=v[0], reads_merged=v[1], sectors_read=v[2], read_ms=v[3], writes=v[4],
                    io_ticks_ms=v[9], time_in_queue_ms=v[10])


@record(frozen=True)
class StatDelta:
    """What one device did during one point: the figures iostat shows as r/s, rrqm/s, rareq-sz, r_await."""

    device: str
    reads: int = 0
    reads_merged: int = 0
    sectors_read: int = 0
    read_ms: int = 0
    writes: int = 0
    io_ticks_ms: int = 0
    time_in_queue_ms: int = 0

    @property
    def merged_share(self) -> float:
        """Merged reads over all reads submitted (iostat's %rrqm), 0..1."""
        submitted = self.reads + self.reads_merged
        return self.reads_merged / submitted if submitted else 0.0

    @property
    def avg_request_kib(self) -> float:
        return self.sectors_read / 2 / self.reads if self.reads else 0.0

    @property
    def read_await_ms(self) -> float:
        return self.read_ms / self.reads if self.reads else 0.0

    def __add__(self, other: StatDelta) -> StatDelta:
        return StatDelta(self.device, self.reads + other.reads, self.reads_merged + other.reads_merged,
                         self.sectors_read + other.sectors_read, self.read_ms + other.read_ms,
                         self.writes + other.writes, self.io_ticks_ms + other.io_ticks_ms,
                         self.time_in_queue_ms + other.time_in_queue_ms)

    def to_json(self) -> dict:
        return {"device": self.device, "reads": self.reads, "reads_merged": self.reads_merged,
                "sectors_read": self.sectors_read, "read_ms": self.read_ms, "writes": self.writes,
                "io_ticks_ms": self.io_ticks_ms, "time_in_queue_ms": self.time_in_queue_ms,
                "merged_share": round(self.merged_share, 4), "avg_request_kib": round(self.avg_request_kib, 1),
                "read_await_ms": round(self.read_await_ms, 3)}


def delta(device: str, before: DiskStat, after: DiskStat) -> StatDelta:
    def d(a: int, b: int) -> int:
        return max(b - a, 0)

    return StatDelta(device, d(before.reads, after.reads), d(before.reads_merged, after.reads_merged),
                     d(before.sectors_read, after.sectors_read), d(before.read_ms, after.read_ms),
                     d(before.writes, after.writes), d(before.io_ticks_ms, after.io_ticks_ms),
                     d(before.time_in_queue_ms, after.time_in_queue_ms))


def read_stats(sysfs, names: list[str]) -> dict[str, DiskStat]:
    """/sys/block/NAME/stat of each device, read through `sysfs` (a `tunectl.system.sysfs.Sysfs`)."""
    out = {}
    for name in names:
        text = sysfs.read(f"block/{name}/stat")
        try:
            out[name] = parse_stat(text)
        except ValueError as e:
            raise TunectlError(f"block/{name}/stat: {e}") from None
    return out
