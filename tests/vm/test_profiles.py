"""The direction of a profile's claim on the model disks, measured in a guest (one boot, the short plan of
tests/vm/guest/evidence.py): the profile's value beats the kernel's on the workload its description names.

Only claims whose margin in benchmarks/profiles.py's full run was wide enough to survive a shared host's
noise are asserted here (see SHORT in the guest group); the table is in the README.
"""

from __future__ import annotations

import pytest

from benchmarks.profiles import table
from tests.vm import machine


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.12", "profiles", args=("short",), kind="model")


def test_each_short_claim_goes_the_way_its_metric_should(boot: machine.Boot) -> None:
    assert not boot.results["errors"], boot.results["errors"]
    rows = table(boot.results)
    assert rows, boot.results
    for row in rows:
        assert row["wins"], row
