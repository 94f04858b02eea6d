"""Timing of a 7200 rpm SATA disk and an SD card (class A1): the pure core of the VM tier's model disks.

No I/O, no clock: a model is given each request's arrival time (seconds, any monotonic
origin) and answers when the request completes. tests/vm/nbdmodel.py (an nbdkit plugin on
the host, outside the guest's emulated CPU) serves the data and sleeps until that time.
Requests are served one at a time, in arrival order (one actuator, no NCQ reordering).

The parameters, one table each (``MODELS``):

HDD ``hdd-7200`` (a 7200 rpm SATA disk; datasheet-typical values):

===================  ===========  ==========================================================
rpm                  7200         one revolution 8.33 ms; the platter's angle is tracked
                                  (angle = time / revolution), so the rotational wait is
                                  where the wanted sector is now, not a constant half
seek_track_ms        1.0          seek over one cylinder
seek_average_ms      8.5          seek over a third of the stroke (the datasheet convention;
                                  the mean over uniform random pairs is then ~8.0 ms)
seek_full_ms         16.0         full-stroke seek
                                  seek(n cylinders) = track + (full - track) * f**p, f the
                                  fraction of the stroke, p fitted to the average (0.63)
outer_mb_s           200          media rate at LBA 0 (outer zone), MB/s (10**6 B/s)
inner_mb_s           100          media rate at the last LBA (inner zone); in between the
                                  rate falls linearly with the cylinder
command_us           80           per-command overhead (the drive's firmware and SATA
                                  protocol), paid by every request
interface_mb_s       300          SATA 3 Gb/s payload rate: data already in the read cache
cache_kib            2048         read cache: the last 2 MiB the head passed stay readable
prefetch_kib         1024         after a read the head keeps reading ahead this far while
                                  the drive is idle, so a request that follows the previous
                                  one needs no new seek or rotation
===================  ===========  ==========================================================

The image spans the whole stroke: its bytes are laid out on cylinders from the outer edge
in, each cylinder holding one revolution at its zone's rate, so a small image has few
cylinders and a seek between its ends is a full stroke. Heads, track skew and
head-switches are not modelled (a cylinder is one track). Writes go to a write-back cache:
they cost the command overhead and the interface transfer, never move the head and never
reach the read cache's timing (destaging is free); flushes cost the command overhead.

SD ``sd-a1`` (an SD card of application class A1: 1,500 random 4 KiB read IOPS):

===================  ===========  ==========================================================
read_us              626          per read request, whatever its place: FTL look-up, NAND
                                  page read, bus turnaround
read_mb_s            100          read transfer rate: 4 KiB random QD1 = 1 / (626 us +
                                  41 us) = 1,500 IOPS; 512 KiB sequential requests 89 MB/s
write_us             2000         per write request (A1: 500 random write IOPS)
write_mb_s           30           write transfer rate
===================  ===========  ==========================================================

Request size, not order, decides an SD card's throughput: there is no seek and no cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MB = 1_000_000


@dataclass(frozen=True)
class HddParams:
    rpm: float = 7200
    seek_track_ms: float = 1.0
    seek_average_ms: float = 8.5
    seek_full_ms: float = 16.0
    outer_mb_s: float = 200
    inner_mb_s: float = 100
    command_us: float = 80
    interface_mb_s: float = 300
    cache_kib: int = 2048
    prefetch_kib: int = 1024

    @property
    def revolution(self) -> float:
        """Seconds per revolution."""
        return 60.0 / self.rpm

    @property
    def seek_exponent(self) -> float:
        """p in seek = track + (full - track) * f**p, so that a third of the stroke takes seek_average_ms."""
        share = (self.seek_average_ms - self.seek_track_ms) / (self.seek_full_ms - self.seek_track_ms)
        return math.log(share) / math.log(1 / 3)


@dataclass(frozen=True)
class SdParams:
    read_us: float = 626
    read_mb_s: float = 100
    write_us: float = 2000
    write_mb_s: float = 30


MODELS: dict[str, HddParams | SdParams] = {"hdd-7200": HddParams(), "sd-a1": SdParams()}


@dataclass(frozen=True)
class Served:
    """When one request started (the drive free and the request arrived) and completed; how it was served."""

    start: float
    done: float
    how: str  # "cache", "stream", "seek" (HDD reads), "write", "flush", "sd"


@dataclass
class Geometry:
    """Cylinders of a zoned platter holding `size` bytes: track bytes fall linearly from outer to inner."""

    size: int
    params: HddParams
    cylinders: int = field(init=False)
    _outer: float = field(init=False)  # bytes of the outermost track
    _slope: float = field(init=False)  # bytes lost per cylinder inwards

    def __post_init__(self) -> None:
        rev = self.params.revolution
        outer, inner = self.params.outer_mb_s * MB * rev, self.params.inner_mb_s * MB * rev
        self.cylinders = max(2, math.ceil(self.size / ((outer + inner) / 2)))
        self._outer = outer
        self._slope = (outer - inner) / self.cylinders

    def start_of(self, cylinder: float) -> float:
        """Byte offset where `cylinder` (fractional: a position within it) begins."""
        return self._outer * cylinder - self._slope * cylinder * cylinder / 2

    def position(self, offset: float) -> float:
        """The fractional cylinder of byte `offset`: its integer part is the cylinder, the rest the angle (0..1)."""
        if self._slope == 0:
            return offset / self._outer
        a, b = self._slope / 2, -self._outer
        disc = b * b - 4 * a * offset
        return (-b - math.sqrt(max(disc, 0.0))) / (2 * a)

    def rate(self, offset: float) -> float:
        """Media rate at `offset`, bytes per second."""
        cylinder = min(self.position(offset), self.cylinders)
        return (self._outer - self._slope * cylinder) / self.params.revolution

    def track_bytes(self, offset: float) -> float:
        return self.rate(offset) * self.params.revolution

    def mean_rate(self, start: float, end: float) -> float:
        """Bytes per second of a read streaming from `start` to `end`: one revolution per cylinder crossed."""
        return (end - start) / ((self.position(end) - self.position(start)) * self.params.revolution)


class Hdd:
    """One actuator: seek by distance, rotational position, zoned rate, command overhead, read cache and prefetch."""

    def __init__(self, size: int, params: HddParams | None = None) -> None:
        self.params = params or HddParams()
        self.geometry = Geometry(size, self.params)
        self.busy_until = 0.0
        self.head = 0.0  # byte offset under the head when the last media read ended
        # The read stream: the head read up to `stream_end` at `stream_time` and keeps reading ahead (prefetch)
        # from there while idle; [cache_start, current stream position) is in the read cache.
        self.stream_end = 0.0
        self.stream_time = -math.inf
        self.cache_start = 0.0
        self.streaming = False
        self.limit = 0.0  # where the prefetch stops: prefetch_kib past the end of the last request it served

    def seek_time(self, from_offset: float, to_offset: float) -> float:
        """Seconds to move the head from the cylinder of one offset to another's (0 on the same cylinder)."""
        g, p = self.geometry, self.params
        distance = abs(int(g.position(to_offset)) - int(g.position(from_offset)))
        if distance == 0:
            return 0.0
        fraction = (distance - 1) / max(g.cylinders - 1, 1)
        return (p.seek_track_ms + (p.seek_full_ms - p.seek_track_ms) * fraction ** p.seek_exponent) / 1000

    def rotation_wait(self, at: float, offset: float) -> float:
        """Seconds from time `at` until the sector at `offset` passes under the head (the platter turns from 0 at t=0)."""
        rev = self.params.revolution
        angle = (at / rev) % 1.0
        target = self.geometry.position(offset) % 1.0
        return ((target - angle) % 1.0) * rev

    def _streamed_to(self, at: float) -> float:
        """How far the prefetching head has read by time `at`."""
        if not self.streaming:
            return self.stream_end
        ahead = (at - self.stream_time) * self.geometry.rate(self.stream_end)
        return min(self.stream_end + max(ahead, 0.0), self.limit, float(self.geometry.size))

    def read(self, arrival: float, offset: int, length: int) -> Served:
        p, g = self.params, self.geometry
        start = max(arrival, self.busy_until)
        ready = start + p.command_us / 1e6
        end = offset + length
        streamed = self._streamed_to(ready)
        # The request starts inside what the head has read (and the cache still holds).
        cached = self.streaming and max(self.cache_start, streamed - p.cache_kib * 1024) <= offset <= streamed
        moving = streamed < min(self.limit, g.size)  # the prefetch has not stopped yet
        if cached and end <= streamed:
            done = ready + length / (p.interface_mb_s * MB)
            if not moving:  # the prefetch had stopped, the segment full: it resumes when its sector comes round
                self.stream_end, self.stream_time = streamed, ready + self.rotation_wait(ready, streamed)
            self.limit = max(self.limit, end + p.prefetch_kib * 1024.0)  # and stays prefetch_kib ahead of the host
            self.busy_until = done
            return Served(start, done, "cache")
        if cached and moving:
            # The head is still reading ahead: the rest arrives at the media rate, no seek, no new rotation.
            done = max(ready, self.stream_time + (end - self.stream_end) / g.rate(self.stream_end))
            how = "stream"
        else:
            # A seek (none on the same cylinder) and the wait for the first sector not yet read to come round.
            here = streamed if self.streaming else self.head
            first = streamed if cached else float(offset)
            seek = self.seek_time(here, first)
            turn = self.rotation_wait(ready + seek, first)
            done = ready + seek + turn + (end - first) / g.rate(first)
            how = "seek"
            if not cached:
                self.cache_start = float(offset)
        self.stream_end, self.stream_time, self.streaming = float(end), done, True
        self.limit = end + p.prefetch_kib * 1024.0
        self.head = float(end)
        self.cache_start = max(self.cache_start, end - p.cache_kib * 1024)
        self.busy_until = done
        return Served(start, done, how)

    def write(self, arrival: float, length: int) -> Served:
        p = self.params
        start = max(arrival, self.busy_until)
        done = start + p.command_us / 1e6 + length / (p.interface_mb_s * MB)
        self.busy_until = done
        return Served(start, done, "write")

    def flush(self, arrival: float) -> Served:
        start = max(arrival, self.busy_until)
        done = start + self.params.command_us / 1e6
        self.busy_until = done
        return Served(start, done, "flush")


class Sd:
    """A per-request cost plus a transfer rate; no seek, no cache: size, not order, decides throughput."""

    def __init__(self, size: int, params: SdParams | None = None) -> None:
        self.params = params or SdParams()
        self.size = size
        self.busy_until = 0.0

    def _serve(self, arrival: float, seconds: float, how: str) -> Served:
        start = max(arrival, self.busy_until)
        self.busy_until = start + seconds
        return Served(start, self.busy_until, how)

    def read(self, arrival: float, offset: int, length: int) -> Served:
        p = self.params
        return self._serve(arrival, p.read_us / 1e6 + length / (p.read_mb_s * MB), "sd")

    def write(self, arrival: float, length: int) -> Served:
        p = self.params
        return self._serve(arrival, p.write_us / 1e6 + length / (p.write_mb_s * MB), "write")

    def flush(self, arrival: float) -> Served:
        return self._serve(arrival, 0.0, "flush")


def model(name: str, size: int) -> Hdd | Sd:
    """The model `name` (a key of MODELS) for an image of `size` bytes."""
    params = MODELS[name]
    return Hdd(size, params) if isinstance(params, HddParams) else Sd(size, params)


def replay_served(name: str, size: int, requests: list[tuple[str, int, int]],
                  host_gap_us: float = 20.0) -> list[Served]:
    """How model `name` serves `requests` ((op, offset, length), in order) issued one after the other, each
    `host_gap_us` after the previous completed: the order the guest's scheduler chose, at a real host's pace."""
    disk = model(name, size)
    at, out = 1.0, []
    for op, offset, length in requests:
        served = disk.read(at, offset, length) if op == "r" else (
            disk.write(at, length) if op == "w" else disk.flush(at))
        out.append(served)
        at = served.done + host_gap_us / 1e6
    return out


def replay(name: str, size: int, requests: list[tuple[str, int, int]], host_gap_us: float = 20.0) -> float:
    """Seconds model `name` takes for `requests` ((op, offset, length), in order) issued one after the other,
    each `host_gap_us` after the previous completed: the disk's share of a run with a real machine's host
    cost per request, whatever the guest under TCG added. How the calibration separates the model from TCG."""
    served = replay_served(name, size, requests, host_gap_us)
    return served[-1].done - 1.0 if served else 0.0


def foreground_latencies(served: list[Served], foreground: list[bool], host_gap_us: float = 20.0) -> list[float]:
    """Seconds each foreground request took in a replay (`replay_served`), for a foreground process with one
    request in flight (fio psync): it sends request k `host_gap_us` after request k-1 completed, and everything
    the log served between them (a writer's or a background reader's requests, put first by the guest's
    scheduler) is ahead of it at the disk. The first is timed from the replay's start."""
    out, issued = [], 1.0
    for s, fg in zip(served, foreground, strict=True):
        if fg:
            out.append(s.done - issued)
            issued = s.done + host_gap_us / 1e6
    return out


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, nearest rank (fio's convention); nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]
