"""Property tests: apply then plan again is empty; rollback restores every original value (numbers and ranges)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakesys import FakeTree, all_topologies
from tests.tuning_helpers import Tunectl, snapshot_all
from tunectl.attributes import IOSCHED, SCHEDULERS

CLASSES = ("rotational", "ssd", "nvme", "virtio", "mmc", "dm", "md", "zram", "loop")
# Queue attributes whose valid range does not depend on the hardware (max_sectors_kb and
# nr_requests do; `rotational` would move the device to another class).
SAFE_QUEUE = {"nomerges": (0, 2), "rq_affinity": (0, 2), "add_random": (0, 1), "iostats": (0, 1)}
# Knob values the kernel stores without clamping.
KNOB_RANGES = {"read_expire": (1, 5000), "write_expire": (1, 20000), "writes_starved": (1, 16), "front_merges": (0, 1),
               "fifo_batch": (1, 64), "prio_aging_expire": (1, 20000), "slice_idle": (0, 20), "low_latency": (0, 1),
               "back_seek_penalty": (1, 10), "fifo_expire_sync": (1, 1000), "fifo_expire_async": (1, 1000),
               "timeout_sync": (4, 1000), "strict_guarantees": (0, 1), "read_lat_nsec": (1000, 10**8),
               "write_lat_nsec": (1000, 10**8)}


@st.composite
def number_or_range(draw, lo: int, hi: int):
    """A number, or a range {min}, {max}, {min, max} within lo..hi (SPEC.md §3)."""
    a, b = sorted((draw(st.integers(lo, hi)), draw(st.integers(lo, hi))))
    return draw(st.sampled_from([a, {"min": a}, {"max": b}, {"min": a, "max": b}]))


@st.composite
def settings_block(draw):
    block = {}
    if draw(st.booleans()):
        scheds = draw(st.lists(st.sampled_from(SCHEDULERS), min_size=1, max_size=3, unique=True))
        block["scheduler"] = scheds if len(scheds) > 1 else scheds[0]
        knobs = sorted({k for s in scheds for k in IOSCHED[s] if k in KNOB_RANGES})
        chosen = draw(st.lists(st.sampled_from(knobs), max_size=3, unique=True)) if knobs else []
        if chosen:
            block["iosched"] = {k: draw(number_or_range(*KNOB_RANGES[k])) for k in chosen}
    if draw(st.booleans()):
        block["read_ahead_kb"] = draw(number_or_range(0, 65536))
    queue = draw(st.dictionaries(st.sampled_from(sorted(SAFE_QUEUE)), st.just(0), max_size=2))
    if queue:
        block["queue"] = {k: draw(number_or_range(*SAFE_QUEUE[k])) for k in queue}
    return block


profiles = st.dictionaries(st.sampled_from(CLASSES), settings_block(), min_size=1).map(
    lambda classes: {"name": "random", "classes": classes})


def run_case(profile: dict):
    base = Path(tempfile.mkdtemp(prefix="tunectl-prop-"))
    try:
        tree = FakeTree.create(base)
        all_topologies(tree)
        (base / "p.yaml").write_text(yaml.safe_dump(profile))
        yield tree, Tunectl(tree, base / "state"), str(base / "p.yaml")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles)
def test_apply_then_plan_is_empty_and_rollback_restores(profile):
    for tree, tunectl, path in run_case(profile):
        originals = snapshot_all(tree)
        applied = tunectl("apply", "-p", path, "--json")
        assert applied.code == 0, applied.out
        replan = tunectl("plan", "-p", path, "--json").doc
        assert [s for s in replan["settings"] if s["status"] == "change"] == []
        again = tunectl("apply", "-p", path, "--json").doc
        assert again["changed"] is False and again["writes"] == 0
        assert tunectl("rollback", "--json").code == 0
        assert snapshot_all(tree) == originals
