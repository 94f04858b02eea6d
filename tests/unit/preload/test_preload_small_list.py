"""The replay's small-list path (#30's fixed cost): a list of at most SMALL_LIST files is stat'd one by one from the
calling thread while the stats answer from a cache (no io_uring, no ctypes), many at once above it or as soon as a
window of stats waits for the disk; both paths give the same verdicts on the same odd cases."""

from __future__ import annotations

import errno
import io
import os
import re
from pathlib import Path

import pytest

from tests.preload_helpers import make_files, tunectl
from tunectl.output import Progress
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import read_list
from tunectl.preload.replay import SMALL_LIST, Stack, replay
from tunectl.system import trust
from tunectl.system.sysfs import Sysfs
from tunectl.system.trust import ListedOpener


@pytest.fixture
def rotational(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every disk says it is rotational: the inode pass runs (whatever disk CI's temporary directory is on)."""
    monkeypatch.setattr(replay_module, "read_stack", lambda sysfs, device: Stack(device, True, 64, 128 << 10, None))


def odd_tree(root: Path, files: int) -> tuple[list[Path], Path]:
    """`files` small files (some in a subdirectory) and a victim file outside the list."""
    paths = make_files(root / "data", {f"{'sub/' if i % 3 == 0 else ''}f{i:03d}": 100 + i for i in range(files)})
    victim = root / "victim"
    victim.write_bytes(b"v" * 50)
    return paths, victim


def make_odd(paths: list[Path], victim: Path) -> None:
    """The odd cases, on the list's first files: grown, vanished, replaced (new inode, same size), a named pipe,
    a link to another file, a directory in their place, and the subdirectory swapped for a link to itself moved
    (a link on the way that this user owns: followed by the data pass's open, never by the inode pass)."""
    plain = sorted(p for p in paths if p.parent.name == "data")
    grown, gone, replaced, pipe, link, folder = plain[:6]
    with open(grown, "ab") as f:
        f.write(b"more")
    gone.unlink()
    fresh = replaced.with_name("fresh")
    fresh.write_bytes(b"x" * replaced.stat().st_size)  # made while the old one exists: a new inode for certain
    fresh.replace(replaced)
    pipe.unlink()
    os.mkfifo(pipe)
    link.unlink()
    link.symlink_to(victim)
    folder.unlink()
    folder.mkdir()
    sub = paths[0].parent
    assert sub.name == "sub"
    sub.rename(sub.with_name("sub.real"))
    sub.symlink_to(sub.with_name("sub.real"))


def verdicts(report: replay_module.ReplayReport, root: Path) -> list[tuple[str, str, str]]:
    """Each skip: its path under `root`, status and reason, the numbers in the reason (inodes) left out."""
    return sorted((os.path.relpath(s.path, root), s.status, re.sub(r"\d+", "N", s.reason)) for s in report.skipped)


def test_a_small_list_is_stated_one_by_one_and_one_file_more_many_at_once_with_the_same_verdicts(
        tmp_path: Path, rotational: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "FAST_STATS", 0)  # every window fast, whatever else the machine runs
    reports, roots = [], []
    for files in (SMALL_LIST, SMALL_LIST + 1):
        root = tmp_path / str(files)
        paths, victim = odd_tree(root, files)
        lst = root / "set.list"
        assert tunectl("preload", "collect", str(root / "data"), "-o", str(lst)).code == 0
        make_odd(paths, victim)
        monkeypatch.setattr(trust, "_syscall", None)  # as in a fresh process: ctypes not loaded yet
        reports.append(replay(Sysfs("/sys"), read_list(str(lst)), str(lst)))
        roots.append(root / "data")
    small, big = reports
    assert small.inode_pass == "one-by-one" and small.threads == 1, small.to_json()
    assert big.inode_pass in ("io_uring", "threads"), big.to_json()  # threads: where the kernel refuses io_uring
    (how,) = small.methods.values()
    assert f"small list ({SMALL_LIST} files, at most {SMALL_LIST}): inodes read one by one, answering from a cache" \
        in how, how
    (how,) = big.methods.values()
    assert "inodes read ahead, many at once" in how, how
    assert small.inode_pass_files == SMALL_LIST and big.inode_pass_files == SMALL_LIST + 1
    assert verdicts(small, roots[0]) == verdicts(big, roots[1])
    assert {status for _, status, _ in verdicts(small, roots[0])} == {"changed", "vanished"}, verdicts(small, roots[0])
    assert len(small.skipped) == 6  # the files through the linked subdirectory were read
    assert (small.files, big.files) == (SMALL_LIST - 6, SMALL_LIST + 1 - 6)
    asked = replay(Sysfs("/sys"), read_list(str(roots[0].parent / "set.list")), "", threads=4, use_io_uring=False)
    assert asked.inode_pass == "threads" and asked.threads == 4  # --threads asks for the stats many at once


def test_a_small_list_whose_stats_wait_for_the_disk_has_the_rest_stated_many_at_once(
        tmp_path: Path, rotational: None, monkeypatch: pytest.MonkeyPatch) -> None:
    paths, victim = odd_tree(tmp_path, 30)
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    make_odd(paths, victim)
    monkeypatch.setattr(replay_module, "FAST_STATS", 0)  # every window fast, whatever else the machine runs
    fast = replay(Sysfs("/sys"), read_list(str(lst)), str(lst))
    monkeypatch.setattr(replay_module, "WINDOW", 2)
    monkeypatch.setattr(replay_module, "FAST_STATS", 1e15)  # no two stats take under 2 fs: every window is slow
    counted = Progress(io.StringIO(), 2 * 30, "preload", enabled=False)
    slow = replay(Sysfs("/sys"), read_list(str(lst)), str(lst), progress=counted)
    assert fast.inode_pass == "one-by-one" and slow.inode_pass in ("io_uring", "threads"), slow.to_json()
    (how,) = slow.methods.values()
    assert "inodes read one by one until two windows of 2 in a row took over 0.0 ms each (the disk), then many at " \
        "once" in how, how
    # each file counted once a pass: the four stat'd one by one are not stat'd again, and the files under the linked
    # directory, left to the data pass, are counted by the inode pass too
    assert counted.done == 2 * 30
    assert slow.inode_pass_files == 30 and verdicts(slow, tmp_path) == verdicts(fast, tmp_path)
    assert slow.files == fast.files == 30 - 6


@pytest.mark.parametrize("case", ["directory", "a link", "under a link", "missing", "a file"])
def test_a_walked_directory_opens_as_openat2_opens_it(tmp_path: Path, case: str) -> None:
    """ListedOpener(walk=True) (the small-list path: no ctypes) gives what the openat2 one gives: a descriptor, -1
    for a directory with a link on its way (its files then opened one by one, following only root's or the user's
    links), or the same error."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    name = {"directory": "real", "a link": "link", "under a link": "link/inner", "missing": "gone",
            "a file": "real/f"}[case]
    (tmp_path / "real" / "inner").mkdir()
    seen = []
    for walk in (False, True):
        with ListedOpener(walk=walk) as opener:
            try:
                fd, _ = opener.directory(str(tmp_path / name))
            except OSError as e:
                seen.append(e.errno)
            else:
                seen.append(fd >= 0)
    expected = {"directory": True, "a link": False, "under a link": False, "missing": errno.ENOENT,
                "a file": errno.ENOTDIR}[case]
    assert seen == [expected, expected]


def test_a_walk_to_a_directory_that_is_a_link_says_eloop_as_openat2_does(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError) as raised:
        trust._walk_no_link(str(tmp_path / "link"), trust._PATH_DIR)
    assert raised.value.errno == errno.ELOOP and raised.value.filename == str(tmp_path / "link")


def test_a_large_lists_last_short_batch_does_not_take_the_small_list_path(tmp_path: Path, rotational: None) -> None:
    """The path is the list's: a surveyed list comes in batches of listfile.BATCH, its last one may be short (a list
    of 65,537 files ends with a batch of one). That batch took the path, and the report said so for the whole list
    ("one-by-one", one thread, "small list (1 files ...)"). Two batches of 299 and 1 stand for it here."""
    make_files(tmp_path / "data", {f"f{i:03d}": 100 for i in range(300)})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    entries = read_list(str(lst)).entries
    report = replay(Sysfs("/sys"), [entries[:299], entries[299:]], str(lst))
    assert report.inode_pass in ("io_uring", "threads") and report.files == 300, report.to_json()
    assert not any("small list" in how for how in report.methods.values()), report.methods
    one = replay(Sysfs("/sys"), [entries[:1]], str(lst))  # a whole list of one: the path, in the right words
    assert one.inode_pass == "one-by-one" and "small list (1 file, at most" in "".join(one.methods.values())


class Interrupted(Exception):
    """Raised in the ring's pass: a Ctrl-C (KeyboardInterrupt) there, without the test's own run interrupted."""


@pytest.mark.parametrize("small", [True, False], ids=["opened-at-the-switch", "opened-at-start"])
def test_a_ring_is_closed_when_the_pass_raises_in_it(tmp_path: Path, rotational: None,
                                                      monkeypatch: pytest.MonkeyPatch, small: bool) -> None:
    # the small-list path opens its ring part way, when two windows waited for the disk; the pass closed it only
    # once _stat_run had returned it, so an exception in the ring's pass (a Ctrl-C in statx_all) left its descriptor
    # and kernel workers open until the process exited
    paths, victim = odd_tree(tmp_path, 30)
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    monkeypatch.setattr(replay_module, "WINDOW", 2)
    monkeypatch.setattr(replay_module, "FAST_STATS", 1e15)  # every window slow: the rest go to the ring
    if not small:
        monkeypatch.setattr(replay_module, "SMALL_LIST", 0)

    class Ring:
        opened: list[Ring] = []

        def __init__(self) -> None:
            self.closed = 0
            Ring.opened.append(self)

        def close(self) -> None:
            self.closed += 1

    def from_ring(self, ring, by_inode, names, fds) -> None:  # noqa: ANN001
        raise Interrupted

    monkeypatch.setattr(replay_module._Checker, "_ring", staticmethod(lambda parallel: Ring()))
    monkeypatch.setattr(replay_module._Checker, "_from_ring", from_ring)
    with pytest.raises(Interrupted):
        replay(Sysfs("/sys"), read_list(str(lst)), str(lst))
    assert [r.closed for r in Ring.opened] == [1], [r.closed for r in Ring.opened]
