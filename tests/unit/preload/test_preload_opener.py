"""Issue #30 (never slower than WILLNEED): each directory resolved once, files checked as they are opened.

The replay opens tens of thousands of files; ListedOpener resolves each directory
once (openat2, no links) and opens the files relative to it. The safety of #34
must hold: nothing swapped into a path after the directory was resolved is
followed, and without an inode pass a name is looked at before it is opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from tests.preload_helpers import make_files, tunectl
from tunectl.preload import listfile, order
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import read_list
from tunectl.preload.listing import Entry, ListError, render
from tunectl.preload.replay import Stack, replay
from tunectl.system import trust
from tunectl.system.sysfs import Sysfs
from tunectl.system.trust import ListedOpener, Untrusted


def test_a_directory_swapped_for_a_link_after_it_was_resolved_is_not_followed(tmp_path: Path) -> None:
    real, trap = tmp_path / "real", tmp_path / "trap"
    real.mkdir()
    trap.mkdir()
    (real / "f1").write_bytes(b"real1")
    (real / "f2").write_bytes(b"real2")
    (trap / "f2").write_bytes(b"trap2")
    with ListedOpener() as opener:
        fd = opener.open(str(real / "f1"))
        os.close(fd)
        real.rename(tmp_path / "moved")
        real.symlink_to(trap)  # the name now leads elsewhere; the directory resolved before is kept
        fd = opener.open(str(real / "f2"))
        try:
            assert os.read(fd, 10) == b"real2"
        finally:
            os.close(fd)


def test_a_path_through_a_linked_directory_opens_as_show_opens_it_not_vanished(tmp_path: Path) -> None:
    """replay (ListedOpener) and show (open_listed) agree on a hand-made list whose path goes through a link to
    a directory the user owns: both open the file (replay said "vanished: Not a directory", show "resident")."""
    from tunectl.system.trust import open_listed

    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "f1").write_bytes(b"data1")
    (tmp_path / "tlink").symlink_to(tmp_path / "tree")
    path = str(tmp_path / "tlink" / "f1")
    for checked in (True, False):
        with ListedOpener() as opener:
            fds = [opener.open(path, checked), open_listed(path, checked=checked)]
        try:
            assert [os.read(fd, 10) for fd in fds] == [b"data1", b"data1"]
        finally:
            for fd in fds:
                os.close(fd)


def as_nodev(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file system says it is mounted nodev (no device node on it can be opened); the compiled data pass, which
    asks the kernel itself, leaves its directories to ListedOpener, which asks os.fstatvfs."""
    real = os.fstatvfs
    monkeypatch.setattr(replay_module, "DIRECTORIES_COMPILED", False)

    class Flags:
        def __init__(self, fd: int) -> None:
            self.f_flag = real(fd).f_flag | os.ST_NODEV

    monkeypatch.setattr(os, "fstatvfs", Flags)


def test_the_last_component_is_never_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with ListedOpener() as opener:
        with pytest.raises(OSError) as raised:
            opener.open(str(tmp_path / "link"))
        assert raised.value.errno == errno.ELOOP
        with pytest.raises(Untrusted, match="a symbolic link"):
            opener.open(str(tmp_path / "link"), checked=False)
    as_nodev(monkeypatch)
    with ListedOpener() as opener, pytest.raises(OSError) as raised:  # no look there: opened O_NOFOLLOW, refused
        opener.open(str(tmp_path / "link"), checked=False)
    assert raised.value.errno == errno.ELOOP
    os.chmod(tmp_path, 0o775)
    with ListedOpener() as opener, pytest.raises(Untrusted, match="a symbolic link"):
        opener.open(str(tmp_path / "link"), checked=False)


def spied_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names os.open, or openat2 (trust._openat2: a name opened without a look), is asked to open from now on."""
    opened: list[str] = []
    real_open, real_openat2 = os.open, trust._openat2

    def spy(path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    def spy_openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:
        opened.append(rel)
        return real_openat2(dir_fd, rel, flags, resolve)

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(trust, "_openat2", spy_openat2)
    monkeypatch.setattr(replay_module, "_datapass", None)  # the Python loop: the compiled one's opens are not seen
    return opened


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777], ids=["group-writable", "world-writable", "sticky-like-tmp"])
def test_unchecked_a_named_pipe_is_refused_before_it_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              mode: int) -> None:
    """In a directory another user may write, a name not checked is looked at first: a named pipe (or a device
    node) swapped in by that user is never opened."""
    os.mkfifo(tmp_path / "pipe")
    os.chmod(tmp_path, mode)
    opened = spied_opens(monkeypatch)
    with ListedOpener() as opener, pytest.raises(Untrusted, match="a named pipe, not a regular file"):
        opener.open(str(tmp_path / "pipe"), checked=False)
    assert "pipe" not in opened


def test_on_an_unnamed_device_the_look_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """tmpfs (like devtmpfs, /proc, /sys) has major 0: even a directory only this user writes keeps the look."""
    if not os.path.isdir("/dev/shm") or os.major(os.stat("/dev/shm").st_dev) != 0:
        pytest.skip("no tmpfs at /dev/shm")
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        os.mkfifo(os.path.join(d, "pipe"))
        opened = spied_opens(monkeypatch)
        with ListedOpener() as opener, pytest.raises(Untrusted, match="a named pipe, not a regular file"):
            opener.open(os.path.join(d, "pipe"), checked=False)
        assert "pipe" not in opened


def _swapped_in(tmp_path: Path, mode: int, monkeypatch: pytest.MonkeyPatch, node: str = "pipe"
                ) -> tuple[int, int, list, list[str]]:
    """A listed regular file replaced by a named pipe (or a character device like /dev/null) after the list was
    read; the data pass over it, its name not checked (as a streamed list has it): (files, bytes, skips, names
    opened)."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    entry = Entry(str(path), dev, st.st_ino, 100, st.st_mtime_ns, ((0, 100),), None)
    path.unlink()
    if node == "pipe":
        os.mkfifo(path)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a device node takes root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(tmp_path, mode)
    opened = spied_opens(monkeypatch)
    skipped: list = []
    with ListedOpener() as opener:
        files, issued, stopped = replay_module._issue_with(opener, [entry], [0], bytearray([2]), {dev: 1 << 20},
                                                           {dev: st.st_dev}, None, skipped, None)
    assert not stopped
    return files, issued, skipped, opened


NODES = {"pipe": "a named pipe", "device": "a character device"}


@pytest.mark.parametrize("node", NODES)
def test_a_node_swapped_in_where_others_write_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              node: str) -> None:
    files, issued, skipped, opened = _swapped_in(tmp_path, 0o775, monkeypatch, node)
    assert (files, issued) == (0, 0) and "f" not in opened
    assert [(s.status, s.reason) for s in skipped] == [("changed", f"now {NODES[node]}, not a regular file")]


@pytest.mark.parametrize("node", NODES)
def test_a_node_where_devices_open_is_never_opened_even_if_only_root_writes(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           node: str) -> None:
    """uid 0 is not one principal (a container's root writes a shared volume as uid 0 and may make device nodes):
    on a mount that allows devices the look stays in every directory."""
    if os.statvfs(tmp_path).f_flag & os.ST_NODEV:
        pytest.skip("the test directory is mounted nodev")
    files, issued, skipped, opened = _swapped_in(tmp_path, 0o755, monkeypatch, node)
    assert (files, issued) == (0, 0) and "f" not in opened
    assert [(s.status, s.reason) for s in skipped] == [("changed", f"now {NODES[node]}, not a regular file")]


def test_a_pipe_on_a_nodev_mount_only_root_writes_is_refused_by_the_fstat(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No look where no device can open and no other user can have put a named pipe: opened without blocking,
    judged by fstat, never read."""
    as_nodev(monkeypatch)
    files, issued, skipped, opened = _swapped_in(tmp_path, 0o755, monkeypatch)
    assert (files, issued) == (0, 0) and "f" in opened
    assert [(s.status, s.reason) for s in skipped] == [("changed", "now a named pipe, not a regular file")]


def test_a_device_on_a_nodev_mount_is_said_changed_not_unreadable(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """On a nodev mount the kernel refuses a device node's open (EACCES) before its driver sees it; the replay then
    looks, and says "changed" as the look before the open would have, not "unreadable" (exit 0, not partial)."""
    as_nodev(monkeypatch)
    real_open = os.open

    def nodev_open(path, flags, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if path == "f":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args, **kwargs)

    real_openat2 = trust._openat2

    def nodev_openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:  # the open without a look
        if rel == "f":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), rel)
        return real_openat2(dir_fd, rel, flags, resolve)

    monkeypatch.setattr(os, "open", nodev_open)
    monkeypatch.setattr(trust, "_openat2", nodev_openat2)
    files, issued, skipped, _ = _swapped_in(tmp_path, 0o755, monkeypatch, "device")
    assert (files, issued) == (0, 0)
    assert [(s.status, s.reason) for s in skipped] == [("changed", "now a character device, not a regular file")]


def mounted_over(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """openat2 as the kernel answers it for `name` when something is mounted on it: EXDEV with RESOLVE_NO_XDEV, the
    mounted file opened without (here the file itself: the test sees whether it would have been); the resolve bits
    of each open of `name` (the real mount is tests/root/preload/test_preload_mounted_over.py's)."""
    real_openat2, asked = trust._openat2, []

    def openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:
        if rel == name:
            asked.append(resolve)
            if resolve & trust._RESOLVE_NO_XDEV:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), rel)
        return real_openat2(dir_fd, rel, flags, resolve)

    monkeypatch.setattr(trust, "_openat2", openat2)
    return asked


@pytest.mark.parametrize("checked", [2, 1], ids=["not-checked", "checked-by-the-inode-pass"])
def test_on_a_nodev_mount_a_name_mounted_over_is_refused_unopened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  checked: int) -> None:
    """Where names are opened without a look (nodev, chosen by no other), the open crosses no mount on the name: a
    device node bind-mounted there from a mount that allows devices would open. Refused (EXDEV), said "mounted
    over", changed (exit 0), never read; by the Python loop and by ListedOpener.open alike."""
    as_nodev(monkeypatch)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    entry = Entry(str(path), dev, st.st_ino, 100, st.st_mtime_ns, ((0, 100),), None)
    monkeypatch.setattr(replay_module, "_datapass", None)
    asked = mounted_over(monkeypatch, "f")
    skipped: list = []
    with ListedOpener() as opener:
        files, issued, stopped = replay_module._issue_with(opener, [entry], [0], bytearray([checked]),
                                                           {dev: 1 << 20}, {dev: st.st_dev}, None, skipped, None)
    assert (files, issued, stopped) == (0, 0, False) and asked == [trust._RESOLVE_NO_XDEV]
    assert [(s.status, s.reason) for s in skipped] == [("changed", replay_module.MOUNTED_OVER)]
    assert "mounted over" in replay_module.MOUNTED_OVER
    with ListedOpener() as opener, pytest.raises(OSError) as raised:
        opener.open(str(path), checked=checked == 1)
    assert raised.value.errno == errno.EXDEV and raised.value.filename == str(path)


def test_a_name_with_a_nul_is_refused_as_os_open_refuses_it(tmp_path: Path) -> None:
    """openat2 takes a C string: a name cut at its NUL would open another file (here `a`)."""
    (tmp_path / "a").write_bytes(b"x")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        for opening in (lambda name: os.open(name, os.O_RDONLY, dir_fd=fd),
                        lambda name: trust.open_unlooked(fd, name, str(tmp_path / name))):
            with pytest.raises(ValueError, match="embedded null byte"):
                opening("a\0b")
    finally:
        os.close(fd)


def test_without_openat2_a_name_on_a_nodev_mount_is_looked_at_first(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Before Linux 5.6 no open refuses a mount on the name: the look comes back (a named pipe is refused unopened,
    as in any directory), and the directories decided after it keep it."""
    as_nodev(monkeypatch)
    monkeypatch.setattr(trust, "_openat2_missing", False)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "f").write_bytes(b"x")
    with ListedOpener(walk=True) as opener:  # (the walk: the one way a directory is kept without openat2)
        assert opener.directory(str(tmp_path))[1] is False
        opened = spied_opens(monkeypatch)

        def no_openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), rel)

        monkeypatch.setattr(trust, "_openat2", no_openat2)
        with pytest.raises(Untrusted, match="a named pipe, not a regular file"):
            opener.open(str(tmp_path / "pipe"), checked=True)
        assert "pipe" not in opened and trust._openat2_missing
        os.close(opener.open(str(tmp_path / "f"), checked=True))
        assert opened == ["f"]
        assert opener.directory(str(tmp_path / ".."))[1] is True


def test_the_inode_pass_runs_only_ahead_of_disk_order() -> None:
    assert order.inode_pass("physical") and order.inode_pass("time-bins")
    assert not order.inode_pass("list")


@pytest.fixture
def flash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every disk says it is non-rotational."""
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, device: Stack(device, False, 64, 128 << 10, None))


def test_on_flash_there_is_no_inode_pass_and_each_file_is_checked_at_open(tmp_path: Path, flash: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_files(tmp_path / "data", {"a": 100, "b": 5000, "c": 70000, "d/e": 3, "d/f": 4096})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    monkeypatch.setattr(replay_module._Checker, "run", lambda *a, **k: pytest.fail("no inode pass on flash"))
    by_name = {p.name: p for p in files}
    by_name["b"].write_bytes(b"y" * 6000)  # size changed
    by_name["e"].unlink()
    os.mkfifo(by_name["e"])  # a pipe where a file was
    by_name["f"].unlink()  # gone
    report = replay(Sysfs("/sys"), read_list(str(lst)), str(lst))
    assert report.inode_pass == "none" and report.order == "list"
    assert all(how.startswith("list (non-rotational") and "inodes read at open" in how
               for how in report.methods.values()), report.methods
    reasons = {Path(s.path).name: (s.status, s.reason) for s in report.skipped}
    assert reasons == {"b": ("changed", "size 5000 -> 6000"), "e": ("changed", "now a named pipe, not a regular file"),
                       "f": ("vanished", os.strerror(errno.ENOENT))}, reasons
    assert report.files == 2 and report.bytes == 100 + 70000


@pytest.mark.parametrize("fast", [True, False])
def test_the_inode_pass_stops_after_its_sample_when_the_inodes_answer_from_a_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    files = make_files(tmp_path / "data", {f"f{i}": 1000 + i for i in range(6)})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    monkeypatch.setattr(replay_module, "read_stack", lambda sysfs, device: Stack(device, True, 64, 128 << 10, None))
    monkeypatch.setattr(replay_module, "SAMPLE", 2)
    monkeypatch.setattr(replay_module, "SMALL_LIST", 0)  # the sample is the path above the small-list one
    monkeypatch.setattr(replay_module, "FAST_STATS", 0 if fast else float("inf"))
    plist = read_list(str(lst))
    last = sorted(plist.entries, key=lambda e: e.inode)[-1]  # judged by the pass only when it runs to the end
    os.mkfifo(tmp_path / "pipe")  # made while the file still holds its inode: never the same number
    os.replace(tmp_path / "pipe", last.path)
    report = replay(Sysfs("/sys"), plist, str(lst))
    # threads: the documented fallback where io_uring is refused (seccomp, kernel.io_uring_disabled); the sample and
    # its stop are the same in both
    assert report.inode_pass in ("io_uring", "threads") and report.inode_pass_files == (2 if fast else 6), report
    (how,) = report.methods.values()
    assert ("inode pass stopped after 2 files" in how) == fast, how
    (skip,) = report.skipped  # the pipe is never opened either way: judged by the pass, or looked at first
    assert skip.path == last.path and skip.status == "changed", skip
    assert skip.reason == "now a named pipe, not a regular file", skip  # what it is, not its inode or size
    assert report.files == 5 and {Path(p) for p in (e.path for e in plist.entries)} == set(files)


@pytest.mark.parametrize("chunk", [64, 1000, 4 << 20])
def test_a_list_read_in_chunks_gives_every_entry_and_names_the_bad_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      chunk: int) -> None:
    monkeypatch.setattr(listfile, "CHUNK", chunk)
    entries = [Entry(f"/d/f{i}", "8:1", 100 + i, 10 + i, 7, ((0, 10 + i),), None) for i in range(50)]
    text = render(entries, "2026-11-26T00:00:00Z", time_order=True).split("\n")
    text.insert(20, "   ")  # a blank line: left out, the numbers after it still the file's
    good = tmp_path / "good.list"
    good.write_text("\n".join(text).rstrip("\n"))  # no newline after the last entry
    got = [e for _, batch in listfile.batches(str(good), size=7) for e in batch]
    assert got == entries
    assert [len(b) for _, b in listfile.batches(str(good), size=7)] == [7] * 7 + [1]
    text[45] = text[45].replace('"8:1"', '"8:x"')  # line 46 of the file
    bad = tmp_path / "bad.list"
    bad.write_text("\n".join(text))
    with pytest.raises(ListError, match=rf"^{bad}:46: device"):
        list(listfile.batches(str(bad), size=7))
    text[45] = text[45].replace('"8:x"', '"8:1"').encode().decode() + "\udcff"
    bad.write_bytes("\n".join(text).encode("utf-8", "surrogateescape"))
    with pytest.raises(ListError, match=rf"^{bad}:46: not UTF-8"):
        list(listfile.batches(str(bad), size=7))


@pytest.mark.parametrize("disk_read", [False, True, None], ids=["disk-read-nothing", "disk-read", "reads-unknown"])
def test_a_slow_sample_while_the_disk_read_nothing_still_stops_the_inode_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk_read: bool | None) -> None:
    """#30: the sample's rate is a wall clock, slowed by a loaded CPU as much as by a disk. Below FAST_STATS, the
    inode tables still answered from a cache when the list's disk completed no read while the sample ran: the pass
    stops after it. A disk that read meanwhile, or whose count is unknown (None), leaves the rate to decide: every
    inode is read first."""
    make_files(tmp_path / "data", {f"f{i}": 1000 + i for i in range(6)})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, device: Stack(device, True, 64, 128 << 10, "block/model/stat"))
    asked: list[str | None] = []
    monkeypatch.setattr(replay_module, "_completed_reads",
                        lambda sysfs, stat_file: (asked.append(stat_file),
                                                  None if disk_read is None else 1000 + (len(asked) if disk_read else 0))[1])
    monkeypatch.setattr(replay_module, "SAMPLE", 2)
    monkeypatch.setattr(replay_module, "SMALL_LIST", 0)
    monkeypatch.setattr(replay_module, "FAST_STATS", float("inf"))  # the rate alone says: the disk seeks
    report = replay(Sysfs("/sys"), read_list(str(lst)), str(lst))
    assert report.files == 6 and set(asked) == {"block/model/stat"}
    assert report.inode_pass_files == (2 if disk_read is False else 6), report
    (how,) = report.methods.values()
    assert ("no read of the disk meanwhile: the inode tables answer from a cache" in how) == (disk_read is False), how
