"""The model disks' timing alone (tests/vm/diskmodel.py): no qemu, no nbdkit, no clock but the one given."""

from __future__ import annotations

import random

import pytest

from tests.vm import diskmodel
from tests.vm.diskmodel import MB, Hdd, HddParams, Sd, SdParams

GIB = 1 << 30
KIB = 1024


def hdd() -> Hdd:
    return Hdd(GIB)


def service(disk: Hdd | Sd, at: float, offset: int, length: int) -> float:
    served = disk.read(at, offset, length)
    return served.done - served.start


def test_the_table_is_the_documented_one() -> None:
    p = HddParams()
    assert p.revolution == pytest.approx(8.333e-3, rel=1e-3)
    assert (p.seek_track_ms, p.seek_average_ms, p.seek_full_ms) == (1.0, 8.5, 16.0)
    assert (p.outer_mb_s, p.inner_mb_s) == (200, 100)
    assert diskmodel.MODELS["hdd-7200"] == p and diskmodel.MODELS["sd-a1"] == SdParams()


def test_sequential_after_sequential_is_cheap() -> None:
    disk = hdd()
    first = service(disk, 0.0, 0, 64 * KIB)
    follow = service(disk, 0.1, 64 * KIB, 64 * KIB)  # the prefetch has it by now
    assert follow < first / 10
    streamed = service(disk, disk.busy_until, 128 * KIB, 1 << 20)  # right behind: streams at the media rate
    assert streamed == pytest.approx((1 << 20) / (200 * MB), rel=0.1)
    assert disk.read(disk.busy_until, 128 * KIB + (1 << 20), 4 * KIB).how in ("cache", "stream")


def test_a_long_seek_costs_more_than_a_short_one() -> None:
    disk = hdd()
    assert disk.seek_time(0, 0) == 0
    one = disk.seek_time(0, disk.geometry.start_of(1))
    third = disk.seek_time(0, disk.geometry.start_of(disk.geometry.cylinders / 3 + 1))
    full = disk.seek_time(0, GIB - 1)
    assert one == pytest.approx(1e-3) and third == pytest.approx(8.5e-3, rel=0.01) and full == pytest.approx(16e-3, rel=0.01)
    assert one < third < full
    # whole requests: far costs more than near, on average over the platter's angle
    near = far = 0.0
    for i in range(200):
        for target, total in ((1 << 20, "near"), (GIB - (1 << 20), "far")):
            d = hdd()
            d.read(0.0, 0, 4 * KIB)
            cost = service(d, 1.0 + i * 0.000417, target, 4 * KIB)
            if total == "near":
                near += cost
            else:
                far += cost
    assert far > near + 200 * 10e-3


def test_the_rotational_wait_follows_the_platter() -> None:
    """Not a constant half turn: the wait is where the sector is now, between 0 and one revolution."""
    disk = hdd()
    rev = disk.params.revolution
    waits = [disk.rotation_wait(t, 0) for t in (0.0, rev / 4, rev / 2, 3 * rev / 4)]
    assert waits == pytest.approx([0.0, 0.75 * rev, 0.5 * rev, 0.25 * rev])


def test_a_second_read_within_the_read_cache_is_free() -> None:
    disk = hdd()
    disk.read(0.0, 10 * (1 << 20), 4 * KIB)
    again = disk.read(1.0, 10 * (1 << 20), 4 * KIB)
    assert again.how == "cache"
    assert again.done - again.start == pytest.approx(80e-6 + 4096 / (300 * MB))  # the command and the interface only


def test_random_4k_reads_at_qd1_cost_seek_and_rotation() -> None:
    disk, rng, at = hdd(), random.Random(1), 0.0
    for _ in range(2000):
        at = disk.read(at, rng.randrange(GIB // 4096) * 4096, 4096).done
    assert 75 < 2000 / at < 90  # ~8.0 ms mean seek + 4.17 ms mean turn + 80 us


def test_the_media_rate_falls_from_outer_to_inner() -> None:
    g = hdd().geometry
    assert g.rate(0) == pytest.approx(200 * MB)
    assert g.rate(GIB) == pytest.approx(100 * MB, rel=0.01)
    assert g.rate(GIB // 2) < g.rate(GIB // 4) < g.rate(0)


def test_one_actuator_serves_requests_in_turn() -> None:
    disk = hdd()
    first = disk.read(0.0, 0, 4096)
    second = disk.read(0.0, GIB // 2, 4096)
    assert second.start == first.done


def test_sd_iops_and_sequential_rate_from_the_table() -> None:
    card, at = Sd(GIB), 0.0
    for i in range(1500):
        at = card.read(at, ((i * 7919) % 100_000) * 4096, 4096).done
    assert at == pytest.approx(1.0, rel=0.01)  # 1,500 random 4 KiB reads a second at QD1
    card, at = Sd(GIB), 0.0
    for i in range(180):
        at = card.read(at, i * 512 * KIB, 512 * KIB).done
    assert 180 * 512 * KIB / at / MB == pytest.approx(89, abs=2)
    assert service(Sd(GIB), 0.0, 0, 4096) == service(Sd(GIB), 0.0, GIB // 2, 4096)  # order does not matter


def test_replay_times_the_requests_as_a_fast_host_would_send_them() -> None:
    """The calibration's replay: 4 KiB sequential reads cost a command and a cached transfer each, plus 20 us."""
    reqs = [("r", i * 4096, 4096) for i in range(1000)]
    per = (diskmodel.replay("hdd-7200", GIB, reqs) - diskmodel.replay("hdd-7200", GIB, reqs[:1])) / 999
    assert per == pytest.approx(80e-6 + 4096 / (300 * MB) + 20e-6, rel=0.01)  # the first one turned, the rest hit
    assert diskmodel.replay("sd-a1", GIB, [("r", 0, 4096)] * 1500) == pytest.approx(1.0 + 1499 * 20e-6, rel=0.01)
    assert diskmodel.replay("hdd-7200", GIB, []) == 0.0


def interleaved_streams(request_kib: int, per_visit: int, streams: int = 4, mib: int = 8) -> list[tuple[str, int, int]]:
    """`streams` sequential readers a quarter of the disk apart, each visit reading `per_visit` requests in a row."""
    size, reqs, at = request_kib * KIB, [], [i * GIB // streams for i in range(streams)]
    for _ in range(mib * 1024 // request_kib // per_visit):
        for s in range(streams):
            reqs += [("r", at[s] + k * size, size) for k in range(per_visit)]
            at[s] += per_visit * size
    return reqs


def test_deep_read_ahead_amortises_the_seeks_between_concurrent_streams() -> None:
    """What read-ahead depth buys on this disk: 128 KiB a visit pays a seek and a turn per 128 KiB; 4 MiB a
    visit (four 1 MiB requests) pays it per 4 MiB. One stream alone streams at the media rate either way."""
    def mb_s(reqs: list[tuple[str, int, int]]) -> float:
        return sum(r[2] for r in reqs) / diskmodel.replay("hdd-7200", GIB, reqs) / MB

    shallow, deep = mb_s(interleaved_streams(128, 1)), mb_s(interleaved_streams(1024, 4))
    assert shallow < 20 and deep > 80 and deep / shallow > 5
    alone_shallow, alone_deep = mb_s(interleaved_streams(128, 1, 1)), mb_s(interleaved_streams(1024, 4, 1))
    assert alone_deep / alone_shallow == pytest.approx(1.0, abs=0.05)


def test_foreground_latency_counts_what_the_log_served_before_it() -> None:
    """A QD1 reader sends its next read when the last completes: a writer's request served between two reads
    (the guest scheduler's order) is waited for; a read with nothing before it costs its own service only."""
    read_s, write_s = 626e-6 + 4096 / (100 * MB), 2000e-6 + 256 * KIB / (30 * MB)
    reqs = [("r", 0, 4096), ("w", 0, 256 * KIB), ("r", 8192, 4096), ("r", 16384, 4096)]
    served = diskmodel.replay_served("sd-a1", GIB, reqs)
    latencies = diskmodel.foreground_latencies(served, [op == "r" for op, _, _ in reqs])
    assert latencies == pytest.approx([read_s, 20e-6 + write_s + read_s, read_s], rel=1e-6)
    assert diskmodel.replay("sd-a1", GIB, reqs) == pytest.approx(served[-1].done - served[0].start)


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert diskmodel.percentile(values, 99) == 99.0 and diskmodel.percentile(values, 100) == 100.0
    assert diskmodel.percentile([5.0], 99) == 5.0 and diskmodel.percentile(values, 50) == 50.0
    assert diskmodel.percentile([], 99) != diskmodel.percentile([], 99)  # nan
