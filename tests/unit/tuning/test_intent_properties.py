"""Property (#21): any sequence of applies (random profiles, scoped or not, switching schedulers) and partial
rollbacks, then a full rollback, leaves every attribute of every device as it was before the first command.

The devices start from random schedulers and knob values (not only kernel defaults), so an original
that is lost (a knob reset by a switch, the second loop device on one backing file) shows.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl, snapshot_all
from tunectl.attributes import IOSCHED, SCHEDULERS

DEVICES = ("sda", "sdb", "loop0", "loop1", "loop2")
KNOBS = {"read_expire": (1, 5000), "write_expire": (1, 20000), "front_merges": (0, 1), "fifo_batch": (1, 64),
         "slice_idle": (0, 20), "low_latency": (0, 1), "back_seek_penalty": (1, 10), "strict_guarantees": (0, 1)}
QUEUE = {"nomerges": (0, 2), "rq_affinity": (0, 2), "add_random": (0, 1)}


@st.composite
def block(draw) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        sched = draw(st.sampled_from([s for s in SCHEDULERS if s != "none"]))
        out["scheduler"] = sched
        knobs = [k for k in IOSCHED[sched] if k in KNOBS]
        chosen = draw(st.lists(st.sampled_from(knobs), max_size=2, unique=True)) if knobs else []
        if chosen:
            out["iosched"] = {k: draw(st.integers(*KNOBS[k])) for k in chosen}
    if draw(st.booleans()):
        out["read_ahead_kb"] = draw(st.integers(4, 8192))
    attr = draw(st.sampled_from(sorted(QUEUE)))
    if draw(st.booleans()):
        out["queue"] = {attr: draw(st.integers(*QUEUE[attr]))}
    return out


profile = st.dictionaries(st.sampled_from(("loop", "ssd", "rotational")), block(), min_size=1).map(
    lambda classes: {"name": "random", "classes": classes})
devices = st.one_of(st.none(), st.lists(st.sampled_from(DEVICES), min_size=1, max_size=3, unique=True))
step = st.one_of(st.tuples(st.just("apply"), st.integers(0, 2), devices),
                 st.tuples(st.just("rollback"), st.just(0), st.lists(st.sampled_from(DEVICES), min_size=1,
                                                                       max_size=2, unique=True)))


@st.composite
def start(draw) -> dict[str, tuple[str, dict[str, int]]]:
    """Each device's scheduler and some knob values before tunectl runs."""
    out = {}
    for name in DEVICES:
        sched = draw(st.sampled_from(["mq-deadline", "bfq", "kyber", "none"]))
        knobs = [k for k in IOSCHED.get(sched, {}) if k in KNOBS]
        out[name] = (sched, {k: draw(st.integers(*KNOBS[k])) for k in draw(st.lists(st.sampled_from(knobs), max_size=2,
                                                                                     unique=True))} if knobs else {})
    return out


def _machine(base: Path, initial: dict) -> FakeTree:
    tree = FakeTree.create(base)
    tree.add_disk("sda", rotational=True, wwn="0x5000c50000000001", serial="A1")
    tree.add_disk("sdb", rotational=False, wwn="0x5000c50000000002", serial="A2")
    tree.add_loop("loop0", "/srv/a.img")
    tree.add_loop("loop1", "/srv/a.img")  # two loop devices on one backing file
    tree.add_loop("loop2", "/srv/b.img", rotational=False)
    for name, (sched, knobs) in initial.items():
        tree.sysfs.write(f"block/{name}/queue/scheduler", sched)
        for knob, value in knobs.items():
            tree.sysfs.write(f"block/{name}/queue/iosched/{knob}", str(value))
    return tree


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(profile, min_size=3, max_size=3), st.lists(step, min_size=1, max_size=6), start())
def test_every_original_is_back_after_a_final_rollback(profiles, steps, initial) -> None:
    base = Path(tempfile.mkdtemp(prefix="tunectl-intent-prop-"))
    try:
        tree = _machine(base, initial)
        paths = []
        for i, p in enumerate(profiles):
            path = base / f"p{i}.yaml"
            path.write_text(yaml.safe_dump(dict(p, name=f"p{i}")))
            paths.append(str(path))
        t = Tunectl(tree, base / "state")
        originals = snapshot_all(tree)
        for kind, which, names in steps:
            if kind == "apply":
                r = t("apply", "-p", paths[which], *(names or []))
            else:
                r = t("rollback", *names)
            assert r.code in (0, 3), (kind, names, r.out, r.err)  # 3: a scheduler a device does not offer
        r = t("rollback")
        assert r.code == 0, r.err
        assert snapshot_all(tree) == originals
        v = t("verify")
        assert v.code == 0 and v.out.startswith("nothing applied"), v.out
    finally:
        shutil.rmtree(base, ignore_errors=True)
