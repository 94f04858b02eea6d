"""A finding's expected effect: a speedup of the cold read, estimated from the facts or measured by `--try`. Pure.

The estimates use one model: a read through a block stack waits on requests, and
while requests are small each one costs about the same whatever its size (the
per-request cost: a command, a completion, a hop through every layer, a seek or
a flash page fetch), so the time the read waits on a device scales with the
number of requests it sends there. The cold read shows the share of the read's
time the device's requests took (its summed read time over the read's time,
at most all of it), and how many requests it got; a change that makes the same
bytes arrive in `k` times fewer requests then leaves

    (1 - share) + share / k

of the time: a speedup of 1 / that (Amdahl's law on the request count). With no
cold read the share is unknown and taken as all of the time: the figure is then
an upper bound, and says so. A change that removes a layer's own work can at
most give back that layer's own share of the time (its read time less the read
time of the device below it); /proc/diskstats rather than the trace measures it,
since a traced dm bio completes when the device below completes, before
dm-verity hashes the block. A change that leaves the requests as they are has
no effect in this model (1.0x), and the finding says what the model leaves out.
The model holds where a small request's cost is mostly per request (flash cards,
eMMC, disks, a loop device's hop to its backing file); where a request costs
little beyond copying its bytes (a loop device over a file in RAM: 15 us per
2.5 KiB request) it overstates what fewer, larger requests buy, which the
request await in the cold read shows and --try's measurement corrects.

A measured effect is the speedup of the `--try` variant that differs from the
copy as it is in the finding's change alone ("4K -> 128K blocks alone").
"""

from __future__ import annotations

from collections.abc import Sequence

from tunectl.bench.diskstat import StatDelta
from tunectl.explain.model import Case, Trial
from tunectl.record import record
from tunectl.units import counted

ESTIMATED, MEASURED = "estimated", "measured"


@record(frozen=True)
class Effect:
    """The expected speedup of the cold read the finding's change brings (1.0: none expected)."""

    value: float  # x, rounded to 2 decimals
    basis: str  # ESTIMATED or MEASURED
    why: str  # the arithmetic in words, with the facts it used
    estimate: float | None = None  # the estimate a measurement replaced

    def to_json(self) -> dict:
        return {"value": self.value, "basis": self.basis,
                "estimate": self.value if self.estimate is None else self.estimate}


def speedup(share: float, k: float) -> float:
    """1 / ((1 - share) + share / k): the read's time when the part `share` of it shrinks `k` times."""
    share, k = min(max(share, 0.0), 1.0), max(k, 1.0)
    return 1.0 / ((1.0 - share) + share / k)


def _x(value: float) -> str:
    return f"{value:.1f}x"


def _kib(n: float) -> str:
    return f"{n:.0f} KiB" if n >= 10 else f"{n:.1f} KiB"


def none(why: str) -> Effect:
    """No effect this model can see: the change leaves the requests as they are."""
    return Effect(1.0, ESTIMATED, f"estimated 1.0x: {why}")


def share_of(case: Case, io: StatDelta) -> tuple[float, str]:
    """(the share of the cold read's time `io`'s requests took, in words)."""
    ms = case.cold.seconds * 1000 if case.cold else 0.0
    share = min(io.read_ms / ms, 1.0) if ms > 0 else 1.0
    if share >= 1 and ms > 0 and io.read_ms > ms:  # summed waits of requests in flight together
        return share, (f"{io.device}'s requests were waited on all through the read ({io.read_ms} ms of waits "
                       f"in {ms:.0f} ms, overlapping: all of it assumed)")
    return share, f"{io.device}'s requests took {share * 100:.0f}% of the read ({io.read_ms} of {ms:.0f} ms)"


def fewer_requests(case: Case, io: StatDelta | None, size_after: int, carried: int | None, bound_k: float,
                   what: str) -> Effect:
    """The speedup of `io`'s requests carrying `carried` bytes (default: the bytes they carried) in requests of
    `size_after` bytes, at most `bound_k` times fewer; `what`: the change, in words. Without a cold read of the
    device: the bound, with all of the read's time assumed to be the device's."""
    if io is None or not io.reads:
        k = max(bound_k, 1.0)
        return Effect(round(k, 2), ESTIMATED,
                      f"estimated at most {_x(k)}: {what}: {k:.0f}x fewer requests; no cold read measured the "
                      "share of the time they take (all of it assumed)")
    after = max(1.0, (io.sectors_read * 512 if carried is None else carried) / size_after)
    k = max(1.0, min(io.reads / after, bound_k))
    share, took = share_of(case, io)
    value = speedup(share, k)
    bound = "at most " if share >= 1 else ""  # all of the read assumed: the request-count bound
    return Effect(round(value, 2), ESTIMATED,
                  f"estimated {bound}{_x(value)}: {what}: {took}; "
                  f"its {counted(io.reads, 'request')} of {_kib(io.avg_request_kib)} "
                  f"as {io.reads / k:.0f} ({k:.1f}x fewer) leave {(1 - share) * 100:.0f}% + "
                  f"{share * 100:.0f}%/{k:.1f} of the time")


def layer_share(case: Case, io: StatDelta | None, below: StatDelta | None, what: str) -> Effect:
    """At most the speedup of removing `io`'s own time (its read time less the device below's): `what` removes
    part of that layer's work. The read times are summed waits, which pass the read's time when requests were in
    flight together: the layer's own part of its wait, times its share of the read (share_of)."""
    if io is None or not io.reads or case.cold is None:
        return none(f"{what}; no cold read measured the layer's own share of the time")
    own = max(io.read_ms - (below.read_ms if below else 0), 0)
    ms = case.cold.seconds * 1000
    share = own / io.read_ms * share_of(case, io)[0] if ms > 0 and io.read_ms > 0 else 0.0
    value = speedup(share, float("inf")) if share < 1 else 1.0
    return Effect(round(value, 2), ESTIMATED,
                  f"estimated at most {_x(value)}: {what}: {io.device}'s own time is {share * 100:.0f}% of the read "
                  f"({io.read_ms} ms less {below.device if below else 'nothing below'}'s "
                  f"{below.read_ms if below else 0} ms, of {ms:.0f} ms)")


def measured(estimate: Effect, pair: tuple[Trial, Trial] | None, alone: str) -> Effect | None:
    """The measured speedup of `pair`'s second variant over its first (two --try variants that differ in the
    finding's change alone, or None: not measured); `alone`: that change in words."""
    if pair is None or pair[0].mb_s <= 0:
        return None
    base, other = pair
    value = other.mb_s / base.mb_s
    return Effect(round(value, 2), MEASURED,
                  f"measured {_x(value)}: {alone}: {other.mb_s:.1f} MB/s ({other.label}) against "
                  f"{base.mb_s:.1f} MB/s ({base.label}{', as it is' if base.as_is else ''}), on scratch copies (--try)",
                  estimate.value)


def as_is(trials: Sequence[Trial]) -> Trial | None:
    """The scratch copy built like the user's image (--try's base)."""
    return next((t for t in trials if t.as_is), None)


def tried(trials: Sequence[Trial], block_size: int, compressor: str, direct_io: bool) -> Trial | None:
    """The variant --try measured with these settings (the copy as it is when they are the image's), or None."""
    found = [t for t in trials if (t.block_size, t.compressor, t.direct_io) == (block_size, compressor, direct_io)]
    return next((t for t in found if t.as_is), found[0] if found else None)
