"""The short plan of tests/vm/guest/evidence.py (one boot): profiles against the kernel's values on the model
disks, judged by the disk's account (benchmarks/profiles.py has the full plan and the table).

The guest's own MB/s under TCG is the emulated CPU's per-request cost more than the disk's: two boots of the
same plan gave throughput-performance 2.23x and 0.94x the kernel's values on one sequential stream. So the
requests each run sent are replayed through the model (`benchmarks.profiles.modelled`), and the assertions are
on that. The short plan is the claim the full run showed far outside its spread: four sequential readers at
once on the HDD model, where deep read-ahead makes each visit of the head a long run instead of 128 KiB
(full run: see the README's table). Three runs of each, in turn, in one boot; medians.
"""

from __future__ import annotations

import pytest

from benchmarks.profiles import table
from tests.vm import machine

# A wide margin: the full run's modelled ratio is far above it, and the model's figures do not depend on the
# host's load (only the order the guest sent its requests in does).
STREAMS_GAIN = 2.0


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.12", "profiles", args=("short",), kind="model")


def test_each_short_run_applied_and_rolled_back(boot: machine.Boot) -> None:
    assert not boot.results["errors"], boot.results["errors"]
    profiled = [r for r in boot.results["runs"] if r["profile"] != "kernel"]
    assert len(profiled) >= 6, boot.results
    for run in profiled:
        assert run["applied"]["code"] == 0 and run["applied"]["settings"], run["applied"]
        assert run["rollback"] == 0, run
        assert int(next(iter(run["queue"].values()))["read_ahead_kb"]) >= 4096, run["queue"]


def test_deep_read_ahead_beats_the_kernels_on_concurrent_streams_by_the_disks_account(boot: machine.Boot) -> None:
    rows = table(boot)
    assert {r.profile for r in rows} == {"throughput-performance", "hdd-sequential"}, rows
    for row in rows:
        why = (f"{row.profile}, {row.workload} on {row.disk}: modelled {row.value:.1f} MB/s against the kernel's "
               f"{row.kernel:.1f} (medians of {row.runs}); guest {row.guest_value:.1f} against {row.guest_kernel:.1f}")
        print(why)
        assert row.runs == 3 and row.metric == "MB/s", why
        assert row.ratio >= STREAMS_GAIN, why
