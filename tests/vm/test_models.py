"""Calibration of the model disks (tests/vm/diskmodel.py) against published numbers, measured from a 6.1 guest.

One boot (guest group `models`, see tests/vm/guest/models.py) of `machine.model_machine()`.
The disks are served by nbdkit on the host in real time, so what the guest measures
includes its own cost per request under TCG (0.1-3 ms on a shared 2-core host, against
the 94 us of a cached 4 KiB read). So each calibration has two halves:

- the requests the guest's kernel really sent (the model's log: sizes, offsets, order),
  replayed through the model with a real machine's 20 us host cost per request
  (`diskmodel.replay`), must land on the published number: the model is right for the
  requests this kernel makes;
- what the guest measured must never beat that replay (the plugin really made the guest
  wait). It is not asserted from below: how far below depends on the host's load (on the
  shared machine this was written on, the guest's path added 1-9 ms per request).
"""

from __future__ import annotations

import statistics

import pytest

from tests.vm import diskmodel, machine

# A SATA disk's buffered reads over read_ahead_kb (MB/s), as published: the knee at 16 KiB.
PUBLISHED_SWEEP = {4: 39.6, 8: 64.2, 16: 88.7, 32: 89.3, 64: 90.4, 128: 90.5, 512: 90.2, 2048: 90.6, 8192: 90.0}


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.1", "models", kind="model")


@pytest.fixture(scope="module")
def run(boot: machine.Boot) -> dict:
    assert not boot.results["errors"], boot.results["errors"]
    return boot.results


def logged(boot: machine.Boot, step: str, disk: str) -> list[machine.Request]:
    """The requests model disk `disk` served during guest step `step`."""
    return machine.step_requests(boot, step, disk)


def replayed(boot: machine.Boot, step: str, disk: str, model: str) -> tuple[list[machine.Request], float]:
    """The step's requests on `disk` and the seconds the model takes for them with a 20 us host cost each."""
    reqs = logged(boot, step, disk)
    size = boot.results["queues"]["hdd" if disk == "mhdd" else "sd"]["size"]
    return reqs, diskmodel.replay(model, size, [(r.op, r.offset, r.length) for r in reqs])


def test_the_guest_sees_a_rotational_disk_and_an_sd_card(run: dict) -> None:
    queues = run["queues"]
    assert queues["hdd"]["rotational"] == "1" and queues["hdd"]["size"] == 1 << 30
    assert queues["sd"]["size"] == 512 << 20


def test_hdd_random_4k_reads_at_qd1(boot: machine.Boot, run: dict) -> None:
    """70-150 IOPS, as a 7200 rpm disk, for the reads fio made; the guest's own count within the model's reach."""
    reqs, seconds = replayed(boot, "hdd_random", "mhdd", "hdd-7200")
    reads = [r for r in reqs if r.op == "r"]
    model_iops = len(reads) / seconds
    guest = run["hdd_random"]["iops"]
    assert {r.length for r in reads} == {4096} and len({r.offset for r in reads}) > 0.9 * len(reads)
    assert 70 <= model_iops <= 150, f"the model served fio's {len(reads)} reads at {model_iops:.0f} IOPS"
    assert guest <= 1.1 * model_iops, f"guest {guest:.0f} IOPS, model {model_iops:.0f} IOPS"


def test_hdd_cold_sequential_read_at_the_zone_rate(boot: machine.Boot, run: dict) -> None:
    """256 MiB from LBA 0 with O_DIRECT: within 15% of the model's media rate over that range."""
    seq = run["hdd_sequential"]
    zone = diskmodel.Hdd(1 << 30).geometry.mean_rate(0, seq["mib"] << 20) / diskmodel.MB
    reqs, seconds = replayed(boot, "hdd_sequential", "mhdd", "hdd-7200")
    read = sum(r.length for r in reqs if r.op == "r")
    model = read / seconds / diskmodel.MB
    assert read >= seq["mib"] << 20
    assert abs(model - zone) <= 0.15 * zone, f"the model served dd's reads at {model:.0f} MB/s, zone rate {zone:.0f}"
    assert seq["mb_s"] <= 1.1 * model, f"guest {seq['mb_s']:.0f} MB/s, model {model:.0f} MB/s"


def bench_points(boot: machine.Boot) -> dict[int, tuple[float, float, list[machine.Request]]]:
    """read_ahead_kb -> (guest MB/s, model MB/s for the point's requests, its requests), from bench's runs."""
    doc = boot.results["hdd_bench"]["doc"]
    start = boot.results["bench_partition"]["start"]
    reads = [r for r in logged(boot, "hdd_bench", "mhdd") if r.op == "r" and r.offset >= start]
    runs: list[list[machine.Request]] = []
    for r in reads:  # every run reads the partition from its first byte, cold
        if r.offset == start or not runs:
            runs.append([])
        runs[-1].append(r)
    runs = [run for run in runs if sum(r.length for r in run) >= doc["runs"][0]["bytes"]]
    # bench reads the target once, unmeasured, before its first point (tunectl.bench.runner: caches its drops
    # cannot reach); on the raw partition that is one more run from the first byte, ahead of every point
    warm, *runs = runs
    assert sum(r.length for r in warm) >= doc["runs"][0]["bytes"]
    ordered = sorted(doc["runs"], key=lambda run: run["order"])
    assert len(runs) == len(ordered), (len(runs), len(ordered))
    points = {}
    for done, reqs in zip(ordered, runs):
        seconds = diskmodel.replay("hdd-7200", 1 << 30, [(r.op, r.offset, r.length) for r in reqs])
        points[done["read_ahead_kb"]] = (done["mb_s"], sum(r.length for r in reqs) / seconds / diskmodel.MB, reqs)
    return points


def test_bench_sweep_draws_the_published_knee(boot: machine.Boot, run: dict) -> None:
    """tunectl bench (4 KiB reads) over read_ahead_kb in the inner zone: each point within 25% of a SATA disk's."""
    assert run["hdd_bench"]["code"] == 0, run["hdd_bench"]["stderr"]
    points = bench_points(boot)
    assert sorted(points) == sorted(PUBLISHED_SWEEP)
    table = {ra: f"model {model:.1f} guest {guest:.1f} published {PUBLISHED_SWEEP[ra]}"
             for ra, (guest, model, _) in points.items()}
    for ra, (guest, model, _) in points.items():
        assert abs(model - PUBLISHED_SWEEP[ra]) <= 0.25 * PUBLISHED_SWEEP[ra], table
        assert guest <= 1.1 * model, table


def test_bench_requests_grow_with_read_ahead(boot: machine.Boot) -> None:
    """The knee is request size: 4 KiB reads reach the disk as read_ahead_kb-sized requests, up to max_sectors_kb."""
    points = bench_points(boot)
    max_kb = int(boot.results["queues"]["hdd"]["max_sectors_kb"])
    for ra, (_, _, reqs) in points.items():
        sizes = sorted(r.length for r in reqs)
        assert sizes[len(sizes) // 2] == min(ra, max_kb) * 1024 or ra > max_kb, (ra, sizes[len(sizes) // 2])


def browser_runs(boot: machine.Boot) -> list[dict]:
    """Per run and case ("plain", "stack"): guest seconds, the model's seconds for the card's requests, requests."""
    out = []
    for run in boot.results["sd_browser"]["runs"]:
        row = {}
        for case, measured in run.items():
            marks = measured["marks"]
            reqs = machine.requests(boot.shared / "msd.requests", marks["before"]["msd"], marks["after"]["msd"])
            model = diskmodel.replay("sd-a1", boot.results["queues"]["sd"]["size"], [(r.op, r.offset, r.length)
                                                                                     for r in reqs])
            row[case] = {"guest": measured["seconds"], "model": model, "requests": reqs,
                         "cpu": measured["guest_cpu_s"]}
        out.append(row)
    return out


def browser_ratio(boot: machine.Boot) -> tuple[float, float, dict[str, int]]:
    """(the model's stack/plain time ratio, the guest's, median read request KiB per case), medians over runs."""
    runs = browser_runs(boot)
    model = statistics.median(r["stack"]["model"] / r["plain"]["model"] for r in runs)
    guest = statistics.median(r["stack"]["guest"] / r["plain"]["guest"] for r in runs)
    sizes = {case: statistics.median(q.length for q in runs[0][case]["requests"] if q.op == "r") // 1024
             for case in ("plain", "stack")}
    return model, guest, sizes


def test_sd_browser_stack_sends_the_card_4k_requests(boot: machine.Boot, run: dict) -> None:
    """squashfs (4 KiB gzip) on dm-verity on loop (direct I/O) on ext4, against plain ext4, dd bs=4096 cold:
    plain ext4 reaches the card in read-ahead-sized requests, the stack one squashfs block (4-8 KiB) at a time,
    so on a card that charges per request the stack is many times slower."""
    browser = run["sd_browser"]
    assert run["sd_queue"]["queue_depth"] == "1" and run["sd_queue"]["scheduler"] == "mq-deadline"
    assert all(dio == "1" for dio in browser["loop_dio"].values()), browser["loop_dio"]
    model, guest, sizes = browser_ratio(boot)
    assert sizes["plain"] >= 64 and sizes["stack"] <= 8, sizes
    assert model > 1.5, f"model {model:.2f}x, guest {guest:.2f}x; median request KiB {sizes}"


@pytest.mark.xfail(strict=True, reason=(
    "6.1's squashfs reads one 4 KiB block per request, one at a time (the model's log: median 4 KiB, never "
    "merged even at queue depth 1): at the A1 table's 667 us per request the stack is ~11x slower than plain "
    "ext4's 128 KiB requests. The published 2.6x (92.9 MB/s through the stack) needs ~44 us per 4 KiB "
    "request, ~23,000 IOPS: not an A1 card. The model is not bent to fit."))
def test_sd_browser_ratio_is_the_published_one(boot: machine.Boot, run: dict) -> None:
    """The published 2.6x (92.9 vs 242 MB/s): the model is right when its ratio lands between 2x and 3.5x."""
    model, guest, sizes = browser_ratio(boot)
    assert 2 <= model <= 3.5, f"model {model:.2f}x, guest {guest:.2f}x; median request KiB {sizes}"
