"""The metadata pass on a real ext4 on a loop device: collect records the device pages that hold the
inodes, directories and extent blocks; replay brings them back (counted with mincore on the device)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import check_documents, run_process
from tests.loopdev import remount_cold
from tests.preload_helpers import GOOD_HEADER, tunectl
from tunectl.preload import order
from tunectl.system import pagecache

pytestmark = pytest.mark.root


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def ext4_tree(tmp_path: Path):
    """(loop device, its MAJ:MIN, mount point) of a fresh ext4 with 300 files in 30 directories."""
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(128 << 20)
    _run("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    dev = _run("losetup", "-f", "--show", str(image)).strip()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        _run("mount", "-t", "ext4", dev, str(mnt))
        try:
            for d in range(30):
                (mnt / f"d{d}").mkdir()
                for i in range(10):
                    (mnt / f"d{d}" / f"f{i}").write_bytes(os.urandom(3000 + 100 * i))
            remount_cold(dev, mnt, "-t", "ext4")
            st = os.stat(dev)
            yield dev, f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}", mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)


def _cached(dev: str, devnum: str, ranges: list[tuple[int, int]]) -> float:
    """The share of `ranges` of the device in its page cache now (cachestat: every page present)."""
    fd = pagecache.open_block_device(dev, devnum)
    try:
        cached = pagecache.device_cached_ranges(fd, os.lseek(fd, 0, os.SEEK_END))
    finally:
        os.close(fd)
    assert cached is not None, "this kernel has no cachestat (Linux 6.5)"
    return order.overlap_bytes(cached, ranges) / sum(n for _, n in ranges)


def _mincore(dev: str, devnum: str, ranges: list[tuple[int, int]]) -> float:
    """The share of `ranges` mincore reports resident (pages read as pages: uptodate)."""
    fd = pagecache.open_block_device(dev, devnum)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        cached, wanted = order.resident_bytes(pagecache.residency(fd, size), ranges, size)
    finally:
        os.close(fd)
    return cached / wanted


def _mincore_reaches(dev: str, devnum: str, ranges: list[tuple[int, int]], share: float) -> float:
    """_mincore once it reaches `share`, or what it is after 60 s (the reads WILLNEED started have finished; on a
    loaded machine they may take seconds, and the wait ends as soon as they are done)."""
    deadline = time.monotonic() + 60
    while (now := _mincore(dev, devnum, ranges)) < share and time.monotonic() < deadline:
        time.sleep(0.02)
    return now


def test_the_metadata_pass_brings_back_the_device_pages_collect_recorded(tmp_path: Path, ext4_tree) -> None:
    dev, devnum, mnt = ext4_tree
    lst = tmp_path / "tree.list"
    r = tunectl("--json", "preload", "collect", str(mnt), "-o", str(lst))
    assert r.code == 0, r.err
    doc = check_documents(r.out, r.code)[0]
    head = json.loads(lst.read_text().splitlines()[0])
    ranges = [tuple(x) for x in head["metadata"][devnum]]
    assert doc["metadata"][devnum]["bytes"] == sum(n for _, n in ranges) > 0
    # what the walk read: 30 directories and the inode table blocks of 330 inodes, at least
    assert sum(n for _, n in ranges) >= 31 * 4096
    assert _cached(dev, devnum, ranges) == 1.0  # recorded because they were cached

    remount_cold(dev, mnt, "-t", "ext4")
    before = _cached(dev, devnum, ranges)
    assert before < 0.5  # the superblock and group descriptors stay pinned by ext4
    # the metadata alone: a list of no files, so nothing but the metadata pass reads
    only = tmp_path / "meta-only.list"
    only.write_text(json.dumps({**json.loads(GOOD_HEADER), "metadata": head["metadata"]}) + "\n")
    r = tunectl("--json", "preload", "replay", "--settle-timeout", "10", str(only))  # its reads waited for
    assert r.code == 0, r.err
    meta = check_documents(r.out, r.code)[0]["metadata"]
    assert meta["devices"] == [devnum] and meta["bytes"] >= sum(n for _, n in ranges) and meta["requests"] >= 1
    assert _cached(dev, devnum, ranges) == 1.0
    # every page that was not cached was read as a page: mincore sees it (it does not see the pages ext4
    # pinned through buffer heads, which are cached but not "uptodate" as pages). WILLNEED only starts the
    # reads: a page still in flight is in the cache (cachestat counts it) but not yet uptodate (mincore does
    # not), so wait for the reads to complete, boundedly, rather than race them.
    assert _mincore_reaches(dev, devnum, ranges, 1.0 - before) >= 1.0 - before

    remount_cold(dev, mnt, "-t", "ext4")  # and --no-metadata leaves it out
    r = tunectl("--json", "preload", "replay", "--no-metadata", str(only))
    assert r.code == 0 and check_documents(r.out, r.code)[0]["metadata"] is None
    assert _cached(dev, devnum, ranges) < 0.5


def test_show_lists_the_metadata_and_its_residency(tmp_path: Path, ext4_tree) -> None:
    dev, devnum, mnt = ext4_tree
    lst = tmp_path / "tree.list"
    assert tunectl("preload", "collect", str(mnt), "-o", str(lst)).code == 0
    r = tunectl("preload", "show", str(lst))
    assert r.code == 0, r.err
    assert f"metadata on {devnum}:" in r.out and "resident (100.0%)" in r.out
    r = tunectl("--json", "preload", "show", "--stats", str(lst))
    doc = check_documents(r.out, r.code)[0]
    assert doc["metadata"][0]["device"] == devnum and doc["stats"]["metadata_bytes"] == doc["metadata"][0]["bytes"]
    assert doc["stats"]["floor"]["sequential_mb_s"] > 0  # measured with a direct read of the loop device


def test_on_a_disk_that_seeks_the_metadata_pass_is_waited_for_before_the_inode_pass(tmp_path: Path, ext4_tree) -> None:
    dev, devnum, mnt = ext4_tree
    lst = tmp_path / "tree.list"
    assert tunectl("preload", "collect", str(mnt), "-o", str(lst)).code == 0
    ranges = [tuple(x) for x in json.loads(lst.read_text().splitlines()[0])["metadata"][devnum]]
    rotational = Path(f"/sys/block/{os.path.basename(dev)}/queue/rotational")
    rotational.write_text("1")  # the loop now says it seeks: physical order, as on a hard disk
    remount_cold(dev, mnt, "-t", "ext4")
    before = _cached(dev, devnum, ranges)  # the pages ext4 keeps pinned (see the first test)
    # --settle-timeout 0: the replay does not wait for its reads at the end, so what is resident when it returns
    # is what the metadata pass itself waited for
    r = tunectl("--json", "preload", "replay", "--settle-timeout", "0", str(lst))
    doc = check_documents(r.out, r.code)[0]
    assert r.code == 0 and doc["files"] == 300 and not doc["skipped"], r.out + r.err
    assert doc["metadata"]["devices"] == [devnum], doc["metadata"]
    assert doc["methods"][devnum].startswith("physical (rotational"), doc["methods"]
    assert doc["inode_pass"] in ("io_uring", "threads"), doc  # the ranges may not hold every inode: it still runs
    assert _mincore(dev, devnum, ranges) >= 1.0 - before  # no polling: read before the replay went on


def test_a_replay_with_a_metadata_pass_imports_only_what_it_uses(tmp_path: Path, ext4_tree) -> None:
    """The lean start-up (tests/unit/preload/test_preload_fastpath.py) with what only root on ext4 has: the
    metadata pass (tunectl.preload.metadata, tunectl.system.pagecache): typing stays out."""
    dev, devnum, mnt = ext4_tree
    lst = tmp_path / "tree.list"
    assert tunectl("preload", "collect", str(mnt), "-o", str(lst)).code == 0
    Path(f"/sys/block/{os.path.basename(dev)}/queue/rotational").write_text("1")
    remount_cold(dev, mnt, "-t", "ext4")
    r = run_process("-q", "preload", "replay", str(lst), env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert r.code == 0, r.err
    loaded = {line.rsplit("|", 1)[1].strip() for line in r.err.splitlines() if line.startswith("import time:")}
    assert "tunectl.preload.metadata" in loaded  # the metadata pass did run
    assert not loaded & {"typing", "threading", "pathlib"}, loaded
