"""The short plan of tests/vm/guest/evidence.py (one boot): every shipped profile against the kernel's values on
the model disks, on the row its claim names, judged by the disk's account (benchmarks/profiles.py has the full plan,
three runs a row, and the table).

The guest's own MB/s under TCG is the emulated CPU's per-request cost more than the disk's: two boots of the
same plan gave throughput-performance 2.23x and 0.94x the kernel's values on one sequential stream. So the
requests each run sent are replayed through the model (`benchmarks.profiles.modelled`), and the assertions are
on that. One run of each row and one of the kernel's values per workload, so the margins are for single runs:
- the claims the full run showed far outside its spread: deep read-ahead on four sequential readers at once on
  the HDD model (throughput-performance, hdd-sequential): at least STREAMS_GAIN x the kernel's MB/s (the full
  run's worst single-run pairing was 3.5x);
- every other profile, whose claim is now "no worse than the kernel's values" on these disks: within NO_WORSE
  of the kernel's figure. A single run is all the bound can lean on, so it is set from the spread of runs of
  equal settings, not from the medians: in the full run the six runs of the kernel's values (as `kernel` and as
  `default`) spanned 17.9-25.5 MB/s on four readers (a pairing as low as 0.70x) and, on the SD card's random
  reads, 12.2-22.3 ms of p99 (the model's p99 there is bimodal: a pairing as high as 1.83x); the earlier bounds
  (0.6x, 2x) left 1.17x and 1.09x beyond them. The one loss found, latency-performance's old `scheduler: none`
  on the SD card, was 5.4-6.3x in every single run: 3x still fails it, so the test still asserts direction.
  Four boots of this plan gave 0.97-1.31x (MB/s) and 0.91-1.10x (p99) on these rows.
Each profile is applied once to all its disks and rolled back with `tunectl rollback`, which must restore the
values the disks booted with.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.profiles import table
from tests.vm import machine

STREAMS_GAIN = 2.0
GAINS = {("throughput-performance", "hdd", "streams"): STREAMS_GAIN, ("hdd-sequential", "hdd", "streams"): STREAMS_GAIN}
NO_WORSE = {"higher": 0.5, "lower": 3.0}  # profile / kernel: MB/s at least 0.5x, a p99 at most 3x (see above)
SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "profiles").glob("*.yaml"))
COMPARED = ("scheduler", "read_ahead_kb", "nr_requests", "iosched")


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.12", "profiles", args=("short",), kind="model")


@pytest.fixture(scope="module")
def rows(boot: machine.Boot) -> list:
    assert not boot.results["errors"], boot.results["errors"]
    return table(boot)


def test_every_shipped_profile_has_a_row(rows: list) -> None:
    assert sorted({r.profile for r in rows}) == SHIPPED, rows


def test_each_profile_applied_and_rolled_back_to_the_boot_values(boot: machine.Boot) -> None:
    profiled = [r for r in boot.results["runs"] if r["profile"] != "kernel"]
    assert {r["profile"] for r in profiled} == set(SHIPPED), boot.results
    for run in profiled:
        assert run["applied"]["code"] == 0, run["applied"]
        assert run["rollback"] == 0, run["rollback_stderr"]
        for dev, booted in run["booted"].items():
            assert {k: run["back"][dev][k] for k in COMPARED} == {k: booted[k] for k in COMPARED}, (run["profile"], dev)


def test_the_profiles_values_were_in_place_during_the_runs(boot: machine.Boot) -> None:
    by = {(r["profile"], r["disk"]): r for r in boot.results["runs"]}
    for deep in ("throughput-performance", "hdd-sequential"):
        run = by[(deep, "hdd")]
        assert run["applied"]["settings"] and int(run["queue"][boot.results["disks"]["hdd"]]["read_ahead_kb"]) >= 4096
    # latency-performance's changed claim: mq-deadline on the one-command-at-a-time card, not none
    assert by[("latency-performance", "sd")]["queue"][boot.results["disks"]["sd"]]["scheduler"] == "mq-deadline"
    assert by[("desktop", "hdd")]["queue"][boot.results["disks"]["hdd"]]["scheduler"] == "bfq"


def test_each_profile_does_what_its_claim_says_by_the_disks_account(rows: list) -> None:
    failed = []
    for row in rows:
        why = (f"{row.profile}, {row.workload} on {row.disk}: modelled {row.value:.1f} {row.metric} against the "
               f"kernel's {row.kernel:.1f} ({row.ratio:.2f}x, {row.runs} run); guest {row.guest_value:.1f} against "
               f"{row.guest_kernel:.1f}")
        print(why)
        gain = GAINS.get((row.profile, row.disk, row.workload))
        if gain is not None:
            ok = row.ratio >= gain
        elif row.better == "higher":
            ok = row.ratio >= NO_WORSE["higher"]
        else:
            ok = row.ratio <= NO_WORSE["lower"]
        if not ok:
            failed.append(why)
    assert not failed, failed
