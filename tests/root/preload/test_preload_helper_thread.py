"""The compiled data pass's second thread (issue #30): where it sends the WILLNEEDs, a cold replay of real files
still brings every one of them into the page cache, refuses what its checks refuse, and `-v` says the thread was
used. Forced on here (`_willneed_helper`): whether a CPU is idle for it depends on the machine's load."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.preload_helpers import evict, fincore, make_files, replay_resident, tunectl
from tunectl.preload import replay as replay_module

pytestmark = pytest.mark.root

SAID = "WILLNEED sent from a second thread while the next files are checked; data pass compiled"


@pytest.fixture(autouse=True)
def compiled() -> None:
    assert replay_module._datapass is not None, "the compiled data pass is not built (setup.py build_ext --inplace)"


def test_a_cold_replay_through_the_helper_thread_reads_every_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """600 files in 12 directories (more than one 256-file step of the compiled pass, and its 16 handed over at
    once many times over), a few larger than a page, made cold: all resident after the replay waited for its
    reads, none left open."""
    monkeypatch.setattr(replay_module, "_willneed_helper", lambda: True)
    files = make_files(tmp_path / "tree", {f"d{n // 50:02}/f{n:03}": 100 + 37 * n for n in range(600)})
    lst = tmp_path / "tree.list"
    assert tunectl("preload", "collect", str(tmp_path / "tree"), "-o", str(lst)).code == 0
    evict(*files)
    assert sum(fincore(*files).values()) == 0, "the files did not go cold: the test would mean nothing"
    before = sorted(os.listdir("/proc/self/fd"))
    r, resident = replay_resident(lst, *files)
    assert r.code == 0 and r.doc["files"] == len(files) and r.doc["skipped"] == [], r.out + r.err
    assert all(resident[str(p)] >= p.stat().st_size for p in files), \
        [p.name for p in files if resident[str(p)] < p.stat().st_size][:10]
    assert sorted(os.listdir("/proc/self/fd")) == before
    said = tunectl("preload", "replay", str(lst), "-v")
    assert any(line.startswith("method on ") and line.endswith(SAID) for line in said.out.splitlines()), said.out


def test_through_the_helper_thread_a_device_node_swapped_in_is_refused_unopened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listed file replaced by a device node after collect: refused as changed, every other file read."""
    monkeypatch.setattr(replay_module, "_willneed_helper", lambda: True)
    files = make_files(tmp_path / "tree", {f"f{n:03}": 5000 for n in range(300)})
    lst = tmp_path / "tree.list"
    assert tunectl("preload", "collect", str(tmp_path / "tree"), "-o", str(lst)).code == 0
    node = files[150]
    node.unlink()
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's: harmless were it opened
    rest = [p for p in files if p != node]
    evict(*rest)
    r, resident = replay_resident(lst, *rest)
    assert r.code == 0, r.out + r.err
    assert [(s["path"], s["status"]) for s in r.doc["skipped"]] == [(str(node), "changed")], r.doc["skipped"]
    assert r.doc["files"] == len(rest)
    assert all(resident[str(p)] >= p.stat().st_size for p in rest)
