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
from tests.preload_helpers import GOOD_HEADER, tunectl
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


def in_directory_order(lst: Path) -> Path:
    """The entries of `lst` listed again in directory order (d000/f0, d000/f1, d001/f0, ...), beside it.

    A flash replay reads in the list's own order, and collect lists the fixture's files in the order the file
    system placed them: by physical offset, and those not written back yet (all of them, just written) after
    that by inode number. Inode numbers are not handed out in the order the files are made where other files
    were deleted before (ext4 fills the numbers they freed): in 5 of 15 fixtures built on a busy ext4 the list
    had d095/f1 before d095/f0, or d001/f0 after d085/f1. So the files read before the (n+1)th directory
    varied from run to run (8 or 9 for 10); in this list they do not."""
    entries = sorted(read_list(str(lst)).entries, key=lambda e: e.path)
    ordered = lst.with_name("by-directory.list")
    ordered.write_text(GOOD_HEADER + "\n" + "".join(json.dumps(e.to_row()) + "\n" for e in entries))
    return ordered


def test_in_directory_order_lists_every_file_of_each_directory_together(many_dirs: Path) -> None:
    paths = [e.path for e in read_list(str(in_directory_order(many_dirs))).entries]
    data = str(many_dirs.parent / "data")
    assert paths == [f"{data}/d{d:03}/f{f}" for d in range(DIRS) for f in range(2)]


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
    # the directories opened by ListedOpener, where the fault is put (the compiled pass's own opens meet a real
    # limit in tests/unit/preload/test_preload_datapass.py)
    monkeypatch.setattr(replay_module, "DIRECTORIES_COMPILED", False)
    listed = many_dirs if disk else in_directory_order(many_dirs)  # on flash the list's order is the read order
    r = tunectl("preload", "replay", str(listed), "--json")
    assert r.code == 4, r.err  # not permitted one more descriptor: no partial result a unit may take for success
    error = r.doc["error"]
    assert error["code"] == "out-of-descriptors" and error["exit_code"] == 4
    limit = os.sysconf("SC_OPEN_MAX")
    assert f": this process may have at most {limit} files open (ulimit -n); the replay stopped" in error["message"]
    assert error["hint"] == "raise the limit (ulimit -n 1024; LimitNOFILE= for a unit) and replay again"
    assert "unreadable" not in r.err
    if after == 0 or disk:  # the inode pass stops before any read
        assert error["message"].endswith("; no file of the list was read"), error["message"]
    else:  # the data pass had sent the files of the directories it could open: two in each
        assert f"; before it, {2 * after} files (" in error["message"], error["message"]
    with pytest.raises(OutOfDescriptors):
        replay(Sysfs("/sys"), read_list(str(listed)), str(listed))


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


@pytest.mark.parametrize("files", [False, True], ids=["listing", "files"])
def test_a_collect_out_of_descriptors_stops_and_writes_no_list(tmp_path: Path, files: bool) -> None:
    """Past ~26 levels under `ulimit -n 32` a directory could not be listed (EMFILE) and was passed over in
    silence, or a file was called "unreadable: Too many open files", and the list was written as if complete
    (exit 0). Now collect stops with an error naming the limit and where, exit 4, and writes no list (an older
    list stays as it was). Without files the listing of the deepest directory opened is what fails (listing a
    directory by descriptor takes one more: scandir works on a copy of it); `files`: a file at every level, whose
    open is the one that fails."""
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
    assert r.code == 4, (r.code, r.err)
    error = r.doc["error"]
    assert error["code"] == "out-of-descriptors" and error["exit_code"] == 4
    where = error["message"].split(": ")[0]
    assert where.startswith(f"out of file descriptors at {top}/d0/d1/d2/"), error["message"]
    assert where.endswith("/f") == files, error["message"]
    assert error["message"].endswith(": this process may have at most 32 files open (ulimit -n); stopped part "
                                     "way, no list written"), error["message"]
    assert error["hint"] == "raise the limit (ulimit -n 1024; LimitNOFILE= for a unit) and run it again"
    assert lst.read_text() == "an older list\n" and "unreadable" not in r.err
    r = run_process("preload", "collect", str(top), "-o", str(lst), "--json")  # the default limit: all of it
    assert r.code == 0 and r.doc["files"] == (DEEP + 1 if files else 1), r.err


def test_a_collect_that_cannot_open_a_subdirectory_for_want_of_a_descriptor_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real limit always stops the listing first (it takes one descriptor more than the open of the next
    subdirectory): here the open of the fourth level's subdirectory itself fails with EMFILE, as it does when
    another thread of the process took the last descriptor in between. It stops collect, exit 4, no list written;
    before, that subtree was passed over in silence."""
    top = d = tmp_path / "deep"
    for i in range(6):
        d = d / f"d{i}"
    d.mkdir(parents=True)
    (d / "last").write_text("bottom")
    real, opened = trust.open_as_looked, []

    def open_as_looked(parent: int, name: str, *args: object) -> int | None:
        if name == "d4":
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), name)
        opened.append(name)
        return real(parent, name, *args)

    monkeypatch.setattr(trust, "open_as_looked", open_as_looked)
    lst = tmp_path / "deep.list"
    r = tunectl("preload", "collect", str(top), "-o", str(lst), "--json")
    assert r.code == 4, (r.code, r.err)
    error = r.doc["error"]
    assert error["code"] == "out-of-descriptors" and opened[-4:] == ["d0", "d1", "d2", "d3"], (error, opened)
    assert error["message"].startswith(f"out of file descriptors at {top}/d0/d1/d2/d3/d4: "), error["message"]
    assert not lst.exists()
