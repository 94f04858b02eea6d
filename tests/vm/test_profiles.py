"""The short plan of tests/vm/guest/evidence.py (one boot): a profile's run against the kernel's values on
the model disks, judged by the disk's account.

The guest's own MB/s under TCG is the emulated CPU's per-request cost more than the disk's: two boots of the
same plan gave throughput-performance 2.23x and 0.94x the kernel's values. So, as the calibration and the
preload tests do, the requests each run sent are replayed through the model (`diskmodel.replay`), and the
assertion is on that. For one sequential stream the model, like the published disk, reads at the media rate
at any read-ahead past the knee (first replay: 193.3 MB/s with the kernel's 128 KiB, 193.2 with 4 MiB): the
profile must not be slower by the disk's account, and its apply and rollback must have worked.
"""

from __future__ import annotations

import pytest

from benchmarks.profiles import table
from tests.vm import diskmodel, machine

LOGS = {"hdd": ("mhdd", "hdd-7200"), "sd": ("msd", "sd-a1")}


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.12", "profiles", args=("short",), kind="model")


def modelled_mb_s(boot: machine.Boot, step: str, disk: str) -> float:
    """MB/s of the reads `step` sent to `disk`, timed by the model as a real host would send them."""
    log, model = LOGS[disk]
    reads = [r for r in machine.step_requests(boot, step, log) if r.op == "r"]
    size = next(d.size_mib << 20 for d in machine.model_machine().disks if d.name == log)
    seconds = diskmodel.replay(model, size, [(r.op, r.offset, r.length) for r in reads])
    return sum(r.length for r in reads) / seconds / 1e6


def test_each_short_run_applied_and_rolled_back(boot: machine.Boot) -> None:
    assert not boot.results["errors"], boot.results["errors"]
    profiled = [r for r in boot.results["runs"] if r["profile"] != "kernel"]
    assert profiled, boot.results
    for run in profiled:
        assert run["applied"]["code"] == 0 and run["applied"]["settings"], run["applied"]
        assert run["rollback"] == 0, run


def test_no_short_run_is_slower_than_the_kernels_values_by_the_disks_account(boot: machine.Boot) -> None:
    rows = table(boot.results)
    assert rows, boot.results
    for row in rows:
        assert row["metric"] == "MB/s", row  # the short plan is sequential reads
        kernel = modelled_mb_s(boot, f"kernel:{row['disk']}:{row['workload']}", row["disk"])
        profile = modelled_mb_s(boot, f"{row['profile']}:{row['disk']}:{row['workload']}", row["disk"])
        why = (f"{row['profile']} on {row['disk']}: modelled {profile:.1f} MB/s against the kernel's {kernel:.1f}; "
               f"guest {row['value']:.1f} against {row['kernel']:.1f}")
        print(why)
        assert profile >= 0.95 * kernel, why
