"""Runs -> per-point figures (median, spread, summed block stats) -> the recommendation.

The rule (issue 14): the smallest read-ahead whose median throughput is within
5% of the best median of the whole sweep, with the scheduler that did best at
that read-ahead. Deeper read-ahead than that costs memory and latency for
random readers and buys nothing measurable.
"""

from __future__ import annotations

import statistics

from tunectl.bench.diskstat import StatDelta
from tunectl.bench.sweep import Point
from tunectl.record import field, record

WITHIN = 0.05  # "as good as the best": within 5% of its median throughput
NOISY_PCT = 25.0  # runs that disagree by more than this make a 5% rule a coin toss


@record(frozen=True)
class RandomRead:
    """fio's 4 KiB random reads at one point."""

    iops: float
    mb_s: float
    mean_latency_us: float

    def to_json(self) -> dict:
        return {"iops": round(self.iops, 1), "mb_s": round(self.mb_s, 2), "mean_latency_us": round(self.mean_latency_us, 1)}


@record(frozen=True)
class Run:
    """One cold sequential read at one point, and what each device of the stack did meanwhile."""

    point: Point
    order: int  # position in the shuffled sweep, from 1
    bytes_read: int
    seconds: float
    stats: tuple[StatDelta, ...]
    random: RandomRead | None = None

    @property
    def mb_s(self) -> float:
        return self.bytes_read / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {"scheduler": self.point.scheduler, "read_ahead_kb": self.point.read_ahead_kb, "run": self.point.run,
                "order": self.order, "bytes": self.bytes_read, "seconds": round(self.seconds, 6),
                "mb_s": round(self.mb_s, 2), "devices": [s.to_json() for s in self.stats],
                "random": self.random.to_json() if self.random else None}


@record(frozen=True)
class Summary:
    """One (scheduler, read-ahead) over its runs. `stats` are summed over the runs; per-run figures divide by runs."""

    scheduler: str | None
    read_ahead_kb: int
    runs: int
    mb_s: float  # median
    mb_s_min: float
    mb_s_max: float
    stats: tuple[StatDelta, ...]
    random_iops: float | None = None  # median

    @property
    def spread_pct(self) -> float:
        """(max - min) / median, in percent: how far the runs disagree."""
        return (self.mb_s_max - self.mb_s_min) / self.mb_s * 100 if self.mb_s else 0.0

    def to_json(self) -> dict:
        return {"scheduler": self.scheduler, "read_ahead_kb": self.read_ahead_kb, "runs": self.runs,
                "mb_s": round(self.mb_s, 2), "mb_s_min": round(self.mb_s_min, 2), "mb_s_max": round(self.mb_s_max, 2),
                "spread_pct": round(self.spread_pct, 1),
                "devices": [dict(s.to_json(), reads_per_run=round(s.reads / self.runs, 1),
                                 time_in_queue_ms_per_run=round(s.time_in_queue_ms / self.runs, 1))
                            for s in self.stats],
                "random_iops": None if self.random_iops is None else round(self.random_iops, 1)}


def summarise(runs: list[Run]) -> list[Summary]:
    """One Summary per (scheduler, read-ahead), sorted by scheduler, then read-ahead."""
    groups: dict[tuple[str | None, int], list[Run]] = {}
    for r in runs:
        groups.setdefault(r.point.key, []).append(r)
    out = []
    for (sched, ra), group in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        speeds = [r.mb_s for r in group]
        totals: dict[str, StatDelta] = {}
        for r in group:
            for s in r.stats:
                totals[s.device] = totals[s.device] + s if s.device in totals else s
        iops = [r.random.iops for r in group if r.random is not None]
        out.append(Summary(sched, ra, len(group), statistics.median(speeds), min(speeds), max(speeds),
                           tuple(totals.values()), statistics.median(iops) if iops else None))
    return out


@record(frozen=True)
class Recommendation:
    read_ahead_kb: int | None  # None: read-ahead did not change the requests, so nothing is recommended for it
    scheduler: str | None
    mb_s: float
    best: Summary
    fragment: str | None  # None: nothing to paste (neither read_ahead_kb nor a scheduler is recommended)
    reason: str
    caution: str = ""

    def to_json(self) -> dict:
        return {"read_ahead_kb": self.read_ahead_kb, "scheduler": self.scheduler, "mb_s": round(self.mb_s, 2),
                "caution": self.caution or None,
                "best": {"scheduler": self.best.scheduler, "read_ahead_kb": self.best.read_ahead_kb,
                         "mb_s": round(self.best.mb_s, 2)},
                "within_pct": WITHIN * 100, "reason": self.reason, "fragment": self.fragment}


@record(frozen=True)
class Placement:
    """Where the recommendation goes in a profile: the target's class, and whether the scheduler goes `below:`."""

    device: str
    cls: str
    stacked: bool  # the scheduler was swept on the disks below the target, not on the target
    lower: tuple[str, ...] = field(default_factory=tuple)


def recommend(summaries: list[Summary], placement: Placement, kept: str = "") -> Recommendation | None:
    """`kept`: a cache no drop between points reached (`tunectl.bench.stack.kept_cache`), said in the caution."""
    if not summaries:
        return None
    best = max(summaries, key=lambda s: (s.mb_s, -s.read_ahead_kb))
    good = [s for s in summaries if s.mb_s >= best.mb_s * (1 - WITHIN)]
    smallest = min(s.read_ahead_kb for s in good)
    pick = max((s for s in good if s.read_ahead_kb == smallest), key=lambda s: s.mb_s)
    swept = {s.scheduler for s in summaries}
    scheduler = pick.scheduler if len(swept) > 1 else None
    reason = (f"{pick.mb_s:.0f} MB/s at read_ahead_kb {pick.read_ahead_kb}"
              + (f" with {pick.scheduler}" if pick.scheduler else "")
              + f": the smallest read-ahead within {WITHIN * 100:.0f}% of the best, {best.mb_s:.0f} MB/s at "
              + f"{best.read_ahead_kb} KiB" + (f" with {best.scheduler}" if best.scheduler else ""))
    inert = read_ahead_inert(summaries)
    read_ahead: int | None = pick.read_ahead_kb
    if no_reads_below(summaries):
        # every byte came from caches the drops between points cannot reach (see tunectl.bench.runner): neither
        # read-ahead nor a scheduler had a request to shape, whatever the timings say
        read_ahead, scheduler = None, None
        reason = ("no read reached the devices at any point: what was read came from caches bench cannot drop; "
                  "no read_ahead_kb or scheduler recommended")
    elif inert is not None:
        device, kib = inert
        read_ahead = None
        reason = (f"read-ahead did not change the requests: {device} got {kib:.0f} KiB requests at every read_ahead_kb "
                  "swept, so the layer above decides their size (a filesystem reading block by block: squashfs's "
                  "block size, set by mksquashfs -b); no read_ahead_kb recommended"
                  + (f"; {pick.scheduler} was best, {pick.mb_s:.0f} MB/s" if scheduler else ""))
    noisy = max(pick.spread_pct, best.spread_pct)
    caution = ""
    if noisy > NOISY_PCT:
        caution = (f"runs disagree by up to {noisy:.0f}% at these points: a device shared with other I/O, "
                   "or a cache below (a VM host, a disk's own cache); rerun with more --runs on a quiet device")
    caution = "; ".join(c for c in (caution, kept) if c)
    fragment = profile_fragment(placement, read_ahead, scheduler, reason) \
        if read_ahead is not None or scheduler else None  # a `classes:` block with nothing in it is no advice
    return Recommendation(read_ahead, scheduler, pick.mb_s, best, fragment, reason, caution)


def no_reads_below(summaries: list[Summary]) -> bool:
    """Every point has per-device figures and none of its devices saw a read."""
    return all(s.stats for s in summaries) and not any(st.reads for s in summaries for st in s.stats)


INERT = 0.10  # request sizes within 10% of each other at every read-ahead: read-ahead changed nothing below


def read_ahead_inert(summaries: list[Summary]) -> tuple[str, float] | None:
    """(device, KiB) when, for every scheduler, each device's average request size stayed the same at every read-ahead.

    Then read-ahead is not what shapes the I/O (squashfs reads one compressed block at a time whatever the
    window): the last device of the stack that saw reads is named.
    """
    by_sched: dict[str | None, list[Summary]] = {}
    for s in summaries:
        by_sched.setdefault(s.scheduler, []).append(s)
    found: tuple[str, float] | None = None
    for points in by_sched.values():
        if len({p.read_ahead_kb for p in points}) < 2:
            return None
        sizes: dict[str, list[float]] = {}
        for p in points:
            for st in p.stats:
                if st.reads:
                    sizes.setdefault(st.device, []).append(st.avg_request_kib)
        if not sizes:
            return None
        for device, kib in sizes.items():
            if len(kib) < 2 or max(kib) > min(kib) * (1 + INERT):
                return None
            found = (device, sum(kib) / len(kib))
    return found


def profile_fragment(placement: Placement, read_ahead_kb: int | None, scheduler: str | None, reason: str) -> str:
    """A `classes:` block to paste into a profile (tunectl-profile(5)); `below:` when the target is stacked."""
    lines = [f"# tunectl bench {placement.device}: {reason}", "classes:", f"  {placement.cls}:"]
    if scheduler and not placement.stacked:
        lines.append(f"    scheduler: {scheduler}")
    if read_ahead_kb is not None:
        lines.append(f"    read_ahead_kb: {read_ahead_kb}")
    if scheduler and placement.stacked:
        lines.append(f"    below: {{scheduler: {scheduler}}}   # on {', '.join(placement.lower) or 'the disks below'}")
    return "\n".join(lines) + "\n"
