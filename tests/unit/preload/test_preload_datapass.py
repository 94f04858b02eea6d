"""The data pass compiled (tunectl/preload/_datapass.c) and the Python loop give the same outcome, file for file.

The compiled pass reads only the files that pass every check; any other file it stops at and leaves to the Python
loop, which then decides and words it. Both run here over the same cases (clean files across the 256-file steps
where the pressure guard is asked, a changed file, a link or a named pipe or a device node swapped in, a file that
vanished, an unreadable one, a directory gone or reached through a link, a file read in chunks, names checked and
not, out of descriptors) and must give the same files, bytes and skips.
"""

from __future__ import annotations

import os
import resource
import stat
from pathlib import Path

import pytest

from tests.preload_helpers import need_datapass
from tunectl.errors import OutOfDescriptors
from tunectl.preload import columns
from tunectl.preload import replay as replay_module
from tunectl.preload.listing import Entry
from tunectl.preload.skip import Skip
from tunectl.system import trust
from tunectl.system.trust import ListedOpener

WINDOW = 64 << 10  # a file larger than this is read in chunks (the Python loop's own case)
COMPILED = replay_module._datapass


@pytest.fixture(autouse=True)
def built() -> None:
    """Not built: a failure in CI and under scripts/test, a skip (saying how to build it) elsewhere."""
    need_datapass(COMPILED, dict(os.environ))


def entry_of(path: Path, size: int | None = None) -> Entry:
    st = os.stat(path, follow_symlinks=False)
    size = st.st_size if size is None else size
    return Entry(str(path), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino, size, st.st_mtime_ns,
                 ((0, size),), None)


def data_pass(monkeypatch: pytest.MonkeyPatch, compiled: bool, entries: list[Entry], listed: bytes,
              order: list[int] | None = None) -> tuple[int, int, list[Skip]]:
    """One data pass over `entries` (in `order`, default the list's), compiled or the Python loop alone."""
    monkeypatch.setattr(replay_module, "_datapass", COMPILED if compiled else None)
    devices = {e.device for e in entries}
    devnums = {d: os.makedev(*map(int, d.split(":"))) for d in devices}
    skipped: list[Skip] = []
    with ListedOpener() as opener:
        files, issued, stopped = replay_module._issue_with(
            opener, entries, range(len(entries)) if order is None else order, bytearray(listed),
            dict.fromkeys(devices, WINDOW), devnums, None, skipped, None)
    assert not stopped
    return files, issued, skipped


def as_chunk(entries: list[Entry]) -> columns.Chunk:
    """`entries` as a replay of a list with columns takes them: a chunk of its columns, no entry made yet."""
    key = (1, 2, 3, 4)
    return columns.checked(columns.encode(entries, key), key).chunk(0, len(entries))


def both(monkeypatch: pytest.MonkeyPatch, entries: list[Entry], listed: bytes) -> tuple[int, int, list[Skip]]:
    """The outcome of both passes, asserted the same; the compiled one given the entries (a list decoded from
    JSON) and given the columns they were written to (`as_chunk`)."""
    compiled = data_pass(monkeypatch, True, entries, listed)
    assert compiled == data_pass(monkeypatch, False, entries, listed)
    assert compiled == data_pass(monkeypatch, True, as_chunk(entries), listed)  # type: ignore[arg-type]
    return compiled


@pytest.fixture
def tree(tmp_path: Path) -> tuple[list[Entry], bytes, dict[str, str]]:
    """600 listed files in 12 directories, then the odd cases made after the list: the entries, their marks
    (1: the inode pass found the listed file; 2: not looked at yet; 0: the inode pass skipped it) and what each
    odd one must give (status: reason)."""
    entries = []
    for n in range(600):
        d = tmp_path / f"d{n // 50:02}"
        d.mkdir(exist_ok=True)
        (d / f"f{n:03}").write_bytes(os.urandom(100 + n))
        entries.append(entry_of(d / f"f{n:03}"))
    big = tmp_path / "d00" / "big"
    big.write_bytes(os.urandom(3 * WINDOW + 5))
    entries.insert(10, entry_of(big))
    part = entries[20]._replace(ranges=((0, 50),))  # the list holds part of it: read in its range alone
    entries[20] = part
    entries[30] = entries[30]._replace(ranges=((0, 20), (40, 10)))  # two parts: read range by range
    expected = {}

    def odd(at: int, what: str, change) -> None:  # noqa: ANN001
        path = Path(entries[at].path)
        change(path)
        expected[str(path)] = what

    def replace(path: Path) -> None:  # another file renamed over it: its inode is another while both exist
        path.with_name("new").write_bytes(path.read_bytes())
        path.with_name("new").replace(path)

    odd(254, f"changed: size {entries[254].size} -> 3", lambda p: p.write_bytes(b"abc"))  # at the guard's step (position 255)
    odd(255, "changed: now a symbolic link", lambda p: (p.unlink(), p.symlink_to(entries[0].path)))
    odd(300, "changed: now a named pipe, not a regular file", lambda p: (p.unlink(), os.mkfifo(p)))
    odd(301, "vanished: No such file or directory", lambda p: p.unlink())
    odd(302, "changed: modified since the list was made (mtime differs)",
        lambda p: os.utime(p, ns=(1, 1)))
    odd(303, "changed: replaced since the inode pass (a regular file)", replace)
    if os.geteuid() == 0:
        odd(304, "changed: now a character device, not a regular file",
            lambda p: (p.unlink(), os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))))
    else:
        odd(304, "unreadable: Permission denied", lambda p: p.chmod(0))
    long_name = tmp_path / "d07" / ("x" * 300)  # no such name can be: unreadable at its look or its open
    entries.insert(400, entries[400]._replace(path=str(long_name)))
    expected[str(long_name)] = "unreadable: File name too long"
    gone = tmp_path / "gone" / "f"
    entries.insert(450, entries[450]._replace(path=str(gone)))
    expected[str(gone)] = "vanished: No such file or directory"
    (tmp_path / "linked").symlink_to(tmp_path / "d10")  # a directory reached through a link: open_listed's case
    entries.insert(520, entries[520]._replace(path=str(tmp_path / "linked" / Path(entries[520].path).name)))
    marks = bytearray(2 if n % 3 else 1 for n in range(len(entries)))
    marks[5] = 0  # the inode pass skipped it: not read
    marks[300] = marks[304] = 2  # not looked at yet: the look refuses the pipe and the device unopened
    marks[303] = 1  # the inode pass found it: opened without a look, refused by its fstat
    return entries, bytes(marks), expected


def test_the_compiled_pass_and_the_python_loop_read_and_skip_the_same(
        tree: tuple[list[Entry], bytes, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    entries, listed, expected = tree
    files, issued, skipped = both(monkeypatch, entries, listed)
    said = {s.path: f"{s.status}: {s.reason}" for s in skipped}
    assert said.keys() == expected.keys()
    for path, what in expected.items():
        assert said[path].startswith(what), (path, said[path])
    read = [e for n, e in enumerate(entries) if listed[n] and e.path not in expected]
    assert files == len(read) and issued == sum(length for e in read for _, length in e.ranges)


def test_under_a_nodev_mount_no_look_the_same(tree: tuple[list[Entry], bytes, dict[str, str]],
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the directory says no look (nodev, written by no other), names not checked are opened at once."""
    from tests.unit.preload.test_preload_opener import as_nodev

    as_nodev(monkeypatch)
    for d in tmp_path.iterdir():
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)
    entries, listed, _ = tree
    files, _, skipped = both(monkeypatch, entries, listed)
    assert files > 500 and skipped


def test_the_clean_files_are_read_by_the_compiled_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python loop reads only the files at its guard's steps (every 256th: positions 255 and 511)."""
    entries = []
    for n in range(600):
        (tmp_path / f"f{n:03}").write_bytes(b"x" * 10)
        entries.append(entry_of(tmp_path / f"f{n:03}"))
    calls = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *a: (calls.append(fd), real(fd, *a)))
    files, issued, skipped = data_pass(monkeypatch, True, entries, b"\2" * 600)
    assert (files, issued, skipped, len(calls)) == (600, 6000, [], 2)


def test_from_columns_an_entry_is_made_only_for_a_file_the_compiled_pass_stops_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#30: given a chunk of a list's columns, the compiled pass reads the columns themselves; the Python loop
    makes the Entry of only the files it takes: those at its guard's steps (positions 255 and 511) and a changed
    one (at 300), which it skips."""
    entries = []
    for n in range(600):
        (tmp_path / f"f{n:03}").write_bytes(b"x" * 10)
        entries.append(entry_of(tmp_path / f"f{n:03}"))
    (tmp_path / "f300").write_bytes(b"changed")
    made: list[int] = []
    entry = columns.Columns.entry
    monkeypatch.setattr(columns.Columns, "entry", lambda self, i, *a: (made.append(i), entry(self, i, *a))[1])
    files, issued, skipped = data_pass(monkeypatch, True, as_chunk(entries), b"\2" * 600)  # type: ignore[arg-type]
    assert (files, issued, [s.path for s in skipped]) == (599, 5990, [str(tmp_path / "f300")])
    assert made == [255, 300, 511]


def limit_leaving(free: int) -> int:
    """The soft RLIMIT_NOFILE under which exactly `free` descriptor numbers are unused. The limit bounds the
    numbers, not the count: a process whose earlier work left holes below its highest descriptor (a whole
    suite in one process does) has free numbers below any limit taken from the count of its descriptors."""
    number = 0
    while True:
        try:
            os.fstat(number)  # in use (fstat opens nothing, unlike a listing of /proc/self/fd)
        except OSError:
            if not free:
                return number
            free -= 1
        number += 1


def test_out_of_descriptors_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directories kept are let go and the file opened again, in both; with no descriptor at all, both stop
    having read the same files."""
    entries = []
    for n in range(300):
        d = tmp_path / f"d{n // 2:03}"
        d.mkdir(exist_ok=True)
        (d / "f").write_bytes(b"y" * (n + 1)) if n % 2 else (d / "g").write_bytes(b"y" * (n + 1))
        entries.append(entry_of(d / ("f" if n % 2 else "g")))
    monkeypatch.setattr(trust, "directories_to_keep", lambda most: most)  # kept until EMFILE says no more
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    outcomes = []
    try:
        for room in (40, 0):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(room), hard))
            for compiled in (True, False):
                try:
                    outcomes.append((room, data_pass(monkeypatch, compiled, entries, b"\2" * 300)))
                except replay_module._Stopped as stop:
                    outcomes.append((room, (stop.files, stop.issued, type(stop.error("")))))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert outcomes[0] == outcomes[1] == (40, (300, sum(range(301)), []))
    assert outcomes[2] == outcomes[3] == (0, (0, 0, OutOfDescriptors)) and outcomes[2][1][2] is OutOfDescriptors


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_node_swapped_in_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    """Not looked at yet, a named pipe (or, as root, a device node) put where a listed file was is refused by its
    look, unopened: the directory's inotify watch sees the clean files opened and not it."""
    from tests.attacker import Opens

    names = ["a", "pipe", "node", "b"] if os.geteuid() == 0 else ["a", "pipe", "b"]
    for name in names:
        (tmp_path / name).write_bytes(b"z" * 100)
    entries = [entry_of(tmp_path / name) for name in names]
    (tmp_path / "pipe").unlink()
    os.mkfifo(tmp_path / "pipe")
    if "node" in names:
        (tmp_path / "node").unlink()
        os.mknod(tmp_path / "node", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's: harmless were it opened
    watch = Opens(tmp_path)
    try:
        files, _, skipped = data_pass(monkeypatch, compiled, entries, b"\2" * len(names))
        opened = watch.take()
    finally:
        watch.close()
    assert files == 2 and sorted(opened) == ["a", "b"], opened
    assert {Path(s.path).name: s.status for s in skipped} == dict.fromkeys(set(names) - {"a", "b"}, "changed")


def one_file(tmp_path: Path) -> tuple[list[Entry], dict[str, int], dict[str, int]]:
    """One clean listed file: its entries, devnums and windows as the compiled pass takes them."""
    (tmp_path / "f").write_bytes(b"w" * 10)
    entries = [entry_of(tmp_path / "f")]
    device = entries[0].device
    return entries, {device: os.makedev(*map(int, device.split(":")))}, {device: WINDOW}


def test_a_descriptor_past_an_int_is_never_truncated_to_another(tmp_path: Path) -> None:
    """directory_of's descriptor number past an int's range stops the pass at the file (the Python loop meets it):
    it is never cut to its low 32 bits, which here name the real directory's descriptor."""
    entries, devnums, windows = one_file(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for number in (fd, fd + (1 << 32)):
            stop = COMPILED.issue(*replay_module.pass_columns(entries), [0], bytearray(b"\1"), 0, 1,
                                  lambda _d, n=number: (n, False), devnums, windows, trust.LISTED_READ)
            assert stop == ((1, 1, 10) if number == fd else (0, 0, 0)), number
    finally:
        os.close(fd)


class Raises:
    """A number whose value cannot be read: its __index__ raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __index__(self) -> int:
        raise self.error


@pytest.mark.parametrize("error", [TypeError("expected"), RuntimeError("unexpected")], ids=["expected", "other"])
def test_only_the_expected_errors_of_a_value_are_cleared(tmp_path: Path, error: Exception) -> None:
    """A value not what the list holds (TypeError, ValueError, IndexError, OverflowError) stops the pass at the file
    (one of the list's: no columns for the pass, the Python loop takes every file); any other exception is the
    pass's own error, raised, never swallowed."""
    entries, devnums, windows = one_file(tmp_path)

    def directory_of(_d: str) -> tuple[object, bool]:
        return Raises(error), False

    odd = [entries[0]._replace(size=Raises(error))]
    if isinstance(error, RuntimeError):
        with pytest.raises(RuntimeError, match="unexpected"):
            COMPILED.issue(*replay_module.pass_columns(entries), [0], bytearray(b"\1"), 0, 1, directory_of, devnums,
                           windows, 0)
        with pytest.raises(RuntimeError, match="unexpected"):
            replay_module.pass_columns(odd)
    else:
        assert COMPILED.issue(*replay_module.pass_columns(entries), [0], bytearray(b"\1"), 0, 1, directory_of,
                              devnums, windows, 0) == (0, 0, 0)
        assert replay_module.pass_columns(odd) is None


@pytest.mark.parametrize("column", [2, 3, 4, 5, 6, 9, 10])
def test_a_column_of_another_length_is_refused(tmp_path: Path, column: int) -> None:
    """The compiled pass reads a number of each column per path: a column of another length is an error, never
    read past its end."""
    entries, devnums, windows = one_file(tmp_path)
    args = list(replay_module.pass_columns(entries))
    args[column] = args[column][:-1]
    with pytest.raises(ValueError, match="another length"):
        COMPILED.issue(*args, [0], bytearray(b"\1"), 0, 1, lambda _d: (-1, False), devnums, windows, 0)


@pytest.mark.parametrize("backwards", [True, False])
def test_an_order_given_as_a_range_is_read_as_its_list(tree: tuple[list[Entry], bytes, dict[str, str]],
                                                       monkeypatch: pytest.MonkeyPatch, backwards: bool) -> None:
    """A streamed chunk's order is a range, whose items the compiled pass computes instead of asking the range for
    each: any range (backwards, every other one) reads and skips what the same order as a list does, and what the
    Python loop does."""
    entries, listed, _ = tree
    order = range(len(entries) - 1, -1, -1) if backwards else range(1, len(entries), 2)
    compiled = data_pass(monkeypatch, True, entries, listed, order)  # type: ignore[arg-type]
    assert compiled == data_pass(monkeypatch, True, entries, listed, list(order))
    assert compiled == data_pass(monkeypatch, False, entries, listed, order)  # type: ignore[arg-type]
    assert compiled[0] > (500 if backwards else 250)
