"""`preload replay` read without argparse (tunectl.preload.fastpath): the same answers as the full parser for
the shapes it takes, the full parser for everything else, and a start-up that imports only what a replay uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO, run_cli, run_process
from tests.preload_helpers import make_files
from tunectl.cli import build_parser
from tunectl.preload.fastpath import replay_args

ATTRS = ("command", "preload_command", "list", "json", "quiet", "verbose", "threads", "settle_timeout", "max_bytes",
         "no_metadata", "no_io_uring", "color", "propagate")


@pytest.mark.parametrize("argv", [
    ["preload", "replay", "L"],
    ["-q", "preload", "replay", "L"],  # the boot unit's line
    ["preload", "replay", "L", "-q"],
    ["preload", "-v", "replay", "--json", "L"],
    ["preload", "replay", "L", "--settle-timeout", "0", "--threads", "4", "--max-bytes", "2G", "--no-metadata",
     "--no-io-uring"],
    ["preload", "replay", "--threads", "0", "-", "--verbose", "--quiet"],
    ["preload", "replay", "L", "--settle-timeout", "1e1", "--threads", " 7 "],
])
def test_the_plain_shapes_read_as_argparse_reads_them(argv: list[str]) -> None:
    lean = replay_args(argv)
    assert lean is not None
    full = build_parser(argv).parse_args(argv)
    assert {a: getattr(lean, a) for a in ATTRS} == {a: getattr(full, a) for a in ATTRS}


@pytest.mark.parametrize("argv", [
    ["preload", "replay", "--help"], ["preload", "replay", "-h", "L"],
    ["preload", "replay", "L", "--threads=3"],  # --opt=value: argparse's
    ["preload", "replay", "L", "--settle", "1"],  # an abbreviation: argparse's
    ["preload", "replay", "L", "-vv"], ["-v", "preload", "replay", "L", "-v"],  # debug logging
    ["preload", "--threads", "3", "replay", "L"],  # replay's option before replay: argparse refuses it
    ["preload", "replay", "L", "--threads", "three"], ["preload", "replay", "L", "--settle-timeout"],
    ["preload", "replay", "L", "--threads", "-1"],
    ["preload", "replay", "L", "M"], ["preload", "replay"], ["replay", "preload", "L"],
    ["preload", "show", "replay"], ["preload", "replay", "--", "L"],
    ["--sysfs-root", "/tmp", "preload", "replay", "L"], ["--state-dir", "/tmp", "preload", "replay", "L"],
    ["--color", "never", "preload", "replay", "L"], ["--propagate", "preload", "replay", "L"],
])
def test_every_other_line_goes_to_the_full_parser(argv: list[str]) -> None:
    assert replay_args(argv) is None


def test_a_refused_line_is_still_refused_with_argparse_words() -> None:
    r = run_cli("preload", "replay", "L", "--threads", "three")
    assert r.code == 2 and "--threads: invalid int value: 'three'" in r.err


def _same(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("seconds", "issue_seconds", "throughput_mb_s", "requests")}


def test_the_lean_replay_answers_as_the_full_one(tmp_path: Path) -> None:
    files = make_files(tmp_path / "tree", {"a": 5000, "b/c": 70000, "b/d": 0})
    lst = tmp_path / "t.list"
    assert run_cli("preload", "collect", str(tmp_path / "tree"), "-o", str(lst), env={}).code == 0
    files[0].write_bytes(b"changed")  # one skip, to compare the skipped part too
    lean = run_cli("preload", "replay", str(lst), "--json", env={})
    full = run_cli("preload", "replay", str(lst), "--json", env={}, propagate=True)  # --propagate: argparse's path
    assert (lean.code, full.code) == (0, 0)
    lean_doc, full_doc = json.loads(lean.out), json.loads(full.out)
    assert lean_doc["files"] == 2 and lean_doc["skipped"][0]["path"] == str(files[0])
    assert _same(lean_doc) == _same(full_doc)
    text_lean = run_cli("preload", "replay", str(lst), env={})
    assert text_lean.code == 0 and "2 files" in text_lean.out


def test_a_missing_list_is_an_error_for_people(tmp_path: Path) -> None:
    r = run_cli("preload", "replay", str(tmp_path / "nope.list"), env={})
    assert r.code == 2 and "cannot read the preload list" in r.err
    doc = json.loads(run_cli("preload", "replay", str(tmp_path / "nope.list"), "--json", env={}).out)
    assert doc["format"] == "tunectl-error"


def test_an_untrusted_sysfs_root_is_refused_on_the_lean_path_too(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    tree.mkdir(mode=0o777)
    os.chmod(tree, 0o777)  # others may write it
    lst = tmp_path / "e.list"
    lst.write_text(json.dumps({"format": "tunectl-preload", "version": 1, "files": 0}) + "\n")
    r = run_cli("preload", "replay", str(lst), env={"TUNECTL_SYSFS_ROOT": str(tree)})
    assert r.code == 2 and "cannot be trusted" in r.err


@pytest.mark.parametrize("quiet", [True, False])
@pytest.mark.parametrize("files", [0, 3])
def test_a_replay_imports_only_what_it_uses(tmp_path: Path, files: int, quiet: bool) -> None:
    """The start-up budget (#30: an empty or resident list at most 30 ms over `python -c pass`), asserted by what
    is imported, not by a timing: argparse, pathlib, threading, typing, the Context and the state store stay out.
    Not quiet, its lines (the total to read, before the reads; the report after) are plain: printed without
    tunectl.report's escaping, and so without json, re and enum (about 7 ms of CPU)."""
    lst = tmp_path / "e.list"
    lst.write_text(json.dumps({"format": "tunectl-preload", "version": 1, "files": 0}) + "\n")
    if files:
        lst = _list_of(tmp_path)
    # the boot unit's line, run as the installed `tunectl` script runs it (`python -m` would import runpy's own)
    script = "import sys; from tunectl.cli import main_entry; main_entry()"
    r = subprocess.run([sys.executable, "-c", script, *(["-q"] if quiet else []), "preload", "replay",
                        "--settle-timeout", "0", str(lst)],
                       capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONPROFILEIMPORTTIME": "1"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert quiet or files == 0 or "to read" in r.stderr and " in " in r.stdout  # (an empty list says nothing)
    order = [line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    assert "tunectl.preload.replay" in order  # the replay did run
    assert not set(order) & {"argparse", "pathlib", "threading", "tunectl.context", "tunectl.system.state",
                             "typing", "dataclasses", "subprocess"}
    # Nor ctypes (~4 ms) and the io_uring module (~2 ms more): the list is opened by a walk, and a small list's
    # stats run one by one, its directories walked too (the small-list path); a larger one pays for them.
    assert not set(order) & {"ctypes", "tunectl.system.iouring"}, order
    # Until the report is printed (tunectl.preload.text, after the reads were sent), not the report's tables and
    # colour patterns (the progress bar has its own module) nor contextlib: under a boot's emulated CPU and a cold
    # disk each module costs tenths of a second before the first read (#30's boot pair).
    # From tunectl's first module on: a system Python's site may import contextlib itself, for its .pth files.
    end = order.index("tunectl.preload.text") if "tunectl.preload.text" in order else len(order)
    before_output = order[order.index("tunectl"):end]
    # Nor json and re (with re's five modules, enum's patterns): the list is decoded by json's C scanner directly.
    heavy = set(before_output) & {"tunectl.report", "contextlib", "json", "json.decoder", "re", "re._compiler"}
    assert not heavy, f"imported before the replay's reads were sent: {sorted(heavy)}; in order: {before_output}"
    # Nor after: with nothing skipped the report is a line, drawn without the tables (nor, under -q, printed); and
    # the pressure file is decoded without a codec module.
    # The exit codes and verdict words are tunectl.named's constants: no enum (nor functools) at all.
    late = set(order[order.index("tunectl"):]) & {"tunectl.report", "json", "re", "encodings.ascii", "enum",
                                                  "functools"}
    assert not late, f"imported by a replay that skipped nothing: {sorted(late)}"


# ---------------------------------------------------------------- the settle wait: only for reads of our own

def _list_of(tmp_path: Path) -> Path:
    make_files(tmp_path / "tree", {"a": 5000, "b": 70000})
    lst = tmp_path / "t.list"
    assert run_cli("preload", "collect", str(tmp_path / "tree"), "-o", str(lst), env={}).code == 0
    return lst


@pytest.mark.parametrize("sent, waits", [((1000, 1000), False), ((1000, 9192), True), ((None, None), True)])
def test_the_replay_waits_for_the_disks_only_when_it_sent_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   sent: tuple, waits: bool) -> None:
    """A resident list sent no read: the disks may be busy with others' reads (here: always), which are not the
    replay's to wait for. A replay that sent reads, or cannot tell (no /proc/self/io), waits as before."""
    from tunectl.preload import replay as replay_module
    from tunectl.preload.listfile import read_list
    from tunectl.system.sysfs import Sysfs

    lst = _list_of(tmp_path)
    answers = iter(sent)
    monkeypatch.setattr(replay_module, "_own_read_bytes", lambda: next(answers))
    monkeypatch.setattr(replay_module, "requests_in_progress", lambda sysfs, devices: 1)  # someone else's reads, for ever
    report = replay_module.replay(Sysfs("/sys"), read_list(str(lst)), str(lst), settle_timeout=0.01)
    assert report.files == 2
    assert report.settled is (not waits)  # waited until the timeout, and said so; or did not wait at all


def _stat_line(in_progress: int) -> str:
    return " ".join(f"{n:8}" for n in [5, 0, 40, 3, 7, 0, 56, 2, in_progress, 9, 12, 0, 0, 0, 0, 0, 0]) + "\n"


@pytest.mark.parametrize("in_progress, driver, waits", [(0, "0 0\n", False), (0, "0 17\n", False),
                                                        (97, "0 0\n", True), (3, "2 1\n", True)])
def test_the_settle_wait_counts_every_request_in_progress_the_schedulers_queue_included(
        tmp_path: Path, in_progress: int, driver: str, waits: bool) -> None:
    """The wait ends on a zero of field 9 of `stat` (requests from when the block layer makes them until they
    complete), not of `inflight`, which on blk-mq counts only what the driver holds: under mq-deadline on a busy
    disk `inflight` read 0 with ~97 requests queued (measured), and the wait ended with the replay's reads unread."""
    from tunectl.preload import replay as replay_module
    from tunectl.system.sysfs import Sysfs

    (tmp_path / "dev" / "block" / "254:0").mkdir(parents=True)
    (tmp_path / "dev" / "block" / "254:0" / "inflight").write_text(driver)
    (tmp_path / "dev" / "block" / "254:0" / "stat").write_text(_stat_line(in_progress))
    sysfs = Sysfs(tmp_path)
    assert replay_module.requests_in_progress(sysfs, ["254:0"]) == in_progress
    assert replay_module.wait_until_drained(sysfs, ["254:0"], 0.01) is (not waits)


@pytest.mark.parametrize("stat, counted", [
    (_stat_line(0), 0),
    (_stat_line(97), 97),
    ("       5        0       40        3        7        0       56        2\n", 0),  # short: 8 fields, no field 9
    ("5 0 40 3 7 0 56 2 -4 9 12\n", 0),  # field 9 not a count
    ("5 0 40 3 7 0 56 2 many 9 12\n", 0),
    ("", 0),
    (None, 0),  # no stat file at all
])
def test_requests_in_progress_reads_field_9_of_each_devices_stat_and_sums_them(tmp_path: Path, stat: str | None,
                                                                               counted: int) -> None:
    """The public count the benchmarks wait by (the replay's own rule): a second device with 4 in progress is
    added; a stat that is missing, short or junk adds nothing rather than failing."""
    from tunectl.preload.replay import requests_in_progress
    from tunectl.system.sysfs import Sysfs

    for device, text in (("8:0", stat), ("8:16", _stat_line(4))):
        (tmp_path / "dev" / "block" / device).mkdir(parents=True)
        if text is not None:
            (tmp_path / "dev" / "block" / device / "stat").write_text(text)
    sysfs = Sysfs(tmp_path)
    assert requests_in_progress(sysfs, ["8:0"]) == counted
    assert requests_in_progress(sysfs, ["8:0", "8:16"]) == counted + 4
    assert requests_in_progress(sysfs, []) == 0


def _never_drains(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The replay's reads stand in as sent (its read bytes grow) and the disk as never done with them; the
    instants it looked at the disk."""
    from tunectl.preload import replay as replay_module

    sent = iter(range(0, 1 << 40, 4096))
    monkeypatch.setattr(replay_module, "_own_read_bytes", lambda: next(sent))
    looks: list[float] = []

    def in_flight(sysfs, devices) -> int:  # noqa: ANN001
        import time

        looks.append(time.monotonic())
        return 5

    monkeypatch.setattr(replay_module, "requests_in_progress", in_flight)
    return looks


def test_by_default_the_replay_returns_once_its_reads_are_sent_and_says_so(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As posix_fadvise(WILLNEED) does: one look at the disk, no wait; the text says the reads were sent to the
    disk (never that they were read) and how to wait for them; --json says it did not settle and was told 0."""
    lst = _list_of(tmp_path)
    looks = _never_drains(monkeypatch)
    r = run_cli("preload", "replay", str(lst), env={})
    assert r.code == 0 and len(looks) == 1, (r.out, r.err, looks)
    assert f"{lst}: sent 2 files (73.2 KiB) to the disk in " in r.out, r.out
    assert r.out.rstrip().endswith("; pass --settle-timeout S to wait for them") and " read" not in r.out, r.out
    looks.clear()
    doc = run_cli("preload", "replay", str(lst), "--json", env={}).doc
    assert (doc["settled"], doc["settle_timeout"], len(looks)) == (False, 0.0, 1), doc


def test_with_a_settle_timeout_the_replay_waits_for_its_reads_and_says_they_were_still_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lst = _list_of(tmp_path)
    looks = _never_drains(monkeypatch)
    r = run_cli("preload", "replay", str(lst), "--settle-timeout", "0.2", "--json", env={})
    assert r.code == 0 and (r.doc["settled"], r.doc["settle_timeout"]) == (False, 0.2), r.doc
    assert len(looks) > 1 and looks[-1] - looks[0] >= 0.2 and r.doc["seconds"] >= 0.2, (looks, r.doc)
    human = run_cli("preload", "replay", str(lst), "--settle-timeout", "0.2", env={})
    assert human.code == 0 and "(reads still in flight at the timeout)" in human.out and " sent " not in human.out


def test_a_replay_whose_disk_is_done_at_its_one_look_says_it_read_the_files(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tunectl.preload import replay as replay_module

    lst = _list_of(tmp_path)
    _never_drains(monkeypatch)
    monkeypatch.setattr(replay_module, "requests_in_progress", lambda sysfs, devices: 0)
    r = run_cli("preload", "replay", str(lst), env={})
    assert r.code == 0 and f"{lst}: 2 files, 73.2 KiB in " in r.out and "sent" not in r.out, r.out


@pytest.mark.parametrize("settled, timeout, said", [
    (True, 0.0, "40 disk requests, 0.50 s, floor 0.52 s at 200 MB/s sequential (1.0x the floor)"),
    (False, 0.0, "40 disk requests done by then, 0.50 s to send the reads, some still in flight, floor 0.52 s at "
                 "200 MB/s sequential"),
    (False, 0.4, "40 disk requests done by then, 0.50 s, reads still in flight at the timeout, floor 0.52 s at "
                 "200 MB/s sequential")])
def test_the_seconds_are_set_against_the_floor_only_when_the_reads_were_done(settled: bool, timeout: float,
                                                                             said: str) -> None:
    from tunectl.preload.replay import ReplayReport
    from tunectl.preload.stats import Floor
    from tunectl.preload.text import replayed

    report = ReplayReport("l.list")
    report.verbose, report.files, report.bytes, report.seconds, report.requests = 1, 10, 100 << 20, 0.5, 40
    report.settled, report.settle_timeout, report.floor = settled, timeout, Floor(200e6, 100 << 20)
    line = replayed(report)[-1]
    assert line == f"numbers: 100 MiB, 10 files, {said}", line


_MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs"}


def _fs_type(path: Path) -> str:
    """The type of the filesystem that holds path: the deepest mount point above it in /proc/self/mounts."""
    real = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


def test_the_kernel_counts_the_reads_a_willneed_sends(tmp_path: Path) -> None:
    """What the skip rests on: /proc/self/io's read_bytes grows when WILLNEED sends a read, at once (counted as
    the read is submitted, not when it completes), and not when the pages are already cached."""
    from tunectl.preload.replay import _own_read_bytes

    if _fs_type(tmp_path) in _MEMORY_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is on {_fs_type(tmp_path)}: its pages never come from a disk, so no read is sent")
    path = tmp_path / "f"
    path.write_bytes(os.urandom(256 << 10))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = _own_read_bytes()
        if before is None:
            pytest.skip("this kernel has no per-task I/O accounting")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        sent = _own_read_bytes()
        os.pread(fd, 1, (256 << 10) - 1)  # waits for the read to complete: the pages are then cached
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        again = _own_read_bytes()
    finally:
        os.close(fd)
    assert sent is not None and again is not None
    assert sent > before and again == sent


# ---------------------------------------------------------------- the list decoded without importing json

def _outcome(decode, text):  # noqa: ANN001, ANN202
    try:
        return "value", repr(decode(text))
    except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
        return type(e).__name__, str(e), getattr(e, "pos", None)


def test_the_lists_decoder_gives_what_json_loads_gives() -> None:
    """jsonscan.loads (json's C scanner called directly, for a boot replay's start-up) returns the value
    json.loads returns and raises the error it raises, on list lines and on random damage to them."""
    import random

    from tunectl.preload.jsonscan import loads

    good = ['{"format": "tunectl-preload", "version": 1, "files": 2, "mounts": {"8:1": "/"}}',
            '["/usr/lib/a b.py","8:1",12,4096,1700000000000000000,[[0,4096]],[123456]]',
            '["/x/\\u00e9\\ud800","8:1",1,0,-5,[],null]', "[1.5e3, -0.0, NaN, Infinity, -Infinity, true, false]",
            "[" + ",".join(["[1,2]"] * 50) + "]", "9" * 5000, "[" * 3000 + "]" * 3000]
    texts = [*good, "", " ", "\ufeff[]", "[] []", " [1] \n", "\t{}\r\n", "[1,]", '"\x01"', '"abc', "nul", "01"]
    rng = random.Random(30)
    chars = ' \t\n\r[]{},:"\\0123456789-+.eEnulltrueNaN\ufeff\x00\u00e9'
    for _ in range(3000):
        text = list(rng.choice(good[:5]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            if rng.random() < 0.5 and at < len(text):
                del text[at]
            else:
                text.insert(at, rng.choice(chars))
        texts.append("".join(text))
    for text in texts:
        assert _outcome(loads, text) == _outcome(json.loads, text), text[:80]


def test_a_damaged_line_is_the_lists_error_where_json_was_never_loaded(tmp_path: Path) -> None:
    """A replay decodes without loading json; Python 3.11's C scanner then raised SystemError ("returned NULL
    without setting an exception") on bad JSON inside a value (a list cut short by a full disk): exit 70, an
    internal error, instead of the FILE:LINE error and exit 2. Only a fresh process shows it (pytest loaded json)."""

    good = '["/usr/lib/a","8:1",12,4096,1700000000000000000,[[0,4096]],123456]'
    lst = tmp_path / "list"
    lst.write_text(json.dumps({"format": "tunectl-preload", "version": 1, "files": 2, "bytes": 8192}) + "\n"
                   + good + "\n" + good[:40] + "\n")
    result = run_process("preload", "replay", str(lst), env={**os.environ, "TUNECTL_STATE_DIR": str(tmp_path / "state")},
                         timeout=120)
    assert result.code == 2 and f"{lst}:3: not JSON" in result.err, (result.code, result.err)
