"""btt's per-device figures from tracefs text, without blktrace: Q2C, D2C, Q2Q, queued vs dispatched.

Reads the lines `trace` (or `trace_pipe`) prints for four block events
(include/trace/events/block.h); their formats changed over time and both are read:

  block_bio_queue:    8,0 R 2048 + 8 [dd]
  block_bio_remap:    7,0 R 4096 + 8 <- (253,0) 2048
  block_rq_issue:     8,0 R 4096 () 2048 + 8 [kworker/0:1H]          (6.1)
  block_rq_issue:     8,0 R 4096 () 2048 + 8 none,0,0 [kworker/0:1H]  (6.10+: ioprio)
  block_rq_complete:  8,0 R () 2048 + 8 [0]                          (6.1)
  block_rq_complete:  8,0 R () 2048 + 8 none,0,0 [0]                 (6.10+)

Q is a bio queued on a device; D a request issued to its driver; C a request
completed. A bio-based device (dm) issues and completes no requests: its bios
are remapped to the device below (block_bio_remap), and a bio completes when
the last piece remapped from it completes, so its Q2C spans the layers below.
A loop device's backing-file I/O is new I/O of the filesystem below (no remap):
the loop's D2C is the time the backing read took. Only reads are counted.
Pure: the caller reads tracefs.
"""

from __future__ import annotations

import re
import statistics

from tunectl.record import field, record

_LINE = re.compile(r"(?P<ts>\d+\.\d+): (?P<event>block_bio_queue|block_bio_remap|block_rq_issue|block_rq_complete): "
                   r"(?P<rest>.*)$")
_IO = re.compile(r"^(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S+) (?:(?P<bytes>\d+) )?(?:\([^)]*\) )?"
                 r"(?P<sector>\d+) \+ (?P<nr>\d+)(?: <- \((?P<omaj>\d+),(?P<omin>\d+)\) (?P<osector>\d+))?")

EVENTS = ("block_bio_queue", "block_bio_remap", "block_rq_issue", "block_rq_complete")


@record(frozen=True)
class Event:
    time: float  # seconds
    kind: str  # "Q", "A" (remap), "D", "C"
    dev: str  # maj:min
    sector: int
    sectors: int
    origin: tuple[str, int] | None = None  # a remap's (maj:min, sector) above


_KINDS = {"block_bio_queue": "Q", "block_bio_remap": "A", "block_rq_issue": "D", "block_rq_complete": "C"}


def parse_events(text: str) -> list[Event]:
    """The read events of trace text, in order; other lines (headers, writes, flushes, lost-event marks) are skipped."""
    out = []
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        io = _IO.match(m["rest"])
        if io is None or "R" not in io["rwbs"] or int(io["nr"]) == 0:
            continue
        origin = (f"{io['omaj']}:{io['omin']}", int(io["osector"])) if io["omaj"] else None
        out.append(Event(float(m["ts"]), _KINDS[m["event"]], f"{io['maj']}:{io['min']}", int(io["sector"]),
                         int(io["nr"]), origin))
    return out


@record
class _Bio:
    dev: str
    sector: int
    sectors: int
    queued: float
    parent: int | None = None
    pending: int = 0  # pieces remapped below and not yet complete
    children: int = 0
    done: float | None = None


@record
class Timing:
    """What btt's per-device lines say, for one device."""

    dev: str
    queued: int = 0  # bios queued (Q)
    issued: int = 0  # requests dispatched to the driver (D)
    completed: int = 0  # requests completed (C)
    issued_sectors: int = 0
    q2c: list[float] = field(default_factory=list)  # seconds, per bio
    d2c: list[float] = field(default_factory=list)  # seconds, per request
    q2q: list[float] = field(default_factory=list)  # seconds between consecutive bios

    @staticmethod
    def _ms(values: list[float], how=statistics.fmean) -> float | None:
        return round(how(values) * 1000, 3) if values else None

    @property
    def avg_request_kib(self) -> float:
        return self.issued_sectors / 2 / self.issued if self.issued else 0.0

    def to_json(self) -> dict:
        return {"device": self.dev, "queued": self.queued, "issued": self.issued, "completed": self.completed,
                "avg_request_kib": round(self.avg_request_kib, 1),
                "q2c_ms": self._ms(self.q2c), "q2c_median_ms": self._ms(self.q2c, statistics.median),
                "d2c_ms": self._ms(self.d2c), "d2c_median_ms": self._ms(self.d2c, statistics.median),
                "q2q_ms": self._ms(self.q2q)}


def _same_bio_above(bios: list[_Bio], open_bios: dict[str, list[int]], ev: Event) -> int | None:
    """The open bio of another device with this bio's sector and size and no piece below yet: dm-verity
    (and any target that submits the bio itself, DM_MAPIO_SUBMITTED) sends it down without a remap event."""
    best = None
    for dev, ids in open_bios.items():
        if dev == ev.dev:
            continue
        for j in ids:
            up = bios[j]
            if (up.sector == ev.sector and up.sectors == ev.sectors and not up.children and up.queued <= ev.time
                    and (best is None or up.queued > bios[best].queued)):
                best = j
    return best


def timings(events: list[Event]) -> dict[str, Timing]:
    """Per device (maj:min, in order of first appearance), the figures btt reports."""
    per: dict[str, Timing] = {}
    bios: list[_Bio] = []
    open_bios: dict[str, list[int]] = {}
    remapped: dict[tuple[str, int], int] = {}  # (dev, sector) about to be queued -> the bio it came from
    issued: dict[tuple[str, int, int], list[float]] = {}
    last_q: dict[str, float] = {}

    def finish(i: int, t: float) -> None:
        while True:
            bio = bios[i]
            bio.done = t
            per[bio.dev].q2c.append(t - bio.queued)
            if bio.parent is None:
                return
            up = bios[bio.parent]
            up.pending -= 1
            if up.pending > 0:
                return
            open_bios[up.dev].remove(bio.parent)
            i = bio.parent

    for ev in events:
        timing = per.setdefault(ev.dev, Timing(ev.dev))
        if ev.kind == "A" and ev.origin is not None:
            odev, osector = ev.origin
            for j in reversed(open_bios.get(odev, [])):
                up = bios[j]
                if up.sector <= osector < up.sector + up.sectors:
                    remapped[(ev.dev, ev.sector)] = j
                    break
        elif ev.kind == "Q":
            timing.queued += 1
            if ev.dev in last_q:
                timing.q2q.append(ev.time - last_q[ev.dev])
            last_q[ev.dev] = ev.time
            parent = remapped.pop((ev.dev, ev.sector), None)
            if parent is None:
                parent = _same_bio_above(bios, open_bios, ev)
            bios.append(_Bio(ev.dev, ev.sector, ev.sectors, ev.time, parent))
            if parent is not None:
                bios[parent].pending += 1
                bios[parent].children += 1
            open_bios.setdefault(ev.dev, []).append(len(bios) - 1)
        elif ev.kind == "D":
            timing.issued += 1
            timing.issued_sectors += ev.sectors
            issued.setdefault((ev.dev, ev.sector, ev.sectors), []).append(ev.time)
        elif ev.kind == "C":
            timing.completed += 1
            started = issued.get((ev.dev, ev.sector, ev.sectors))
            if started:
                timing.d2c.append(ev.time - started.pop(0))
            end = ev.sector + ev.sectors
            covered = [j for j in open_bios.get(ev.dev, []) if ev.sector <= bios[j].sector < end and not bios[j].pending]
            for j in covered:
                open_bios[ev.dev].remove(j)
                finish(j, ev.time)
    return per
