"""The CI direction check of benchmarks/preload_tree.py, on a small case: a 600-file tree on its own ext4
(direct-I/O loop device), cold before every run. tunectl's replay, then the reads, against the reads
alone: sooner (medians of 3 interleaved runs). The disk requests of each are in the failure message
(on a loop device without a scheduler they do not merge: the count is the same, the waits are not)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.preload_tree import Tree, methods
from tests.preload_helpers import tunectl

pytestmark = pytest.mark.root


def _reads(dev: str) -> int:
    return int(Path(f"/sys/block/{Path(dev).name}/stat").read_text().split()[0])


def test_replay_then_reads_beats_reads_alone_on_a_cold_tree(tmp_path: Path) -> None:
    with Tree(tmp_path, files=600) as tree:
        lst = tmp_path / "tree.list"
        assert tunectl("preload", "collect", str(tree.mnt), "-o", str(lst)).code == 0
        timers = methods(tree, lst)
        seconds: dict[str, list[float]] = {"a": [], "d": []}
        requests: dict[str, list[int]] = {"a": [], "d": []}
        for r in range(3):
            for k in (("a", "d") if r % 2 == 0 else ("d", "a")):
                tree.cold()
                before = _reads(tree.dev)
                seconds[k].append(timers[k]())
                requests[k].append(_reads(tree.dev) - before)
    assert statistics.median(seconds["d"]) < statistics.median(seconds["a"]), (seconds, requests)
