"""Two issuing threads in the compiled data pass (#30): on flash a span of files between two asks of the memory guard
is read by two threads at once, blocks of 16 files in turn; on a disk that may seek, one thread keeps the physical
order.

The answer must be one issuer's: the same files read, the same files handed back to the Python loop (which words
each skip), in the same order, the same counts; a file the second issuer read past the first issuer's stop is
counted once and not taken again (its listed mark set to 0).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.preload_helpers import need_datapass
from tests.unit.preload.test_preload_datapass import WINDOW, as_chunk, entry_of
from tests.unit.preload.test_preload_datapass import tree as tree  # noqa: PLC0414 (the fixture, by its name)
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import write_list
from tunectl.preload.skip import Skip
from tunectl.system.trust import ListedOpener

COMPILED = replay_module._datapass


@pytest.fixture(autouse=True)
def built() -> None:
    need_datapass(COMPILED, dict(os.environ))


class Guard:
    """A memory guard that says stop at its `at`-th ask (every 256 files)."""

    def __init__(self, at: int) -> None:
        self.asks, self.at, self.share, self.limit = 0, at, 0.0, 0.1

    def stop(self, now: float) -> bool:
        self.asks += 1
        return self.asks >= self.at


def data_pass(monkeypatch: pytest.MonkeyPatch, entries, listed: bytes, issuers: int, compiled: bool = True,
              guard: Guard | None = None) -> tuple[int, int, list[Skip], bool, bytearray]:
    """One data pass over `entries` in the list's order: (files, bytes, skips in the order handed back, stopped,
    the listed marks after it)."""
    monkeypatch.setattr(replay_module, "_datapass", COMPILED if compiled else None)
    devices = {e.device for e in entries}
    devnums = {d: os.makedev(*map(int, d.split(":"))) for d in devices}
    skipped: list[Skip] = []
    marks = bytearray(listed)
    with ListedOpener() as opener:
        files, issued, stopped = replay_module._issue_with(
            opener, entries, range(len(entries)), marks, dict.fromkeys(devices, WINDOW), devnums, None, skipped,
            guard, issuers)
    return files, issued, skipped, stopped, marks


def test_two_issuers_read_and_hand_back_exactly_what_one_does(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree's stops fall in both issuers' blocks of a span (in 256-510: a changed file, a named pipe, a vanished
    one at 300-303 in the first's, a device or unreadable one at 304 and a name too long at 400 in the second's, a
    directory gone at 450 in the first's; a directory reached through a link at 520): one issuer has read files past
    the other one's stop."""
    entries, listed, expected = tree
    before = COMPILED.split()
    one = data_pass(monkeypatch, entries, listed, 1)
    assert COMPILED.split() == before  # one issuer: no span split
    two = data_pass(monkeypatch, entries, listed, 2)
    assert COMPILED.split() > before  # two issuers ran
    assert two[:4] == one[:4]  # files, bytes, the skips in the order handed back, not stopped
    assert two[:4] == data_pass(monkeypatch, entries, listed, 1, compiled=False)[:4]
    assert two[:4] == data_pass(monkeypatch, as_chunk(entries), listed, 2)[:4]  # from a list's columns
    assert [s.path for s in two[2]] == [e.path for e in entries if e.path in expected]
    # read past a stop by one issuer (e.g. in the span from 512, past the other's stop at the link, 520): marked,
    # counted once when the pass reaches it, never opened again; never a file handed back
    taken = [n for n, mark in enumerate(two[4]) if mark == replay_module.READ_AHEAD]
    assert taken and not {entries[n].path for n in taken} & expected.keys(), taken
    assert one[4] == bytearray(listed)  # one issuer leaves the marks as they were


def test_a_stop_that_ends_the_replay_counts_what_one_issuer_read(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled pass stops at f010 (changed); the Python loop meets no descriptor there, twice, and the replay
    stops: what it says was sent is what one issuer had read (f000-f009), not the other issuer's reads past it."""
    import errno

    entries = []
    for n in range(100):
        (tmp_path / f"f{n:03}").write_bytes(b"x" * 100)
        entries.append(entry_of(tmp_path / f"f{n:03}"))
    entries[10] = entries[10]._replace(mtime_ns=entries[10].mtime_ns + 1)

    def no_descriptor(path: str) -> OSError:
        return OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)

    real_open, real_listed = os.open, ListedOpener.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: (_ for _ in ()).throw(no_descriptor(p))
                        if str(p).endswith("f010") else real_open(p, *a, **k))
    monkeypatch.setattr(ListedOpener, "open", lambda self, p, checked=False: (_ for _ in ()).throw(no_descriptor(p))
                        if p.endswith("f010") else real_listed(self, p, checked))
    said = []
    for issuers in (1, 2):
        before = COMPILED.split()
        with pytest.raises(replay_module._Stopped) as stopped:
            data_pass(monkeypatch, entries, b"\1" * 100, issuers)
        assert (COMPILED.split() > before) == (issuers == 2)
        said.append((stopped.value.files, stopped.value.issued))
    assert said == [(10, 1000), (10, 1000)]


def test_a_span_with_many_stops_is_split_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale list (every 20th file changed): after an issuer's stop the rest of its span is read by one, not
    planned again with a new thread per stop; the answer is one issuer's."""
    entries = []
    for n in range(600):
        (tmp_path / f"f{n:03}").write_bytes(b"x" * 100)
        entries.append(entry_of(tmp_path / f"f{n:03}"))
        if n % 20 == 7:
            entries[n] = entries[n]._replace(mtime_ns=entries[n].mtime_ns + 1)
    one = data_pass(monkeypatch, entries, b"\1" * 600, 1)
    before = COMPILED.split()
    two = data_pass(monkeypatch, entries, b"\1" * 600, 2)
    assert two[:4] == one[:4] and len(one[2]) == 30
    assert 0 < COMPILED.split() - before <= 3  # once per span of 255 at most (each has stops)


def test_the_memory_guard_stops_two_issuers_where_it_stops_one(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    entries, listed, _ = tree
    one = data_pass(monkeypatch, entries, listed, 1, guard=Guard(2))
    two = data_pass(monkeypatch, entries, listed, 2, guard=Guard(2))
    assert one[3] and two[:4] == one[:4]
    assert one[0] < 512 - 5  # the files from the guard's second ask on were not read


FILES = 1500


@pytest.fixture
def listed_files(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    entries = []
    for i in range(FILES):
        p = data / f"f{i:04d}"
        p.write_bytes(b"x" * 100)
        entries.append(entry_of(p)._replace(physical=4096 * (i + 1)))
    write_list(str(tmp_path / "l.list"), entries)
    return tmp_path / "l.list"


@pytest.mark.parametrize("rotational, cpus, issuers, said", [
    (False, 2, 2, "up to 2 issuing threads: non-rotational"),
    (True, 2, 1, "1 issuing thread: the disk may seek, one keeps the physical order"),
    (None, 2, 1, "1 issuing thread: the disk may seek"),
    (False, 1, 1, "1 issuing thread: one CPU usable"),
])
def test_flash_gets_two_issuers_and_a_rotational_stack_one(
        listed_files: Path, monkeypatch: pytest.MonkeyPatch, rotational: bool | None, cpus: int, issuers: int,
        said: str) -> None:
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, d: replay_module.Stack(d, rotational, 64, 128 << 10, None))
    monkeypatch.setattr(replay_module, "FAST_STATS", 0)  # the inode sample says cached: the list streams
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    asked: list[int] = []
    real = replay_module._issue_with

    def spy(*args, **kwargs) -> tuple[int, int, bool]:  # noqa: ANN002, ANN003
        asked.append(args[9] if len(args) > 9 else kwargs.get("issuers", 1))
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_module, "_issue_with", spy)
    before = COMPILED.split()
    r = run_cli("preload", "replay", str(listed_files), "-v")
    assert r.code == 0 and f"{FILES} files" in r.out, r.out
    assert asked and set(asked) == {issuers}
    assert said in r.out, r.out
    assert (COMPILED.split() > before) == (issuers == 2)
    assert ("of up to 255 files issued by two threads at once" in r.out) == (issuers == 2), r.out


def test_the_python_loop_stays_one_thread(listed_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, d: replay_module.Stack(d, False, 64, 128 << 10, None))
    monkeypatch.setattr(replay_module, "_datapass", None)
    r = run_cli("preload", "replay", str(listed_files), "-v")
    assert r.code == 0 and "1 issuing thread: the files read by the Python loop" in r.out, r.out


@pytest.mark.parametrize("issuers", [1, 2])
def test_the_compiled_pass_leaves_no_descriptor_open(tree, monkeypatch: pytest.MonkeyPatch, issuers: int) -> None:
    """The directories the compiled pass opens itself (one issuer's kept from batch to batch, each of two issuers'
    its own) are closed when a call returns, at a stop as at the end of its span: a pass that stops often (the tree's
    odd files and every 7th file changed) leaves open the descriptors it found open."""
    entries, listed, _ = tree
    entries = [e._replace(mtime_ns=e.mtime_ns + 1) if n % 7 == 3 else e for n, e in enumerate(entries)]
    before = sorted(os.listdir("/proc/self/fd"))
    files, _, skipped, _, _ = data_pass(monkeypatch, entries, listed, issuers)
    assert files > 400 and len(skipped) > 80
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_stops_at_the_edges_of_a_lone_issuers_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One issuer plans and reads a call's span a batch at a time (8 files, then 16, 32, ...: FIRST_BATCH in
    _datapass.c). Changed files placed at the last file of a batch and at the first of the next, call after call (a
    stop ends a call; the next starts after it), are handed back one by one and every file between them read, as the
    Python loop does."""
    entries = []
    for n in range(600):
        d = tmp_path / f"d{n // 200}"
        d.mkdir(exist_ok=True)
        (d / f"f{n:03}").write_bytes(b"x" * 100)
        entries.append(entry_of(d / f"f{n:03}"))
    stops, start, turn = [], 0, 0
    while True:  # from a call's start, its batches end 8, 24, 56, 120 and 248 files on
        edge = (8, 24, 56, 120, 248)[turn // 2 % 5]
        at = start + edge - 1 + turn % 2  # the last file of that batch, then (next time) the first of the next
        if at >= len(entries):
            break
        if at < start | 255:  # within the call (past it, the Python loop's step, where a new call begins)
            stops.append(at)
            entries[at] = entries[at]._replace(mtime_ns=entries[at].mtime_ns + 1)
            start = at + 1
        else:
            start = (start | 255) + 1
        turn += 1
    one = data_pass(monkeypatch, entries, b"\1" * 600, 1)
    assert one[:3] == data_pass(monkeypatch, entries, b"\1" * 600, 1, compiled=False)[:3]
    assert [s.path for s in one[2]] == [entries[at].path for at in stops] and len(stops) >= 7
    assert one[0] == 600 - len(stops)
