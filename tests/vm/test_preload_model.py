"""tunectl preload on the model HDD (tests/vm/diskmodel.py): a 400-file tree in shuffled write order,
read cold as-is, after WILLNEED in directory order, after `tunectl preload replay` (one boot, guest group
`preload`, tests/vm/guest/preload.py).

The ratios are asserted on the requests the disk really saw, replayed through the model with a real
machine's host cost per request (`diskmodel.replay`), as the calibration does: what the guest measured
under TCG adds 0.1-3 ms per request of the shared host's load, which no ordering can win back. The
guest's own seconds are kept in the results and printed on failure. The targets of #30 for a tree of
thousands of files are 2.4x as-is and 1.9x WILLNEED; this small CI version asserts the direction with
margin: at least 1.5x as-is and faster than WILLNEED in directory order.

The replay issues its reads from one thread on this disk (`replay.issuers_for`): two issuers, each taking
every other block of 16 files of the physical order, made the model's account of the replay 2.9-7x slower
(0.35-0.40 s against 1.06-2.78 s for the same ~672 requests of a 600-file tree, files=600, not this test's 400;
six alternated pairs over two boots): the disk saw the two threads' blocks interleaved, a seek between each.
The inode sample cannot tell this disk from one that does not seek: after the metadata pass it read nothing
here, as on a cold loop device over a virtual disk, and came at 4,900-17,800 stats/s, either side of
FAST_STATS. So the method line must keep saying one issuing thread.
"""

from __future__ import annotations

import pytest

from tests.vm import machine


@pytest.fixture(scope="module")
def boot(vm_boot) -> machine.Boot:
    return vm_boot("6.1", "preload", kind="model")


@pytest.fixture(scope="module")
def run(boot: machine.Boot) -> dict:
    assert not boot.results["errors"], boot.results["errors"]
    return boot.results


def test_collect_records_the_tree_and_its_metadata(run: dict) -> None:
    collect = run["collect"]
    assert collect["code"] == 0, collect
    assert collect["doc"]["files"] == run["tree"]["files"]
    assert collect["doc"]["metadata"], collect["doc"]  # as root, on ext4: the device ranges of the metadata pass


def test_replay_on_the_hdd_model_beats_as_is_and_willneed_in_directory_order(boot: machine.Boot, run: dict) -> None:
    code, doc = run["tunectl"]["before"]
    assert code == 0 and doc["metadata"]["bytes"] > 0, doc
    assert all(how.startswith("physical (rotational") for how in doc["methods"].values()), doc["methods"]
    # a disk that seeks keeps one issuer, whatever its inode sample said (see the module's docstring)
    for step in ("tunectl", "tunectl_nometa"):
        methods = run[step]["before"][1]["methods"]
        assert all(how.endswith("; 1 issuing thread: the disk may seek, one keeps the physical order")
                   for how in methods.values()), (step, methods)
    model = {step: machine.step_modelled(boot, step) for step in ("asis", "willneed", "tunectl", "tunectl_nometa")}
    guest = {step: run[step]["seconds"] for step in model}
    why = f"modelled (requests, seconds): {model}; guest seconds: {guest}"
    print(why)
    assert model["asis"][1] >= 1.5 * model["tunectl"][1], why
    assert model["willneed"][1] > model["tunectl"][1], why
