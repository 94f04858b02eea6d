"""tunectl preload: the list format and ordering (pure), and collect/replay/record/show on real files
(the root cases, on real file systems, are in tests/root/preload/).

Residency is checked with util-linux fincore, right after the command (this
VM's host reclaims idle pages within seconds). Files are evicted one by one
with POSIX_FADV_DONTNEED, never by dropping the machine's caches.
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO, CliResult, run_process
from tests.preload_helpers import GOOD_HEADER, assert_clean, evict, fincore, make_files, replay_resident, tunectl
from tunectl.output import Progress
from tunectl.preload import order
from tunectl.preload.listfile import read_list
from tunectl.preload.listing import FIELDS, VERSION, Entry, ListError, parse, render
from tunectl.preload.replay import replay
from tunectl.system.sysfs import Sysfs


def entry(path: str, inode: int, physical: int | None, device: str = "8:1", size: int = 10) -> Entry:
    return Entry(path, device, inode, size, 0, ((0, size),), physical)


# ---------------------------------------------------------------- pure: the list format

def test_list_round_trips() -> None:
    entries = [entry("/a", 12, 4096), Entry("/b c", "254:0", 7, 9000, -5, ((0, 4096), (8192, 808)), None),
               Entry("/empty", "254:0", 8, 0, 1, (), None)]
    text = render(entries, "2026-01-01T00:00:00Z")
    header = json.loads(text.splitlines()[0])
    assert header["version"] == VERSION and header["fields"] == list(FIELDS) and header["files"] == 3
    assert parse(text, "l").entries == entries


def test_a_newer_version_is_refused_with_a_clear_message() -> None:
    text = render([entry("/a", 1, 0)], "now").replace('"version": 1', f'"version": {VERSION + 1}')
    with pytest.raises(ListError) as e:
        parse(text, "boot.list")
    assert str(e.value).startswith(f"boot.list:1: list format version {VERSION + 1} is newer")
    assert "upgrade tunectl" in e.value.hint


GOOD_ROW = '["/a","8:1",1,10,0,[[0,10]],4096]'


@pytest.mark.parametrize("lines, where, words", [
    (["garbage"], 1, "not a tunectl preload list"),
    (['{"format": "tunectl-preload", "version": "one"}'], 1, "version"),
    ([GOOD_HEADER, GOOD_ROW, "[1,2"], 3, "not JSON"),
    ([GOOD_HEADER, GOOD_ROW, GOOD_ROW + "," + GOOD_ROW], 3, "not JSON"),
    ([GOOD_HEADER, '{"path": "/a"}'], 2, "expected a JSON array of 7 fields"),
    ([GOOD_HEADER, GOOD_ROW.replace('"/a"', '"a"')], 2, "path: expected an absolute path"),
    ([GOOD_HEADER, GOOD_ROW.replace('"8:1"', '"sda1"')], 2, "device: expected MAJ:MIN"),
    ([GOOD_HEADER, GOOD_ROW, GOOD_ROW.replace(",1,10,", ",-1,10,")], 3, "inode, size"),
    ([GOOD_HEADER, GOOD_ROW.replace(",0,[[", ',"x",[[')], 2, "mtime_ns"),
    ([GOOD_HEADER, GOOD_ROW.replace("[[0,10]]", "[[0,0]]")], 2, "ranges"),
    # after a row on the same device, so the whole-file fast check sees it first (it raised KeyError: exit 70)
    ([GOOD_HEADER, GOOD_ROW, GOOD_ROW.replace("[[0,10]]", '{"a": 1}')], 3, "ranges"),
    ([GOOD_HEADER, GOOD_ROW.replace("4096]", '"far"]')], 2, "physical"),
    ([GOOD_HEADER, GOOD_ROW.replace('"/a"', '"/a\\u0000b"')], 2, "NUL byte"),
    ([GOOD_HEADER, GOOD_ROW.replace('"/a"', '"/\\ud800"')], 2, "system can encode"),
    # more digits than Python converts (4300): a plain ValueError, not a JSONDecodeError (it exited 70)
    ([GOOD_HEADER, GOOD_ROW, GOOD_ROW.replace(",1,10,", "," + "1" * 5000 + ",10,")], 3, "a number far too long"),
    # a header naming the fields in another order: its rows were read by position, the device taken for the path
    ([GOOD_HEADER[:-1] + ', "fields": ["device", "path", "inode", "size", "mtime_ns", "ranges", "physical"]}',
      GOOD_ROW], 1, 'fields: expected ["path", "device", "inode"'),
    # an "order" other than record's "time" was taken for physical order, as if the key were absent
    ([GOOD_HEADER[:-1] + ', "order": "physical"}', GOOD_ROW], 1, "order: expected \"time\""),
    ([GOOD_HEADER[:-1] + ', "order": null}', GOOD_ROW], 1, "order: expected \"time\""),
])
def test_garbage_is_an_error_at_file_and_line(lines: list[str], where: int, words: str) -> None:
    with pytest.raises(ListError) as e:
        parse("\n".join(lines) + "\n", "x.list")
    assert str(e.value).startswith(f"x.list:{where}: ") and words in str(e.value)


# ---------------------------------------------------------------- pure: ordering and chunks

def test_physical_order_by_device_then_offset_with_inode_fallback_last() -> None:
    entries = [entry("/late", 1, 9000), entry("/early", 3, 100), entry("/nofiemap-b", 9, None),
               entry("/nofiemap-a", 2, None), entry("/other-disk", 0, 5, device="8:17")]
    assert [e.path for e in order.physical_order(entries)] == [
        "/early", "/late", "/nofiemap-a", "/nofiemap-b", "/other-disk"]
    assert [entries[i].path for i in order.inode_indices(entries)] == [
        "/late", "/nofiemap-a", "/early", "/nofiemap-b", "/other-disk"]
    assert order.order_name(entries) == "mixed"
    assert order.order_name(entries[2:4]) == "inode" and order.order_name(entries[:2]) == "physical"


@pytest.mark.parametrize("devices, unknown", [(1, 0.0), (1, 0.2), (3, 0.0), (3, 0.2)])
def test_order_keys_built_at_c_speed_give_the_full_keys_order(devices: int, unknown: float) -> None:
    # The one-device fast keys (physical, inode) and (inode) must order exactly as the full keys do, ties
    # (equal offsets or inodes) included: the data pass and the inode pass depend on it.
    rng = random.Random(devices * 10 + int(unknown * 10))
    entries = [entry(f"/f{i}", rng.randrange(40), None if rng.random() < unknown else rng.randrange(60),
                     device=f"8:{rng.randrange(devices)}") for i in range(2000)]
    by_physical = sorted(range(len(entries)), key=lambda i: order._physical_key(entries[i]))
    by_inode = sorted(range(len(entries)), key=lambda i: order._inode_key(entries[i]))
    assert order.physical_indices(entries) == by_physical
    assert order.inode_indices(entries) == by_inode
    assert [entries[i] for i in by_physical] == order.physical_order(entries)
    assert order.physical_indices([]) == order.inode_indices([]) == []


def test_calls_are_chunked_to_the_read_ahead_window() -> None:
    mib = 1 << 20
    assert order.window_bytes(8192, 4096) == 8 * mib
    assert order.window_bytes(0, 1280) == 1280 * 1024  # read-ahead off: the largest request still goes
    assert order.window_bytes(None, None) == 128 * 1024
    calls = list(order.chunks([(0, 111 * mib)], 111 * mib, 8 * mib))
    assert len(calls) == 14 and calls[0] == (0, 8 * mib) and calls[-1] == (104 * mib, 7 * mib)
    # overlapping ranges merge; nothing past the end of the file
    assert list(order.chunks([(100, 50), (0, 120), (4000, 9000)], 5000, 4096)) == [(0, 150), (4000, 1000)]


def test_mincore_vectors_become_ranges_and_counts() -> None:
    vec = bytes([1, 1, 0, 1, 0, 0, 1])
    size = 6 * 4096 + 10
    assert order.pages_to_ranges(vec, size) == [(0, 8192), (12288, 4096), (24576, 10)]
    assert order.resident_bytes(vec, [(0, size)], size) == (3 * 4096 + 10, size)
    assert order.resident_bytes(vec, [(8192, 4096)], size) == (0, 4096)
    assert order.page_bytes([(0, 10), (4096, 1)], 5000) == 8192


# ---------------------------------------------------------------- real files

@pytest.fixture
def corpus(tmp_path: Path) -> list[Path]:
    sizes = {"small/a": 100, "small/b": 4096, "small/c": 5000, "big/one": 3 << 20, "big/two": 9 << 20 | 123,
             "empty": 0}
    return make_files(tmp_path / "data", sizes)


def test_collect_then_replay_makes_the_set_resident(corpus: list[Path], tmp_path: Path) -> None:
    lst = tmp_path / "set.list"
    r = tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst), "--json")
    assert r.code == 0, r.err
    assert r.doc["files"] == len(corpus) and r.doc["bytes"] == sum(p.stat().st_size for p in corpus)
    evict(*corpus)
    assert sum(fincore(*corpus).values()) < sum(p.stat().st_size for p in corpus) // 2
    r, resident = replay_resident(lst, *corpus)
    assert r.code == 0, r.err
    for p in corpus:
        assert resident[str(p)] >= p.stat().st_size, (p, resident)
    doc = r.doc
    # settled false only when the disk was never idle within 10 s (others' I/O): replay_resident then waited
    # for the reads to land; settled true with the files not resident fails there
    assert doc["files"] == len(corpus) and doc["skipped"] == []
    assert doc["bytes"] == sum(p.stat().st_size for p in corpus) and doc["seconds"] > 0
    assert doc["order"] in ("physical", "mixed")  # the empty file has no extent
    s = tunectl("preload", "show", str(lst), "--json")
    assert s.code == 0 and s.doc["files"] == len(corpus) and s.doc["by_status"].get("resident") == len(corpus)


def test_a_file_named_through_a_link_is_listed_by_the_file_replay_can_open(corpus: list[Path], tmp_path: Path) -> None:
    from tunectl.preload.collect import describe_file

    link = tmp_path / "link"
    link.symlink_to(corpus[0])
    lst = tmp_path / "set.list"
    r = tunectl("preload", "collect", str(link), "-o", str(lst), "--json")
    assert r.code == 0 and [e.path for e in read_list(str(lst)).entries] == [str(corpus[0])], r.out + r.err
    r = tunectl("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["files"] == 1 and r.doc["skipped"] == [], r.out + r.err
    entry, skip = describe_file(str(link))  # a name that became a link after the walk: not opened through it, and
    assert entry is None and skip is not None and skip.status == "unreadable"  # said (a path named, as the walk's)


@pytest.mark.parametrize("inode_pass", ["one-by-one", "io_uring", "threads"])
def test_changed_and_deleted_files_are_skipped_and_reported(corpus: list[Path], tmp_path: Path,
                                                            inode_pass: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if inode_pass != "one-by-one":  # the list above the small-list path's size: the stats many at once
        monkeypatch.setattr("tunectl.preload.replay.SMALL_LIST", 0)
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", *map(str, corpus), "-o", str(lst)).code == 0
    grown, gone, replaced, kept = corpus[0], corpus[1], corpus[2], corpus[3]
    with open(grown, "ab") as f:
        f.write(b"more")
    gone.unlink()
    fresh = replaced.with_name(replaced.name + ".new")
    fresh.write_bytes(b"x" * 5000)  # created while the old one exists: a new inode for certain
    fresh.replace(replaced)  # same size, new inode
    evict(kept)
    r, resident = replay_resident(lst, kept, options=("--no-io-uring",) if inode_pass == "threads" else ())
    assert r.code == 0, r.err
    assert r.doc["inode_pass"] == inode_pass  # this kernel offers io_uring; CI runs both passes for real
    skipped = {s["path"]: s for s in r.doc["skipped"]}
    assert skipped[str(grown)]["status"] == "changed" and "size 100 -> 104" in skipped[str(grown)]["reason"]
    assert skipped[str(gone)]["status"] == "vanished"
    assert skipped[str(replaced)]["status"] == "changed" and "replaced" in skipped[str(replaced)]["reason"]
    assert r.doc["files"] == len(corpus) - 3
    assert resident[str(kept)] == kept.stat().st_size
    human = tunectl("preload", "replay", str(lst))
    assert human.code == 0 and "vanished" in human.out and str(gone) in human.out
    shown = tunectl("preload", "show", str(lst), "--json")
    assert shown.doc["by_status"]["vanished"] == 1 and shown.doc["by_status"]["changed"] == 2


def test_where_io_uring_is_refused_the_inode_pass_runs_in_threads(corpus: list[Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", *map(str, corpus), "-o", str(lst)).code == 0
    corpus[0].unlink()

    def refused(**_: int) -> None:
        raise OSError(errno.EPERM, "io_uring_setup: Operation not permitted")  # kernel.io_uring_disabled=2

    monkeypatch.setattr("tunectl.system.iouring.StatxRing.open", refused)
    monkeypatch.setattr("tunectl.preload.replay.SMALL_LIST", 0)  # above the small-list path: a ring is asked for
    r = tunectl("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["inode_pass"] == "threads", r.out + r.err
    assert [s["status"] for s in r.doc["skipped"]] == ["vanished"] and r.doc["files"] == len(corpus) - 1


def test_a_ring_that_fails_part_way_leaves_the_rest_to_threads(corpus: list[Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", *map(str, corpus), "-o", str(lst)).code == 0
    corpus[0].unlink()
    from tunectl.system.iouring import StatxRing

    real = StatxRing.statx_all

    def fails_after_two(self: StatxRing, paths: list[bytes], dir_fds=None):  # noqa: ANN001
        results = sorted(real(self, paths, dir_fds), key=lambda r: type(r[1]) is not int)  # the vanished file first
        yield from results[:2]
        raise OSError(errno.EIO, "io_uring_enter: Input/output error")

    monkeypatch.setattr(StatxRing, "statx_all", fails_after_two)
    monkeypatch.setattr("tunectl.preload.replay.SMALL_LIST", 0)  # above the small-list path: a ring is asked for
    r = tunectl("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["inode_pass"] == "threads", r.out + r.err
    counted = Progress(io.StringIO(), 2 * len(corpus), "preload", enabled=False)
    replay(Sysfs("/sys"), read_list(str(lst)), str(lst), progress=counted)
    assert counted.done == 2 * len(corpus)  # each pass counts every file once, the ring's two included
    # every file decided once: the two the ring checked (the vanished one among them) are not checked again
    assert [s["status"] for s in r.doc["skipped"]] == ["vanished"] and r.doc["files"] == len(corpus) - 1


@pytest.mark.parametrize("swap", ["a named pipe", "a symbolic link", "another file"])
def test_a_name_swapped_between_the_passes_is_not_read(corpus: list[Path], tmp_path: Path, swap: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", *map(str, corpus), "-o", str(lst)).code == 0
    victim, target = tmp_path / "victim", corpus[0]
    victim.write_bytes(b"v" * 100)
    from tunectl.preload.replay import _Checker

    real = _Checker.run

    def then_swapped(self: _Checker, *args) -> None:  # the inode pass passes the listed file; then it is replaced
        real(self, *args)
        target.unlink()
        if swap == "a named pipe":
            os.mkfifo(target)
        elif swap == "a symbolic link":
            target.symlink_to(victim)
        else:
            victim.replace(target)

    monkeypatch.setattr(_Checker, "run", then_swapped)
    report = replay(Sysfs("/sys"), read_list(str(lst)), str(lst))
    (skip,) = report.skipped
    assert skip.path == str(target) and skip.status == "changed", skip
    assert ("now a symbolic link" if swap == "a symbolic link" else "replaced since the inode pass") in skip.reason
    assert report.files == len(corpus) - 1


@pytest.mark.parametrize("options", [(), ("--no-io-uring",)])
def test_a_path_the_kernel_refuses_is_unreadable_and_the_exit_is_partial(tmp_path: Path,
                                                                         options: tuple[str, ...]) -> None:
    (good,) = make_files(tmp_path, {"good": 10})
    st = good.stat()
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    too_long = str(tmp_path / ("n" * 300))  # ENAMETOOLONG: neither gone nor changed, so not expected
    rows = [[str(good), device, st.st_ino, 10, st.st_mtime_ns, [[0, 10]], None],
            [too_long, device, 1, 10, 0, [[0, 10]], None]]
    lst = tmp_path / "bad.list"
    lst.write_text(GOOD_HEADER + "\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    r = tunectl("preload", "replay", str(lst), "--json", *options)
    assert_clean(r)
    assert r.code == 3 and r.doc["files"] == 1, r.out + r.err
    (skip,) = r.doc["skipped"]
    assert skip["status"] == "unreadable" and skip["reason"] == "File name too long"
    text = tunectl("preload", "replay", str(lst), *options)
    assert text.code == 3 and text.out.splitlines()[-1] == "exit 3 (partial): 1 file unreadable, not read", text.out


def test_collect_resident_keeps_only_cached_pages(tmp_path: Path) -> None:
    (p,) = make_files(tmp_path, {"f": 64 * 4096})
    evict(p)
    with open(p, "rb") as f:
        f.seek(8 * 4096)
        f.read(4096)  # read-ahead may bring neighbours in: compare with what mincore says, not with 1 page
    lst = tmp_path / "res.list"
    r = tunectl("preload", "collect", "--resident", str(p), "-o", str(lst), "--json")
    assert r.code == 0, r.err
    (e,) = parse(lst.read_text(), str(lst)).entries
    assert 0 < e.bytes < p.stat().st_size and any(off <= 8 * 4096 < off + n for off, n in e.ranges)


def test_record_by_residency_diff(tmp_path: Path) -> None:
    a, b = make_files(tmp_path / "d", {"a.txt": 3 * 4096, "b.txt": 4096})
    evict(a, b)
    lst = tmp_path / "rec.list"
    r = tunectl("preload", "record", "--method", "diff", "--scope", str(tmp_path / "d"), "-o", str(lst),
                "--json", "--", "cat", str(a))
    assert r.code == 0, r.err
    assert r.doc["method"] == "diff" and any("residency diff" in n for n in r.doc["notes"])
    assert [e.path for e in parse(lst.read_text(), str(lst)).entries] == [str(a)]


def test_record_by_residency_diff_reports_the_files_it_could_not_read(tmp_path: Path) -> None:
    """A file below --scope that record cannot open is said, as collect says it (counted; listed with -v and in
    --json), and the exit is 3: the list was written without it. Before, the diff passed over it in silence."""
    a, secret = make_files(tmp_path / "d", {"a.txt": 3 * 4096, "secret": 4096})
    evict(a, secret)
    secret.chmod(0)
    argv = ["preload", "record", "--method", "diff", "--scope", str(tmp_path / "d"), "-o", str(tmp_path / "r.list")]

    def run(*extra: str) -> CliResult:
        if os.geteuid() != 0:
            return tunectl(*argv, *extra, "--", "cat", str(a))
        # root reads any mode: without the capabilities that let it, it meets the mode as a user does
        return run_process(*argv, *extra, "--", "cat", str(a), env={"PATH": os.environ.get("PATH", "")},
                           prefix=["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all",
                                   "--"])

    r = run("--json")
    assert r.code == 3, r.out + r.err
    assert r.doc["skipped"] == [{"path": str(secret), "status": "unreadable", "reason": "Permission denied"}], r.doc
    assert [e.path for e in parse((tmp_path / "r.list").read_text(), "r.list").entries] == [str(a)]
    r = run()
    assert r.code == 3 and str(secret) in r.out and "1 file unreadable, not in the list" in r.out, r.out


def record_as(uid: int, tmp_path: Path, scope: Path, lst: Path, *read: Path) -> CliResult:
    """`preload record --method diff --scope SCOPE -o LST --json -- cat READ...` run as `uid` (its group too), the
    directories down to `tmp_path` opened to others for the run (the walk opens each one)."""
    opened = []
    try:
        for p in [tmp_path, *tmp_path.parents][:-1]:
            if os.stat(p).st_mode & 0o005 != 0o005:
                opened.append((p, os.stat(p).st_mode & 0o7777))
                p.chmod(os.stat(p).st_mode & 0o7777 | 0o005)
        return run_process("preload", "record", "--method", "diff", "--scope", str(scope), "-o", str(lst), "--json",
                           "--", "cat", *map(str, read), env={"PATH": os.environ.get("PATH", "")},
                           prefix=["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--"])
    finally:
        for p, mode in opened:
            p.chmod(mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's files and a run as that user are made as root")
def test_a_users_record_by_residency_diff_leaves_out_what_the_user_may_not_read_with_a_note(tmp_path: Path) -> None:
    """As a user, a file below the scope they may not read (/etc/shadow in the default scope) is one their command
    could not have read either: a note counts it, it is not skipped, and the exit is 0. Root's record (or a file
    the user may read but not open, another user's link) still skips it, exit 3."""
    nobody = 65534
    d = tmp_path / "d"
    a, secret = make_files(d, {"a.txt": 3 * 4096, "secret": 4096})
    evict(a, secret)
    secret.chmod(0o600)  # root's
    out = tmp_path / "out"
    out.mkdir()
    for p in (a, out):
        os.chown(p, nobody, nobody)  # theirs: a user sees the residency of their own files only
    r = record_as(nobody, tmp_path, d, out / "r.list", a)
    assert r.code == 0 and r.doc["skipped"] == [], r.out + r.err
    assert any(n.startswith("1 file below the scope you may not read left out") for n in r.doc["notes"]), r.doc
    assert [e.path for e in parse((out / "r.list").read_text(), "r.list").entries] == [str(a)]


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's files and a run as that user are made as root")
def test_a_users_record_by_residency_diff_says_the_files_whose_cache_it_cannot_see(tmp_path: Path) -> None:
    """The kernel shows a file's page cache only to its owner, a user who may write it, or root: as a user, the diff
    cannot see what the command read of root's files (a user's record of /usr listed nothing, without a word). A
    note counts them and says what to do; they are readable, so not skipped: exit 0."""
    nobody = 65534
    d = tmp_path / "d"
    mine, roots_a, roots_b = make_files(d, {"mine": 3 * 4096, "roots-a": 2 * 4096, "roots-b": 4096})
    evict(mine, roots_a, roots_b)
    out = tmp_path / "out"
    out.mkdir()
    for p in (mine, out):
        os.chown(p, nobody, nobody)  # roots-a and roots-b stay root's, 0644: nobody reads them, cannot see their cache
    r = record_as(nobody, tmp_path, d, out / "r.list", mine, roots_a, roots_b)
    assert r.code == 0 and r.doc["skipped"] == [], r.out + r.err
    assert any(n.startswith("2 files below the scope left out: the kernel shows their page cache only to their "
                            "owner") and n.endswith("record as root to list them") for n in r.doc["notes"]), r.doc
    assert [e.path for e in parse((out / "r.list").read_text(), "r.list").entries] == [str(mine)]


# ---------------------------------------------------------------- bad input

@pytest.fixture
def bad_lists(tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "garbage.list"
    garbage.write_text(GOOD_HEADER + "\n" + GOOD_ROW + "\n{oops\n")
    newer = tmp_path / "newer.list"
    newer.write_text('{"format": "tunectl-preload", "version": 99}\n')
    binary = tmp_path / "binary.list"
    binary.write_bytes(GOOD_HEADER.encode() + b"\n\xff\xfe\n")
    empty = tmp_path / "empty.list"
    empty.write_text("")
    lists = {"garbage": garbage, "newer": newer, "binary": binary, "empty": empty, "dir": tmp_path,
             "missing": tmp_path / "nope.list"}
    for key, bad in (("placed", {"7:0": "fiemap"}), ("mounts", {"8:1": "relative"}), ("metadata", {"sda": []}),
                     ("order", "TIME")):
        lists[key] = tmp_path / f"{key}.list"
        lists[key].write_text(json.dumps({**json.loads(GOOD_HEADER), key: bad}) + "\n" + GOOD_ROW + "\n")
    return lists


@pytest.mark.parametrize("argv, code, words", [
    (["replay", "{missing}"], 2, "No such file"),
    (["show", "{missing}"], 2, "No such file"),
    (["replay", "{garbage}"], 2, "garbage.list:3: not JSON"),
    (["show", "{garbage}"], 2, "garbage.list:3: not JSON"),
    (["replay", "{newer}"], 2, "newer.list:1: list format version 99 is newer"),
    # A header key only one of them uses is refused by both: one reader checks the header for all.
    (["replay", "{placed}"], 2, "placed.list:1: placed 7:0: expected \"squashfs\", got 'fiemap'"),
    (["show", "{placed}"], 2, "placed.list:1: placed 7:0: expected \"squashfs\", got 'fiemap'"),
    (["replay", "{mounts}"], 2, "mounts.list:1: mounts 8:1: expected an absolute path"),
    (["show", "{mounts}"], 2, "mounts.list:1: mounts 8:1: expected an absolute path"),
    (["replay", "{metadata}", "--no-metadata"], 2, "metadata.list:1: metadata: 'sda' is not MAJ:MIN"),
    (["show", "{metadata}"], 2, "metadata.list:1: metadata: 'sda' is not MAJ:MIN"),
    (["replay", "{order}"], 2, "order.list:1: order: expected \"time\" (the order the files were read) or no key, "
                               "got 'TIME'"),
    (["show", "{order}"], 2, "order.list:1: order: expected \"time\""),
    (["replay", "{binary}"], 2, "binary.list:2: not UTF-8"),
    (["replay", "{empty}"], 2, "empty file"),
    (["replay", "{dir}"], 2, "a directory, not a regular file"),
    (["replay", "{garbage}", "--threads", "-1"], 2, "must not be negative"),
    (["replay", "{garbage}", "--settle-timeout", "nan"], 2, "nor --settle-timeout nan"),  # no deadline passes nan
    (["replay", "--settle-timeout", "NaN", "{garbage}"], 2, "nor --settle-timeout nan"),
    (["replay", "{garbage}", "--settle-timeout", "inf"], 2, "nor --settle-timeout nan or inf"),  # no JSON number
    (["collect", "{missing}", "-o", "{dir}/out.list"], 2, "no such file or directory"),
    (["collect", "{dir}", "-o", "{missing}/sub/out.list"], 2, "cannot write the preload list"),
    (["record", "-o", "{dir}/r.list"], 2, "needs a command"),
    # `-o -` wrote a file named "-" in the working directory; a list is never written to stdout
    (["collect", "{dir}", "-o", "-"], 2, "preload collect -o -: a preload list is written to a file, never to standard "
                                         "output\nhint: replay and show read a list only from a regular file"),
    (["record", "-o", "-", "--", "true"], 2, "preload record -o -: a preload list is written to a file"),
    (["record", "-o", "{dir}/r.list", "--method", "diff", "--scope", "{dir}", "--", "/no/such/cmd"], 2,
     "cannot run /no/such/cmd"),
    (["record", "-o", "{dir}/r.list", "--scope", "{missing}", "--", "true"], 2, "no such directory"),
    (["record", "-o", "{missing}/r.list", "--", "true"], 2, "does not exist\nhint: create it first (mkdir -p "),
])
def test_bad_input(bad_lists: dict[str, Path], argv: list[str], code: int, words: str,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    argv = [a.format(**bad_lists) for a in argv]
    monkeypatch.chdir(bad_lists["dir"])
    r = tunectl("preload", *argv)
    assert not (bad_lists["dir"] / "-").exists()
    assert r.code == code, (r.out, r.err)
    assert words in r.err, r.err
    assert_clean(r)
    j = tunectl("--json", "preload", *argv)
    assert j.code == code and (j.out == "" or json.loads(j.out)["ok"] is False)


def test_a_list_into_a_missing_directory_is_refused_before_the_command_runs(bad_lists: dict[str, Path],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(bad_lists["dir"])
    r = tunectl("preload", "record", "-o", f"{bad_lists['missing']}/r.list", "--method", "diff", "--scope",
                str(bad_lists["dir"]), "--", "touch", "ran")
    assert r.code == 2 and f"mkdir -p {bad_lists['missing']}" in r.err, r.err
    assert not (bad_lists["dir"] / "ran").exists()


@pytest.mark.parametrize("output", ["/dev/null", "{dir}"])
def test_an_output_that_is_no_regular_file_is_never_to_be_moved_aside_when_it_is_a_device(
        bad_lists: dict[str, Path], output: str) -> None:
    # `preload collect -o /dev/full` (and `bench --csv /dev/stdout`) said "hint: move /dev/full aside".
    output = output.format(**bad_lists)
    r = tunectl("preload", "collect", str(bad_lists["dir"]), "-o", output)
    assert r.code == 2 and "cannot write the preload list" in r.err, r.err
    assert_clean(r)
    if output == "/dev/null":
        assert "/dev/null: a character device, not a regular file\nhint: tunectl writes only regular files, whole " \
               "(a temp file renamed over the old one): name a new path or a regular file\n" in r.err
        assert "aside" not in r.err
    else:
        assert f"hint: name a file, not a directory (a new path, or a regular file to replace); or move {output} " \
               "aside\n" in r.err


# ---------------------------------------------------------------- boot units

UNITS = REPO / "udev"


def _unit(name: str) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys


def test_boot_units_agree_on_the_list_and_are_installed() -> None:
    replay, collect = _unit("tunectl-preload-replay.service"), _unit("tunectl-preload-collect.service")
    boot_list = "/var/lib/tunectl/preload/boot.list"
    assert replay["ConditionPathExists"] == [boot_list] and collect["ConditionPathExists"] == ["!" + boot_list]
    assert replay["ExecStart"][0].split()[-1] == boot_list and replay["DefaultDependencies"] == ["no"]
    assert "sysinit.target" in replay["Before"][0].split()
    assert collect["ExecStart"][0].split()[-1] == boot_list and "--resident" in collect["ExecStart"][0]
    assert _unit("tunectl-preload-collect.timer")["OnBootSec"]
    setup = (REPO / "setup.cfg").read_text()
    for unit in UNITS.iterdir():
        assert f"udev/{unit.name}" in setup, unit.name
    assert "man/tunectl-preload.8" in setup


def test_boot_units_pass_systemd_analyze() -> None:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    proc = subprocess.run(["systemd-analyze", "verify", *sorted(map(str, UNITS.iterdir()))],
                          capture_output=True, text=True)
    # tunectl and its man page need not be installed where the tests run
    problems = [line for line in proc.stderr.splitlines()
                if "is not executable" not in line and "man tunectl-preload(8)" not in line]
    assert problems == [], proc.stderr


def _checker_for(corpus: list[Path]):  # noqa: ANN202
    from _thread import allocate_lock

    from tunectl.preload.replay import _Checker

    entries = read_list_of(corpus)
    return _Checker(entries, {e.device: os.makedev(*map(int, e.device.split(":"))) for e in entries}, None,
                    allocate_lock())


def read_list_of(paths: list[Path]) -> list[Entry]:
    from tunectl.preload.collect import describe_file

    return [describe_file(str(p))[0] for p in paths if p.stat().st_size]


def test_the_thread_pass_starts_no_more_threads_than_files(corpus: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # --threads 100000000 --no-io-uring built a list of that many Thread objects: MemoryError, exit 70
    import threading

    from tunectl.preload.replay import MAX_THREADS

    real, started = threading.Thread.start, []

    def counted(self: threading.Thread) -> None:
        started.append(self)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    checker = _checker_for(corpus)
    checker.run(5000, use_io_uring=False)
    assert checker.how == "threads" and checker.parallel == MAX_THREADS
    assert len(started) == len(checker.entries) - 1  # the calling thread is the last one
    assert all(checker.decided) and all(v == 1 for v in checker.listed)


def test_a_thread_the_task_limit_refuses_leaves_the_pass_to_those_started(corpus: list[Path],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # ulimit -u or a unit's TasksMax: Thread.start raises RuntimeError("can't start new thread"), which exited 70
    import threading

    real, started = threading.Thread.start, []

    def limited(self: threading.Thread) -> None:
        if len(started) >= 2:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", limited)
    checker = _checker_for(corpus)
    checker.run(8, use_io_uring=False)
    assert checker.parallel == 3 and all(checker.decided) and all(v == 1 for v in checker.listed)


@pytest.mark.parametrize("io_uring", [True, False])
def test_the_inode_pass_holds_at_most_dirs_at_once_directories_open_and_judges_every_file(
        corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, io_uring: bool) -> None:
    # Each name is stat'd relative to its directory's O_PATH descriptor (never through a link on the way); the
    # descriptors are held for the pass, so a list over many directories is judged in runs of DIRS_AT_ONCE.
    from tunectl.preload import replay as replay_module
    from tunectl.system.trust import ListedOpener

    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", *map(str, corpus), "-o", str(lst)).code == 0
    corpus[0].unlink()  # one vanished, judged in its own run
    most = []

    class Counted(ListedOpener):
        def directory(self, directory: str) -> tuple[int, bool]:
            found = super().directory(directory)
            if self.keep == replay_module.DIRS_AT_ONCE + 1:  # the inode pass's (the data pass keeps 512)
                most.append(len(self.dirs))
            return found

    monkeypatch.setattr(replay_module, "ListedOpener", Counted)
    monkeypatch.setattr(replay_module, "DIRS_AT_ONCE", 1)
    monkeypatch.setattr(replay_module, "SMALL_LIST", 0)  # the stats many at once (the small-list path has its own)
    monkeypatch.setattr(replay_module, "read_stack", lambda sysfs, d: replay_module.Stack(d, True, 64, 128 << 10, None))
    r = tunectl("preload", "replay", str(lst), "--json", *([] if io_uring else ["--no-io-uring"]))
    assert r.code == 0 and r.doc["inode_pass"] in ("io_uring", "threads"), r.err
    assert r.doc["inode_pass_files"] == len(corpus) and r.doc["files"] == len(corpus) - 1, r.doc
    assert [s["status"] for s in r.doc["skipped"]] == ["vanished"], r.doc["skipped"]
    assert max(most) == 1 and len({p.parent for p in corpus}) > 1
