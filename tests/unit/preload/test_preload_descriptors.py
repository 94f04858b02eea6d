"""A replay out of file descriptors (`ulimit -n 64`): the process's problem, never a file's.

The inode pass kept up to 256 directories open and the data pass up to 512: under `ulimit -n 64` every open
after the limit failed with EMFILE and the file was reported "unreadable: Too many open files" (exit 3). Now
the directories kept are sized from the limit, let go when the process runs out all the same, and only an open
that still fails then stops the replay, with an error that says so.
"""

from __future__ import annotations

import errno
import json
import os
import resource
from pathlib import Path

import pytest

from tests.harness import run_process
from tests.preload_helpers import GOOD_HEADER, make_files, tunectl
from tunectl.errors import OutOfDescriptors
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import read_list
from tunectl.preload.replay import Stack, replay
from tunectl.system import trust
from tunectl.system.sysfs import Sysfs

DIRS = 300


@pytest.fixture
def many_dirs(tmp_path: Path) -> Path:
    """DIRS directories of two small files each, and their list."""
    for d in range(DIRS):
        (tmp_path / "data" / f"d{d:03}").mkdir(parents=True)
        for f in range(2):
            (tmp_path / "data" / f"d{d:03}" / f"f{f}").write_bytes(os.urandom(3000 + f))
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    return lst


@pytest.fixture(params=[True, False], ids=["rotational", "flash"])
def disk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every disk rotational (an inode pass, then the data pass) or flash (the data pass alone)."""
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, device: Stack(device, request.param, 64, 128 << 10, None))
    return request.param


def test_a_replay_under_ulimit_n_64_reads_every_file(many_dirs: Path) -> None:
    r = run_process("preload", "replay", str(many_dirs), "--json", prefix=["prlimit", "--nofile=64:64"])
    assert r.code == 0, r.err
    assert r.doc["files"] == 2 * DIRS and r.doc["skipped_by_status"] == {}, r.doc["skipped"][:3]


def test_out_of_descriptors_all_the_same_the_directories_kept_are_let_go(
        many_dirs: Path, disk: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit as the kernel enforces it, not sized for: every directory kept, until EMFILE says no more.
    monkeypatch.setattr(trust, "directories_to_keep", lambda most: most)
    plist = read_list(str(many_dirs))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
    try:
        report = replay(Sysfs("/sys"), plist, str(many_dirs), use_io_uring=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert report.files == 2 * DIRS and report.skipped == [], report.skipped[:3]


def files_before_directory(lst: Path, n: int) -> int:
    """How many files the data pass on flash reads before it needs the (n+1)th directory: it reads in the list's
    own order, which collect wrote in physical order, and that is the file system's choice. Writeback that ran
    while the fixture made its files (ext4 places a file when it writes it back; the ones not placed yet come last,
    by inode number) once put d004/f1 after d005/f0: 9 files read, not 2 * n = 10."""
    seen: set[str] = set()
    for read, entry in enumerate(read_list(str(lst)).entries):
        directory = entry.path.rpartition("/")[0]
        if directory not in seen and len(seen) == n:
            return read
        seen.add(directory)
    return len(seen)


def list_text(files: list[Path]) -> str:
    """A preload list of `files`, in that order."""
    rows = []
    for f in files:
        st = f.stat()
        rows.append([str(f), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino, st.st_size, st.st_mtime_ns,
                     [[0, st.st_size]], None])
    return GOOD_HEADER + "\n" + "\n".join(json.dumps(r) for r in rows) + "\n"


def test_files_before_directory_follows_the_lists_order(tmp_path: Path) -> None:
    """The count above on a list whose order interleaves two directories, as a layout can."""
    files = make_files(tmp_path / "data", {"a/f0": 10, "a/f1": 10, "b/f0": 10, "c/f0": 10})
    (tmp_path / "plain.list").write_text(list_text(files))
    assert files_before_directory(tmp_path / "plain.list", 2) == 3
    a0, a1, b0, c0 = files
    (tmp_path / "mixed.list").write_text(list_text([a0, b0, a1, c0]))
    assert files_before_directory(tmp_path / "mixed.list", 1) == 1
    assert files_before_directory(tmp_path / "mixed.list", 2) == 3


@pytest.mark.parametrize("after", [0, 5])
def test_a_replay_that_cannot_open_one_more_directory_stops_and_says_why(
        many_dirs: Path, disk: bool, monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Out of descriptors with nothing left to let go (here: every directory after the first `after`): the
    replay stops with an error that names the limit and what was read before it; no file is called unreadable."""
    real, opened = trust._openat2, []

    def openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
        if len(opened) >= after and "/data/d" in path:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
        fd = real(dir_fd, path, flags, resolve)
        opened.append(path) if "/data/d" in path else None
        return fd

    monkeypatch.setattr(trust, "_openat2", openat2)
    r = tunectl("preload", "replay", str(many_dirs), "--json")
    assert r.code == 3, r.err
    error = r.doc["error"]
    assert error["code"] == "out-of-descriptors" and error["exit_code"] == 3
    limit = os.sysconf("SC_OPEN_MAX")
    assert f": this process may have at most {limit} files open (ulimit -n); the replay stopped" in error["message"]
    assert error["hint"] == "raise the limit (ulimit -n 1024; LimitNOFILE= for a unit) and replay again"
    assert "unreadable" not in r.err
    if after == 0 or disk:  # the inode pass stops before any read
        assert error["message"].endswith("; no file of the list was read"), error["message"]
    else:  # the data pass had sent the files of the directories it could open
        before = files_before_directory(many_dirs, after)
        assert f"; before it, {before} files (" in error["message"], error["message"]
    with pytest.raises(OutOfDescriptors):
        replay(Sysfs("/sys"), read_list(str(many_dirs)), str(many_dirs))


def test_under_a_low_limit_the_inode_pass_lets_its_directories_go_one_before_its_opener_would(
        many_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inode pass holds its directories open while it judges a run of files, and ends the run one directory
    before its opener would let them go itself (closing the descriptors the run is judged through). Under a low
    `ulimit -n` the opener keeps fewer (a quarter of the limit): the run is cut one shorter still, not at the
    opener's own number."""
    held: list[tuple[int, int]] = []  # (directories open, the opener's cap) as the inode pass opens each one
    judging = []  # non-empty while the inode pass judges its files
    stat = replay_module._Checker._stat

    def judged(self, *args):  # noqa: ANN001, ANN202
        judging.append(True)
        try:
            return stat(self, *args)
        finally:
            judging.pop()

    class Counted(trust.ListedOpener):
        def directory(self, directory: str) -> tuple[int, bool]:
            found = super().directory(directory)
            if judging:
                held.append((len(self.dirs), self.keep))
            return found

    monkeypatch.setattr(replay_module._Checker, "_stat", judged)
    monkeypatch.setattr(replay_module, "ListedOpener", Counted)
    monkeypatch.setattr(replay_module, "read_stack", lambda sysfs, device: Stack(device, True, 64, 128 << 10, None))
    plist = read_list(str(many_dirs))
    limit = max(64, len(os.listdir("/proc/self/fd")) + 40)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        report = replay(Sysfs("/sys"), plist, str(many_dirs), use_io_uring=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert report.files == 2 * DIRS and report.skipped == [], report.skipped[:3]
    cap = limit // 4
    assert cap < replay_module.DIRS_AT_ONCE and {keep for _, keep in held} == {cap}, held[:3]
    assert len(held) > cap and max(n for n, _ in held) == cap - 1, held


DEEP = 40  # levels: collect holds a descriptor per level, more than `ulimit -n 32` allows


@pytest.mark.parametrize("files", [False, True], ids=["directories", "files"])
def test_a_collect_out_of_descriptors_stops_and_writes_no_list(tmp_path: Path, files: bool) -> None:
    """Past ~26 levels under `ulimit -n 32` a subdirectory could not be opened (EMFILE) and was passed over in
    silence, or a file was called "unreadable: Too many open files", and the list was written as if complete
    (exit 0). Now collect stops with an error naming the limit and where, exit 3, and writes no list (an older
    list stays as it was). `files`: a file at every level, whose open is the one that fails."""
    top = d = tmp_path / "deep"
    d.mkdir()
    for i in range(DEEP):
        if files:
            (d / "f").write_text(str(i))
        d = d / f"d{i}"
        d.mkdir()
    (d / "last").write_text("bottom")
    lst = tmp_path / "deep.list"
    lst.write_text("an older list\n")
    r = run_process("preload", "collect", str(top), "-o", str(lst), "--json", prefix=["prlimit", "--nofile=32:32"])
    assert r.code == 3, (r.code, r.err)
    error = r.doc["error"]
    assert error["code"] == "out-of-descriptors" and error["exit_code"] == 3
    where = error["message"].split(": ")[0]
    assert where.startswith(f"out of file descriptors at {top}/d0/d1/d2/"), error["message"]
    assert where.endswith("/f") == files, error["message"]
    assert error["message"].endswith(": this process may have at most 32 files open (ulimit -n); stopped part "
                                     "way, no list written"), error["message"]
    assert error["hint"] == "raise the limit (ulimit -n 1024; LimitNOFILE= for a unit) and run it again"
    assert lst.read_text() == "an older list\n" and "unreadable" not in r.err
    r = run_process("preload", "collect", str(top), "-o", str(lst), "--json")  # the default limit: all of it
    assert r.code == 0 and r.doc["files"] == (DEEP + 1 if files else 1), r.err
