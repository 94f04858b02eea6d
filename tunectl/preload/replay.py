"""`preload replay`: bring a list into the page cache in physical order, as fast as the device allows.

Two passes. First stat() every file, many at once, through io_uring (or from
Python threads where io_uring is refused): the metadata reads run in parallel,
and each file is checked against the list. Then fadvise(WILLNEED) the listed
files in physical order from one thread, in read-ahead-window chunks, and return
once the reads are sent, as WILLNEED itself does (a program started next overlaps
the disk's tail); with a settle timeout, wait until then for the devices to have
no requests in progress (the scheduler's queue included).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from operator import eq, itemgetter
from stat import S_ISREG

from tunectl.errors import ExitCode, OutOfDescriptors, UsageError
from tunectl.output import Report
from tunectl.preload import order
from tunectl.preload.listing import Entry, ListError, PreloadList, column, total_bytes
from tunectl.preload.pressure import PressureGuard
from tunectl.preload.skip import CHANGED, UNREADABLE, Skip, failed, why_changed, why_differs
from tunectl.system.sysfs import Sysfs
from tunectl.system.trust import (
    LISTED_READ,
    NO_DESCRIPTORS,
    ListedOpener,
    Untrusted,
    kind,
    not_regular,
    open_listed,
    open_unlooked,
)

try:  # the data pass's clean case, compiled (setup.py, built in place by scripts/bootstrap); absent, the Python loop
    from tunectl.preload import _datapass  # reads every file. Tests set this None to run the Python loop alone.
except ImportError:
    _datapass = None

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.preload.listfile import ColumnsRead
    from tunectl.preload.metadata import MetadataPass
    from tunectl.preload.stats import Floor

MAX_SKIPS = 10_000  # skipped files listed one by one; beyond, only counted
SAMPLE = 1024  # the inode pass's first files, timed: do the inode reads wait for the disk at all?
# Stats per second above which the inode pass stops after SAMPLE files. Measured (2 CPUs): a cold ext4
# on a direct-I/O loop over this project's virtio disk, 27,000-83,000/s; warm, 150,000/s. A disk that
# seeks answers about a hundred inode-table or directory reads a second (~16 inodes each): ~2,000/s.
FAST_STATS = 10_000
# A list of at most this many files takes the small-list path (when --threads is not given): its inode pass stats
# one by one from this thread while each WINDOW of stats answers faster than FAST_STATS a second (from a cache),
# the rest many at once from the second window in a row that waits for the disk; its directories are opened by a walk rather than
# openat2, so a resident list loads neither ctypes nor the io_uring module. Measured (2 CPUs, /usr/share resident):
# stats one by one cost less than the ring at every size up to 2,048 files (0.07 against 0.51 ms for 16, 5.4 against
# 5.9 ms for 1,024), the ring's module and ctypes ~6 ms more at start; a walk costs ~35 us a directory against ~10
# for openat2 plus ~4 ms to load ctypes once, and each directory is opened twice (inode and data pass): even at
# 256 files (56 directories, 4.3 ms of walks against 5.0), dearer above (512 files, 218 directories).
SMALL_LIST = 256
WINDOW = 8
DIRS_AT_ONCE = 256  # the inode pass holds at most this many directories open (O_PATH) while it stats their files
# (fewer under a low `ulimit -n`: one fewer than its ListedOpener keeps, see trust.directories_to_keep)
MAX_THREADS = 256  # --threads beyond this: Python threads only pass the GIL around, io_uring gains nothing past 32
# The compiled pass opens and judges a run's directory itself (_datapass.c decide_directory, ListedOpener.directory's
# rule): False, it asks ListedOpener (tests that fake what a directory's file system says set it so)
DIRECTORIES_COMPILED = True
# Threads that issue a batch's reads on flash (its order the list's own), from the compiled pass: each takes every
# other block of 16 files of a span between two asks of the memory guard (_datapass.c read_two). Measured cold on
# this project's virtio disk (/usr/share, 53,625 files, 2 CPUs): the per-file calls in C alone, one thread 1.25 s to
# drained, two 0.93, three 0.90, four 0.92; a whole replay made to issue from two, 0.82x one's wall (blocks of 16).
# Not on a disk that may seek: on the VM tier's HDD model two issuers in physical order made the replay 2.9-7x slower
# (the same requests, the two threads' blocks interleaved at the disk, a seek between each), and its inode sample
# cannot say a disk does not seek (after the metadata pass it read nothing there, as on a cold loop device over a
# virtual disk, and its rate straddled FAST_STATS): a disk that says rotational keeps one (tests/vm/test_preload_model.py).
ISSUERS = 2
READ_AHEAD = 3  # a listed mark the compiled pass sets: read by an issuer past the other's stop (_datapass.c)
# A listed name with something mounted on it, where the replay opens without a look (trust.open_unlooked: EXDEV)
MOUNTED_OVER = "now mounted over: something is mounted on its name (not opened where names are not looked at)"
FIRST_CHUNK = 512  # a streamed list's first entries: checked (their inodes timed where the disk may seek) first
STREAM_CHUNK = 4096  # then entries checked at a time, each chunk's files read as soon as it is checked


class ReplayReport(Report):
    """What a replay did (a plain class: a boot-time replay does not pay for importing dataclasses; its base comes
    from tunectl.output, not tunectl.report's tables)."""

    def __init__(self, list_path: str) -> None:
        self.list_path = list_path
        self.files = 0
        self.bytes = 0
        self.skipped: list[Skip] = []
        self.seconds = 0.0
        self.issue_seconds = 0.0
        self.settled = True
        self.settle_timeout = 0.0  # how long it was told to wait for its reads (0: it returned once they were sent)
        self.order = "physical"
        self.threads = 0
        self.inode_pass = ""  # io_uring | threads | one-by-one (the small-list path) | none
        self.inode_pass_files = 0  # files the inode pass judged; the rest were checked as they were opened
        self.verbose = 0
        self.skip_counts: dict[str, int] = {}  # every skip by status; `skipped` keeps MAX_SKIPS
        self.methods: dict[str, str] = {}  # MAJ:MIN -> how it was ordered and why (rotational, queue depth)
        self.requests: int | None = None  # reads the disks completed during the replay (diskstats), None: unknown
        self.metadata: MetadataPass | None = None
        self.stopped = ""  # why the data pass stopped early ("" when it did not)
        self.pressure_share = 0.0  # the largest memory stall share seen between two checks
        self.floor: Floor | None = None  # measured under -v: the bytes over the disk's sequential rate
        self.moved: dict[str, str] = {}  # under -v: the list's devices renumbered at this boot, was -> now
        self.list_read = "whole"  # streamed: each chunk read as soon as it was checked; whole: all checked first
        self.list_why = ""  # why the list was read that way (-v)
        self.columns: ColumnsRead | None = None  # whether the entries came from LIST.cols, and why not
        self.data_pass = "compiled" if _datapass is not None else "Python"  # what read the files (-v)
        self.spans_split = 0  # spans of the data pass (up to 255 files) that two threads issued at once (-v)

    @property
    def throughput(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> ExitCode:
        """Vanished and changed files are expected (reported, exit 0); unreadable ones are a partial failure."""
        return ExitCode.PARTIAL if self.skip_counts.get(UNREADABLE) else ExitCode.OK

    def print_text(self, out) -> None:
        from tunectl.preload.text import print_report, replayed

        print_report(self, out, replayed)

    def add_skips(self, skips: list[Skip]) -> None:
        for skip in skips:
            self.skip_counts[skip.status] = self.skip_counts.get(skip.status, 0) + 1
        self.skipped.extend(skips[: max(0, MAX_SKIPS - len(self.skipped))])

    def to_json(self) -> dict:
        return {"list": self.list_path, "files": self.files, "bytes": self.bytes, "order": self.order,
                "skipped": [s.to_json() for s in self.skipped], "seconds": round(self.seconds, 4),
                "issue_seconds": round(self.issue_seconds, 4), "settled": self.settled,
                "settle_timeout": self.settle_timeout,
                "throughput_mb_s": round(self.throughput / 1e6, 1), "threads": self.threads,
                "inode_pass": self.inode_pass, "inode_pass_files": self.inode_pass_files,
                "skipped_by_status": dict(sorted(self.skip_counts.items())),
                "methods": dict(sorted(self.methods.items())), "requests": self.requests,
                "metadata": self.metadata.to_json() if self.metadata else None, "stopped": self.stopped or None,
                "floor": self.floor.to_json() if self.floor else None, "list_read": self.list_read,
                "columns": self.columns.to_json() if self.columns and self.columns.status else None}

    def add_issued(self, files: int, issued: int, skipped: list[Skip], guard: PressureGuard | None,
                   stopped: bool) -> bool:
        """A data pass's files, bytes and skips counted; `stopped` (memory pressure) said; returns `stopped`."""
        self.files, self.bytes = self.files + files, self.bytes + issued
        self.add_skips(skipped)
        if guard is not None:
            self.pressure_share = max(self.pressure_share, guard.share)
        if stopped and guard is not None:
            self.stopped = (f"memory pressure: tasks stalled on memory {100 * guard.share:.0f}% of the time "
                            f"(limit {100 * guard.limit:.0f}%); the rest of the list was not read")
        return stopped

    def already_read(self, settled: bool) -> str:
        """What a replay that stops part way had read, for its error: the files whose reads it had issued;
        `settled`: the disks finished those reads (else some were still in flight when it returned: not waited
        for, or still at the settle timeout)."""
        meta = self.metadata.bytes if self.metadata else 0
        if not self.files and not meta:
            return "; no file of the list was read"
        from tunectl.units import counted, format_bytes

        what = f"{counted(self.files, 'file')} ({format_bytes(self.bytes)})" if self.files else ""
        if meta:
            what += (" and " if what else "") + f"{format_bytes(meta)} of file system metadata"
        done = "had been read into the page cache" if settled else \
            "had been sent to the disk to read into the page cache, some still in flight at the settle timeout" \
            if self.settle_timeout else "had been sent to the disk to read into the page cache, not waited for"
        return f"; before it, {what} {done} (which changes nothing on disk), the rest of the list was not read"


class ListSource:
    """A list replayed as it is read: its checked chunks in file order (the first small), the bytes its entries
    may add up to (the memory cap, the metadata pass deducted), and the way back to the whole-list survey
    (`surveyed(checked)`: every entry checked and the total known before the first read, the chunks already
    decoded given back as `checked`, the rest read on from the same open list) for a disk that needs it.
    `over_cap(files, bytes, already)`: the error when the entries checked so far add up to more than `limit`."""

    def __init__(self, chunks: Iterator[Sequence[Entry]], limit: int,
                 surveyed: Callable[[Iterable[Sequence[Entry]]], Iterable[Sequence[Entry]]],
                 over_cap: Callable[[int, int, str], Exception]) -> None:
        self.chunks, self.limit, self.surveyed, self.over_cap = chunks, limit, surveyed, over_cap
        self.files = self.bytes = 0  # what the chunks checked so far hold

    def take(self, entries: Sequence[Entry]) -> bool:
        """Count a checked chunk before any of it is read; False when the count passes the cap."""
        self.files += len(entries)
        self.bytes += total_bytes(entries)
        return self.bytes <= self.limit

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()


class Stack:
    """What a replay needs of the disk under a file system: rotational or not, its queue depth, its window."""

    def __init__(self, device: str, rotational: bool | None, nr_requests: int | None, window: int,
                 disk_stat: str | None) -> None:
        self.device, self.rotational, self.nr_requests, self.window = device, rotational, nr_requests, window
        self.disk_stat = disk_stat  # the sysfs stat file of the disk (requests completed), None: unknown

    def describe(self, how: str) -> str:
        kind = {True: "rotational", False: "non-rotational", None: "rotational unknown"}[self.rotational]
        depth = f", queue depth {self.nr_requests}" if self.nr_requests else ""
        return f"{how} ({kind}{depth}, {self.window >> 10} KiB per call)"


def read_stack(sysfs: Sysfs, device: str) -> Stack:
    """The queue attributes of the disk under `device`; tunectl only reads them (nr_requests is never
    changed: a read-ahead tool that raised it locked machines up)."""
    from tunectl.devices.devnum import queue_dir  # paid only when the list names a device: not at start-up

    queue = queue_dir(sysfs, device)

    def number(attr: str) -> int | None:
        text = sysfs.read_or(f"{queue}/{attr}") if queue else None
        return int(text) if text and text.isdigit() else None

    rotational = number("rotational")
    return Stack(device, None if rotational is None else rotational == 1, number("nr_requests"),
                 order.window_bytes(number("read_ahead_kb"), number("max_sectors_kb")),
                 f"{os.path.dirname(queue)}/stat" if queue else None)


def _completed_reads(sysfs: Sysfs, stat_file: str | None) -> int | None:
    """Reads a disk has completed since boot (field 1 of its sysfs stat), None when unreadable."""
    fields = (sysfs.read_or(stat_file) or "").split() if stat_file else []
    return int(fields[0]) if fields and fields[0].isdigit() else None


def _requests_since(sysfs: Sysfs, baseline: Mapping[str | None, int | None]) -> int | None:
    """Reads the disks completed since `baseline` (theirs and anyone else's), None if any is unknown."""
    total = 0
    for stat_file, before in baseline.items():
        after = _completed_reads(sysfs, stat_file)
        if before is None or after is None:
            return None
        total += after - before
    return total if baseline else None


def _memory_pressure() -> str | None:
    try:
        with open("/proc/pressure/memory", "rb") as f:  # the kernel's, not a file anyone writes
            data = f.read()
    except OSError:
        return None
    # bytes.decode: no codec module to import before the first read. Not ASCII, it is not the kernel's (a file
    # mounted over it): its total then reads as no number, as a total in other digits does
    return data.decode("ascii", "replace")


def _own_read_bytes() -> int | None:
    """Bytes this process (all its threads, io_uring's workers among them) has sent to the disks to read, as the
    kernel counts them when it submits each read (/proc/self/io, read_bytes); None where the kernel does not say."""
    from tunectl.system.roots import self_proc

    try:
        with open(self_proc("self", "io"), "rb") as f:  # the kernel's own file for this process
            for line in f:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def requests_in_progress(sysfs: Sysfs, devices: Iterable[str]) -> int:
    """Requests the devices (MAJ:MIN, as a list names them) have in progress: field 9 of sysfs `stat`, which
    counts a request from the moment the block layer makes it (the I/O scheduler holding it included) until it
    completes. The one rule for "the disk is done": the benchmarks wait by it too.
    Not `inflight`: on blk-mq it counts only what the driver holds. With mq-deadline on a busy disk it reads 0
    or 1 while ~100 requests wait in the scheduler (measured), so a zero there ended the wait while this
    replay's reads were still queued. A zero of field 9, looked at after the last read was sent, means every
    read sent before it has completed; it counts others' writes too, so a disk that is never idle runs the wait
    to its timeout (settled false) rather than ending it early. A device whose stat is missing, short or not
    counts adds 0 (nothing to wait for that can be seen)."""
    total = 0
    for device in devices:
        fields = (sysfs.read_or(f"dev/block/{device}/stat") or "").split()
        total += int(fields[8]) if len(fields) > 8 and fields[8].isdigit() else 0
    return total


class _Checker:
    """The inode pass: stat() every file, many at once, and keep the ones that are still the listed file.

    An open() waits for its inode at queue depth 1: warmed first, in parallel, the
    data pass that follows opens from the cache and issues its reads back to
    back, so they merge. The stats run in io_uring's kernel workers where the
    kernel allows it, else from Python threads in inode order (the order of the
    inode tables).
    """

    def __init__(self, entries: Sequence[Entry], devnums: dict[str, int], progress, lock) -> None:  # noqa: ANN001
        self.entries, self.devnums, self.progress, self.lock = entries, devnums, progress, lock
        self.listed = bytearray(len(entries))  # 1: still the listed file, read it; 2: read it, checked at open
        self.decided = bytearray(len(entries))  # 1: listed, or skipped with a reason
        self.skipped: list[Skip] = []
        self.how, self.parallel = "io_uring", 0
        self.use_io_uring = True
        self.ring = None  # the io_uring of the stats while the pass holds one: closed by `run` on every way out
        self.one_by_one = False  # the small-list path's stats, one by one, while they answer from a cache
        self.walk = False  # directories opened by a walk (no ctypes): the small-list path's
        self.deferred = 0  # files left to be checked as they are opened (listed[i] == 2)
        self.sample_rate = 0.0  # stats per second over the pass's first SAMPLE files
        self.reads: Callable[[], int | None] | None = None  # reads the list's disks completed so far (_Disks.reads)
        self.read_meanwhile: int | None = None  # of which while the sample ran; None: unknown

    def run(self, parallel: int | None, use_io_uring: bool = True, small: bool = False) -> None:
        """`parallel` stats at once; None: 32 io_uring workers (kernel threads, cheap) or 8 Python
        threads (more spend their time handing the GIL over). `small`: the small-list path (SMALL_LIST): stats
        one by one from this thread while they answer from a cache (`_while_fast`), many at once from the second
        window of WINDOW in a row that does not; directories opened without ctypes.

        The pass hides the latency of inode reads on a disk that seeks. Its first SAMPLE files tell
        whether there is any: when they complete faster than FAST_STATS per second the inode tables
        answered from a cache (the host's under a virtual disk that calls itself rotational, or this
        machine's), and the rest are checked as they are opened (`deferred`), a stat per file saved.
        """
        # each entry made once (a chunk of a list's columns makes one each time it is taken): the pass takes each
        # several times, and its sample is timed
        self.entries = entries = self.entries[:]
        todo = order.inode_indices(entries)
        self.use_io_uring, self.one_by_one, self.walk = use_io_uring, small, small
        if small:
            self.how, self.parallel = "one-by-one", 1
        elif use_io_uring:
            self.ring = self._ring(parallel)
        try:
            head, rest = todo[:SAMPLE], todo[SAMPLE:]
            before = self.reads() if self.reads is not None else None
            started = time.monotonic()
            self._stat(head, parallel)
            self.sample_rate = len(head) / max(time.monotonic() - started, 1e-6)
            after = self.reads() if self.reads is not None and before is not None else None
            self.read_meanwhile = None if after is None or before is None else after - before
            if rest and self.cached():
                for i in rest:
                    self.listed[i] = 2
                self.deferred = len(rest)
                self._advance(len(rest))
                return
            self._stat(rest, parallel)
        finally:  # also a ring opened part way (the small-list path's switch) when the pass raises (a Ctrl-C)
            self._close_ring()

    def cached(self) -> bool:
        """Whether the sample's inodes answered from a cache: its disks completed no read while it ran, or it
        came at FAST_STATS a second. The rate alone is a wall clock: on a loaded machine (load 5 on 2 CPUs) a
        sample of cached inodes came at 13,000-32,000 stats/s against 150,000 quiet, and whether a replay streamed
        or surveyed its whole list first was a coin toss (100-300 ms either way). A read the disk did not complete
        cannot have answered a stat, so none at all means none waited for it, however slow the CPU; a read by
        anyone else meanwhile (or a disk whose count is unknown) leaves the rate to decide, as before."""
        return self.read_meanwhile == 0 or self.sample_rate >= FAST_STATS

    def said_cached(self) -> str:
        """What `cached` went by, in words."""
        if self.sample_rate >= FAST_STATS:
            return f"{self.sample_rate:,.0f} stats/s, the inode tables answer from a cache"
        return f"{self.sample_rate:,.0f} stats/s and no read of the disk meanwhile: the inode tables answer from a cache"

    def _close_ring(self) -> None:
        ring, self.ring = self.ring, None
        if ring is not None:
            ring.close()

    @staticmethod
    def _ring(parallel: int | None):  # noqa: ANN205 (ctypes stays lazy)
        """An io_uring for the stats, None where the kernel refuses it (old kernel, io_uring_disabled, seccomp):
        threads do them then."""
        from tunectl.system.iouring import StatxRing  # ctypes: paid only when there is something to stat

        try:
            return StatxRing.open(workers=min(parallel or 32, MAX_THREADS))
        except OSError:
            return None

    def _stat(self, indices: list[int], parallel: int | None) -> None:
        """Judge `indices` (in their order), each name stat'd relative to its directory, opened (O_PATH) without
        following any link on the way (`ListedOpener.directory`), so root never looks a name up through another
        user's directory link (into an automount point, a mount triggered as root). A directory with a link on its
        way is left to the data pass, whose open walks it following only root's or the user's links. At most
        DIRS_AT_ONCE directories (fewer under a low `ulimit -n`) are held open: `indices` are judged in runs.
        Out of descriptors all the same (the caller holds more than the limit left room for), what is not judged
        yet is left to the data pass, which looks at each name as it opens it and lets its directories go to open
        one more."""
        run: list[int] = []
        names: list[str] = []
        fds: list[int] = []
        with ListedOpener(keep=DIRS_AT_ONCE + 1, walk=self.walk) as opener:
            # A run ends one directory before the opener would let them all go (and the run's descriptors with
            # them): its own cap less one, also where a low limit made that cap smaller (at least 1).
            keep = max(1, opener.keep - 1)
            directory_of, dirs, entries, listed = opener.directory, opener.dirs, self.entries, self.listed
            for i in indices:
                directory, _, name = entries[i].path.rpartition("/")
                if directory not in dirs and len(dirs) >= keep:
                    self._stat_run(run, names, fds, parallel)
                    opener.close()
                    run, names, fds = [], [], []
                try:
                    fd = directory_of(directory or "/")[0]
                except OSError as e:
                    if e.errno in NO_DESCRIPTORS:  # the process's limit (ulimit -n), not the directory's fault
                        left = [*run, *indices[indices.index(i):]]  # judging the run could need one more fd
                        for j in left:
                            listed[j], self.decided[j] = 2, 1
                        self._advance(len(left))
                        return
                    self._failed(i, e.errno or errno.EIO)  # gone, or not a directory: its files fail the same way
                    continue
                if fd < 0:  # a link on the way (or no openat2): looked at as it is opened, never followed here
                    listed[i], self.decided[i] = 2, 1
                    self._advance(1)  # judged (left to the data pass) all the same: counted, as every file is
                    continue
                run.append(i)
                names.append(name)
                fds.append(fd)
            if run:
                self._stat_run(run, names, fds, parallel)

    def _stat_run(self, indices: list[int], names: list[str], fds: list[int], parallel: int | None) -> None:
        """Judge `indices` (the name of each relative to its directory's descriptor) through the pass's ring
        (`ring`), or from threads when there is none or it fails part way (then the threads finish what it left,
        and the ring is let go); on the small-list path, one by one while they answer from a cache, the rest so
        (through a ring opened then, held in `ring` for `run` to close)."""
        if self.one_by_one:
            self._from_thread(self._while_fast(zip(indices, names, fds)))
            if self.one_by_one:
                return
            left = [j for j, i in enumerate(indices) if not self.decided[i]]  # a window waited for the disk
            indices, names, fds = [indices[j] for j in left], [names[j] for j in left], [fds[j] for j in left]
            if self.use_io_uring:
                self.ring = self._ring(parallel)
        if self.ring is not None:
            self.how, self.parallel = "io_uring", min(parallel or 32, MAX_THREADS)
            try:
                self._from_ring(self.ring, indices, names, fds)
                return
            except OSError:  # the ring failed part way (it should not): threads finish the pass
                self._close_ring()
        import threading  # only where io_uring is refused: not at start-up

        from tunectl.system.interrupts import threads_without_stops

        left = [j for j, i in enumerate(indices) if not self.decided[i]]
        if not left and self.how == "threads":  # nothing after the sample: the threads that judged it are said
            return
        self.how, self.parallel = "threads", min(parallel or 8, MAX_THREADS)
        todo = iter([(indices[j], names[j], fds[j]) for j in left])
        workers = []  # no more than files to judge (--threads 100000000 built that many: out of memory, exit 70)
        for i in range(min(self.parallel, len(left)) - 1):
            w = threading.Thread(target=self._from_thread, args=(todo,), name=f"preload-inodes-{i}", daemon=True)
            try:
                with threads_without_stops():
                    w.start()
            except RuntimeError:  # "can't start new thread": a task limit (ulimit -u, a unit's TasksMax)
                self.parallel = len(workers) + 1
                break
            workers.append(w)
        self._from_thread(todo)
        for w in workers:
            w.join()

    def _while_fast(self, todo: Iterable[tuple[int, str, int]]) -> Iterator[tuple[int, str, int]]:
        """`todo` while its stats answer from a cache: each WINDOW of them (the caller's stat and judgement
        included) done faster than FAST_STATS a second. At the second slower window in a row `one_by_one` goes
        False and the rest is left (to be stat'd many at once: the inode reads wait for the disk). One slow window
        alone is this process preempted (measured: a 5 ms window among 50 us ones on the shared 2-CPU machine),
        not the disk, which makes every window slow."""
        clock = time.monotonic
        start = clock()
        slow = 0
        for n, item in enumerate(todo):
            if n and not n % WINDOW:
                now = clock()
                slow = slow + 1 if (now - start) * FAST_STATS > WINDOW else 0
                if slow == 2:
                    self.one_by_one = False
                    return
                start = now
            yield item

    def trust_all(self) -> None:
        """No inode pass: every file goes to the data pass, which looks at each name before it opens it."""
        self.listed = bytearray(b"\2" * len(self.entries))
        self.how, self.parallel, self.deferred = "none", 0, len(self.entries)
        if self.progress is not None:
            self.progress.advance(len(self.entries))

    def _failed(self, i: int, err: int) -> None:
        self.skipped.append(failed(self.entries[i].path, err))
        self.decided[i] = 1

    def _judge(self, i: int, ino: int, size: int, mtime_ns: int, dev: int, mode: int) -> None:
        """Entry i is read if the file found (not followed, if a link) is still the listed regular file,
        else skipped as changed."""
        entry = self.entries[i]
        devnum = self.devnums[entry.device]
        if ino == entry.inode and size == entry.size and mtime_ns == entry.mtime_ns and dev == devnum \
                and S_ISREG(mode):
            self.listed[i] = 1
        else:
            self.skipped.append(Skip(entry.path, CHANGED, why_differs(entry, ino, size, mtime_ns, dev, devnum, mode)))
        self.decided[i] = 1

    def _advance(self, n: int) -> None:
        if self.progress is not None:
            with self.lock:
                self.progress.advance(n)

    def _from_ring(self, ring, by_inode: list[int], names: list[str], fds: list[int]) -> None:
        """Judge the entries at `by_inode` (in inode order: the inode tables' order) through io_uring, each by its
        name in `names` relative to the directory descriptor in `fds`."""
        judge, makedev, seen = self._judge, os.makedev, 0
        results = ring.statx_all([os.fsencode(name) for name in names], fds)
        try:
            for j, result in results:
                i = by_inode[j]
                seen += 1
                if not seen % 256:
                    self._advance(256)
                if type(result) is int:
                    self._failed(i, -result)
                else:
                    ino, size, mtime_ns, (major, minor), mode = result
                    judge(i, ino, size, mtime_ns, makedev(major, minor), mode)
        finally:  # counted even when the ring fails part way; closed at once, not when collected
            results.close()
            self._advance(seen % 256)

    def _from_thread(self, todo: Iterator[tuple[int, str, int]]) -> None:
        stat, judge, seen = os.stat, self._judge, 0
        try:
            for i, name, dir_fd in todo:  # a shared list iterator: each entry goes to one thread
                seen += 1
                if not seen % 256:
                    self._advance(256)
                try:
                    st = stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError as e:
                    self._failed(i, e.errno or errno.EIO)
                else:
                    judge(i, st.st_ino, st.st_size, st.st_mtime_ns, st.st_dev, st.st_mode)
        finally:
            self._advance(seen % 256)


def _why_opened_differs(entry: Entry, st: os.stat_result, devnum: int, checked: bool) -> str:
    """Why the file opened is not the listed one; `checked`: the inode pass had found the listed file."""
    if checked and (not S_ISREG(st.st_mode) or st.st_ino != entry.inode or st.st_dev != devnum):
        return f"replaced since the inode pass ({kind(st.st_mode)})"
    return why_changed(entry, st, devnum)


def _issue(entries: Sequence[Entry], order_: Sequence[int], listed: bytearray, windows: dict[str, int],
           devnums: dict[str, int], progress, skipped: list[Skip], guard: PressureGuard | None = None,
           walk: bool = False, issuers: int = 1) -> tuple[int, int, bool]:
    """The data pass: WILLNEED over the listed files in the order given, back to back.

    Issued without pause, neighbouring files' reads queue together and the
    scheduler merges them (about 100 KiB per request on /usr/share, against
    4 KiB when each open() waits for an inode). On a disk that may seek one thread issues, in physical order;
    on flash `issuers` (see issuers_for). Every 256 files `guard` is asked whether memory
    pressure rose: then the pass stops. Returns (files, bytes issued, stopped). `walk`: directories opened by a
    walk, not openat2 (the small-list path: no ctypes to load).
    """
    with ListedOpener(walk=walk) as opener:
        return _issue_with(opener, entries, order_, listed, windows, devnums, progress, skipped, guard, issuers)


def issuers_for(how: str, walk: bool = False) -> tuple[int, str]:
    """How many threads issue a batch's reads in the order `how`, and why (-v): two (ISSUERS, at most one per CPU
    this process may use) on flash, where the compiled pass reads the files and decides their directories itself: while one waits
    for a cold inode or directory the other keeps the device's queue full; one on a disk that may seek (its physical
    order is the point there), in the Python loop, and where directories are walked (the small-list path)."""
    if how != "list":
        return 1, "1 issuing thread: the disk may seek, one keeps the physical order"
    if _datapass is None or walk or not DIRECTORIES_COMPILED:
        return 1, "1 issuing thread: the files read by the Python loop" if _datapass is None else \
            "1 issuing thread: its directories decided by Python"
    cpus = len(os.sched_getaffinity(0))
    if min(ISSUERS, cpus) < 2:
        return 1, "1 issuing thread: one CPU usable"
    n = min(ISSUERS, cpus)
    return n, (f"up to {n} issuing threads: non-rotational, the list's order from {n} threads at once keeps its "
               "queue fuller")


def _not_opened(path: str, e: Untrusted | OSError, name: str = "", dir_fd: int = -1, looked: bool = True) -> Skip:
    """Why a listed file did not open (`e`, not for want of a descriptor): refused by its look (Untrusted), a
    link in its place (ELOOP) or a mount on its name (EXDEV), changed; else unreadable. A name opened without a
    look (a nodev mount, where a device node refuses its open with EACCES) is looked at now: a device there is
    "changed", as a look before would have said."""
    if isinstance(e, Untrusted):
        return Skip(path, CHANGED, f"now {e.found}")
    code = e.errno or errno.EIO
    if code == errno.ELOOP:
        return Skip(path, CHANGED, "now a symbolic link")
    if code == errno.EXDEV:  # only an open without a look says it (open_unlooked, the compiled pass's)
        return Skip(path, CHANGED, MOUNTED_OVER)
    if code == errno.EACCES and not looked and dir_fd >= 0:
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            pass
        else:
            if not S_ISREG(mode):
                return Skip(path, CHANGED, f"now {not_regular(path, mode).found}")  # what a look would have said
    return failed(path, code)


def _open_again(opener: ListedOpener, path: str, checked: bool, skipped: list[Skip], files: int, issued: int) -> int:
    """`path` opened once more (its directory's descriptors let go): its descriptor, or -1 with why it did not
    open in `skipped`. Out of descriptors again: _Stopped, counting the `files` and `issued` bytes sent."""
    try:
        return opener.open(path, checked=checked)
    except (Untrusted, OSError) as e:
        if isinstance(e, OSError) and e.errno in NO_DESCRIPTORS:
            raise _Stopped(_out_of_descriptors(path, e), files, issued) from None
        skipped.append(_not_opened(path, e))
    return -1


def _out_of_descriptors(path: str, e: OSError) -> Callable[[str], Exception]:
    """The error of a replay that could not open `path` for want of a descriptor, even with every directory it
    kept let go (`already`: what it had read before)."""
    return lambda already: OutOfDescriptors.at(path, e.errno == errno.ENFILE, f"the replay stopped{already}",
                                               "replay again")


def pass_columns(entries: Sequence[Entry]) -> tuple | None:
    """What the compiled data pass reads of `entries` (see _datapass.c): the paths and the devices (lists), and as
    bytes of native numbers each entry's device (u32, its index into the devices), inode, size (u64), mtime_ns
    (i64), count of ranges (u32), where its ranges begin (None: one pair each), the first's position, and the
    pairs' offsets and lengths (u64). A chunk of a list's columns (`columns.Chunk`) gives its own, no entry made;
    any other sequence's are made from its entries, as one pair each: (0, size) with a count of 1 where its ranges
    are that one range, the whole file (the Python loop's own test), a count of 0 otherwise (not the clean case).
    None when a value does not fit (not an int, past 64 bits, a negative size): the Python loop then takes every
    file of the batch, and decides it, as it decides every file it meets."""
    own = getattr(entries, "pass_columns", None)
    if own is not None:
        return own()
    from array import array

    try:
        paths, devices, sizes = list(map(itemgetter(0), entries)), list(map(itemgetter(1), entries)), \
            list(map(itemgetter(3), entries))
        ones = list(map(eq, map(itemgetter(5), entries), zip(zip(repeat(0), sizes))))  # ranges are tuples in a list
        names = list(dict.fromkeys(devices))
        index = bytes(4 * len(devices)) if len(names) == 1 else array("I", map(
            dict(zip(names, range(len(names)))).__getitem__, devices)).tobytes()
        numbers = [array("Q", map(itemgetter(2), entries)), array("Q", sizes), array("q", map(itemgetter(4), entries))]
        counts = array("I", ones)
    except (OverflowError, TypeError, IndexError):
        return None
    if any(a.itemsize != 8 for a in numbers) or counts.itemsize != 4:
        return None
    return (paths, names, index, *(a.tobytes() for a in numbers), counts.tobytes(), None, 0, bytes(8 * len(paths)),
            numbers[1].tobytes())


def _issue_with(opener: ListedOpener, entries, order_, listed, windows, devnums, progress, skipped, guard,
                issuers: int = 1) -> tuple[int, int, bool]:
    # The hot loop: ~54,000 files a second on /usr/share, so ListedOpener.open is inlined (a call, a split and a
    # dict look-up a file less), the directory and the device are looked up once per run of files, and an entry is
    # unpacked once instead of loading its fields one by one. Per file: open (a look first for a name not checked,
    # but in a directory on a nodev mount no other user can write: ListedOpener), fstat, fadvise, close.
    close, fadvise, willneed, fstat, open_, lstat = os.close, os.posix_fadvise, os.POSIX_FADV_WILLNEED, os.fstat, \
        os.open, os.stat
    directory_of, flags, regular = opener.directory, LISTED_READ, S_ISREG
    files = issued = 0
    last_dir: str | None = None
    last_device: str | None = None
    dir_fd, look, devnum, window = -1, True, 0, 0
    columns = pass_columns(entries) if _datapass is not None else None
    compiled = _datapass.issue if columns is not None else None
    # its directories opened and judged by the compiled pass itself (the decision ListedOpener.directory makes, in
    # C: ~85 ms of CPU in Python calls on /usr/share's 5,083 runs), but for a walk (the small-list path)
    own = DIRECTORIES_COMPILED and not opener.walk
    total, n = len(order_), 0
    one_span = -1  # the span (n >> 8) an issuer stopped in: the rest of it is read by one (not planned again per stop)
    while n < total:
        if compiled is not None and n % 256 != 255:
            # The clean case, compiled, up to the next file where the guard is asked (n counts from 0 here): it
            # stops at the first file it leaves to this loop (anything but "read": see _datapass.c), at `stop`. With
            # two issuers a file read past `stop` is marked READ_AHEAD: counted when reached, never opened again
            stop, f, b, *issuer_stopped = compiled(*columns, order_, listed, n, min(total, n | 255), directory_of,
                                                   devnums, windows, flags, own, issuers if n >> 8 != one_span else 1)
            if issuer_stopped and issuer_stopped[0]:
                one_span = stop >> 8
            files, issued, n = files + f, issued + b, stop
            last_dir = last_device = None  # the directory and device are looked up again (kept: a dict look-up)
            if n >= total:
                break
        i = order_[n]
        n += 1
        if not n % 256:
            if progress is not None:
                progress.advance(256)
            if guard is not None and guard.stop(time.monotonic()):
                return files, issued, True
        checked = listed[i]
        if not checked:
            continue
        if checked == READ_AHEAD:  # read past an earlier stop by the compiled pass's other issuer: counted where one
            files, issued = files + 1, issued + entries[i][3]  # issuer reads it (a clean whole file: its size)
            continue
        # checked: 1, the inode pass found the listed file; 2, not looked at yet
        path, device, inode, size, mtime_ns, ranges, _ = entry = entries[i]
        directory, _, name = path.rpartition("/")
        try:
            if directory != last_dir:
                dir_fd, look = directory_of(directory or "/")  # resolved once: a directory swapped for a link is
                last_dir = directory                          # not followed
            if dir_fd < 0:
                fd = open_listed(path, checked=checked == 1)
            elif not look:  # nodev, chosen by no other: opened without a look, nor across a mount on the name
                fd = open_unlooked(dir_fd, name, path)
            else:
                if checked != 1:  # a device node or a named pipe another user put there is never opened
                    mode = lstat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                    if not regular(mode):
                        raise not_regular(path, mode)
                fd = open_(name, flags, dir_fd=dir_fd)
        except Untrusted as e:
            skipped.append(_not_opened(path, e))
            continue
        except OSError as e:
            if e.errno not in NO_DESCRIPTORS:
                skipped.append(_not_opened(path, e, name, dir_fd, look or checked == 1))
                continue
            # Out of descriptors (ulimit -n): the process's, not the file's. The directories kept are let go and
            # the file opened once more; out again, the replay stops (never "unreadable").
            opener.close()
            last_dir = None
            fd = _open_again(opener, path, checked == 1, skipped, files, issued)
            if fd < 0:
                continue
        if device != last_device:
            devnum, window, last_device = devnums[device], windows[device], device
        try:
            # The file opened is judged, before any read: the listed regular file (device, inode, size, mtime)?
            st = fstat(fd)
            if st.st_ino != inode or st.st_size != size or st.st_mtime_ns != mtime_ns or st.st_dev != devnum \
                    or not regular(st.st_mode):
                skipped.append(Skip(path, CHANGED, _why_opened_differs(entry, st, devnum, checked == 1)))
                continue
            if size <= window and len(ranges) == 1 and ranges[0] == (0, size):
                fadvise(fd, 0, size, willneed)  # the common small file: one call
                issued += size
            else:
                for offset, length in order.chunks(ranges, size, window):
                    fadvise(fd, offset, length, willneed)
                    issued += length
            files += 1
        except OSError as e:
            skipped.append(Skip(path, UNREADABLE, os.strerror(e.errno or errno.EIO)))
        finally:
            close(fd)
    if progress is not None:
        progress.advance(total % 256)
    return files, issued, False


class _Disks:
    """The disks a replay touches: each one's stack (read once), readahead window, device number, and the reads
    its disk had completed before the replay asked for any (to count the requests it caused)."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs
        self.stacks: dict[str, Stack] = {}
        self.windows: dict[str, int] = {}
        self.devnums: dict[str, int] = {}
        self.baseline: dict[str | None, int | None] = {}  # disk stat file -> reads completed before we asked

    def stack(self, d: str) -> Stack:
        if d not in self.stacks:
            self.stacks[d] = read_stack(self.sysfs, d)
            if self.stacks[d].disk_stat not in self.baseline:
                self.baseline[self.stacks[d].disk_stat] = _completed_reads(self.sysfs, self.stacks[d].disk_stat)
        return self.stacks[d]

    def reads(self, devices: set[str]) -> Callable[[], int | None]:
        """The reads the disks under `devices` (each counted once) have completed since boot, None when any count is
        unknown; asked before and after the inode sample (`_Checker.cached`)."""
        stats = {self.stack(d).disk_stat for d in devices}

        def total() -> int | None:
            counts = [_completed_reads(self.sysfs, f) for f in stats]
            return None if not counts or None in counts else sum(counts)  # type: ignore[arg-type]

        return total

    def add(self, devices: set[str]) -> None:
        for d in devices - self.windows.keys():
            self.windows[d] = self.stack(d).window
            self.devnums[d] = os.makedev(*map(int, d.split(":")))


def _check_inodes(checker: _Checker, how: str, entries: Sequence[Entry], threads: int | None,
                  use_io_uring: bool, small: bool = False) -> str:
    """The inode pass of one batch (or none: each file checked as it is opened); how the inodes were read.
    `small`: the small-list path (`_Checker.run`)."""
    if not order.inode_pass(how):
        checker.trust_all()
        return "inodes read at open"
    checker.run(max(1, threads) if threads is not None else None, use_io_uring, small)
    if small:
        from tunectl.units import counted

        return f"small list ({counted(len(entries), 'file')}, at most {SMALL_LIST}): inodes read one by one" + (
            ", answering from a cache" if checker.one_by_one else
            f" until two windows of {WINDOW} in a row took over {1000 * WINDOW / FAST_STATS:.1f} ms each (the disk), "
            "then many at once")
    if checker.deferred:
        from tunectl.units import counted

        return (f"inode pass stopped after {counted(len(entries) - checker.deferred, 'file')}: "
                f"{checker.said_cached()}; the rest read at open")
    return "inodes read ahead, many at once"


def wait_until_drained(sysfs: Sysfs, devices: Sequence[str], timeout: float) -> bool:
    """WILLNEED returns once the reads are queued: wait, at most `timeout` seconds, until the devices have no
    requests in progress, queued or dispatched (`requests_in_progress`; 0: one look, no wait); False when some
    still were."""
    deadline = time.monotonic() + timeout
    while requests_in_progress(sysfs, devices):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def replay(sysfs: Sysfs, plist: PreloadList | Iterable[Sequence[Entry]], list_path: str, progress=None,
           threads: int | None = None, settle_timeout: float = 0.0, use_io_uring: bool = True,
           metadata: Mapping[str, Sequence[tuple[int, int]]] | None = None, dev_root: str | None = None,
           time_order: bool = False, pressure: Callable[[], str | None] | None = _memory_pressure,
           source: ListSource | None = None) -> ReplayReport:
    """The metadata pass first (the device ranges `metadata` names, from `dev_root`'s nodes), then two
    passes over each batch of the list (a PreloadList is one batch): inodes, `threads` at a time
    (io_uring workers, or Python threads where io_uring is refused), checking each file is the listed one;
    then the data reads from one thread, ordered by what the disk is (`order.method`: physical, time bins
    of a `time_order` list, or the list's order on flash), stopping if memory pressure rises; then wait
    for the reads. `progress` counts every file twice."""
    started = time.monotonic()
    read_before = _own_read_bytes()
    split_before = _datapass.split() if _datapass is not None else 0
    report = ReplayReport(list_path)
    report.settle_timeout = settle_timeout
    disks = _Disks(sysfs)
    orders: set[str] = set()

    def metadata_first() -> None:
        if metadata and report.metadata is None:
            for d in metadata:
                disks.stack(d)
            from tunectl.preload import metadata as metadata_pass

            # on a disk that seeks the pass is waited for: the inode pass then reads only what it did not hold
            report.metadata = metadata_pass.replay(
                metadata, {d: s.window for d, s in disks.stacks.items()}, sysfs, dev_root,
                wait=[d for d, s in disks.stacks.items() if order.inode_pass(order.method(s.rotational, False))])

    guard = PressureGuard(pressure, started) if pressure is not None else None
    parts: Iterable[Sequence[Entry]] | None = [plist.entries] if isinstance(plist, PreloadList) else plist
    try:
        if source is not None:
            parts = _streamed(report, disks, source, orders, progress, guard, threads, use_io_uring, time_order,
                              metadata_first)
        if parts is not None:
            metadata_first()
            for n, entries in enumerate(parts):
                # the small-list path is a list's, not a batch's: only a first batch can be a whole small list (a
                # surveyed list's batches are listfile.BATCH long but its last, which must not take the path)
                if entries and _replay_batch(report, disks, entries, orders, progress, guard, threads,
                                             use_io_uring, time_order, small=n == 0 and len(entries) <= SMALL_LIST):
                    break
    except _Stopped as stop:  # what was sent before it is waited for as at the end, so its count is true
        report.files, report.bytes = report.files + stop.files, report.bytes + stop.issued
        settled = _settle(sysfs, disks, read_before, settle_timeout)
        raise stop.error(report.already_read(settled)) from None
    report.order = orders.pop() if len(orders) == 1 else "mixed" if orders else "physical"
    report.spans_split = _datapass.split() - split_before if _datapass is not None else 0
    report.skipped.sort(key=lambda s: s.path)
    report.issue_seconds = time.monotonic() - started
    report.settled = _settle(sysfs, disks, read_before, settle_timeout)
    report.seconds = time.monotonic() - started
    report.requests = _requests_since(sysfs, disks.baseline)
    return report


def _settle(sysfs: Sysfs, disks: _Disks, read_before: int | None, timeout: float) -> bool:
    """Wait, at most `timeout` seconds (0: not at all, one look), until the disks have no requests in progress
    (`requests_in_progress`); False when some still were.
    Nothing of ours to wait for when the replay sent no read to a disk (a resident list): the devices may
    still be busy with others' reads, which are not this replay's to wait for."""
    read_after = _own_read_bytes() if read_before is not None else None
    if read_after is None or read_after > read_before:
        return wait_until_drained(sysfs, sorted(disks.windows), timeout)
    return True


class _Stopped(Exception):
    """A replay stopped part way (a bad entry or the cap passed in a streamed list; out of descriptors):
    `error(already)` is the error to raise, `already` saying what had been read before it, once the reads sent
    are waited for; `files` and `issued` bytes: sent by the data pass it stopped, not counted yet."""

    def __init__(self, error: Callable[[str], Exception], files: int = 0, issued: int = 0) -> None:
        super().__init__()
        self.error, self.files, self.issued = error, files, issued


def _replay_batch(report: ReplayReport, disks: _Disks, entries: Sequence[Entry], orders: set[str], progress,
                  guard: PressureGuard | None, threads: int | None, use_io_uring: bool, time_order: bool,
                  small: bool = False) -> bool:
    """One batch: its order, its inode pass, its data reads, counted in `report`; True when memory pressure
    stopped it (the rest of the list is not read). `small`: the batch is the whole list and at most SMALL_LIST."""
    devices = set(column(entries, "device"))
    disks.add(devices)
    how = _how(disks, devices, time_order)
    orders.add(how if how != "physical" else order.order_name(entries))
    from _thread import allocate_lock  # threading.Lock without importing threading (a boot replay's start-up)

    checker = _Checker(entries, disks.devnums, progress, allocate_lock())
    checker.reads = disks.reads(devices)
    small = small and threads is None  # the small-list path (--threads asks for the others)
    inodes = _check_inodes(checker, how, entries, threads, use_io_uring, small)
    report.inode_pass_files += len(entries) - checker.deferred
    issuers, said = issuers_for(how, small)
    for d in devices:
        report.methods[d] = f"{disks.stacks[d].describe(how)}; {inodes}; {said}"
    report.inode_pass, report.threads = checker.how, checker.parallel
    files, issued, stopped = _issue(entries, order.indices_for(how, entries), checker.listed, disks.windows,
                                    disks.devnums, progress, checker.skipped, guard, small, issuers)
    return report.add_issued(files, issued, checker.skipped, guard, stopped)


def _how(disks: _Disks, devices: set[str], time_order: bool) -> str:
    """One method for a batch: the slowest kind of disk it touches decides (a seek costs the most)."""
    kinds = {disks.stacks[d].rotational for d in devices}
    return order.method(False if kinds == {False} else True if True in kinds else None, time_order)


def _streamed(report: ReplayReport, disks: _Disks, source: ListSource, orders: set[str], progress,
              guard: PressureGuard | None, threads: int | None, use_io_uring: bool, time_order: bool,
              metadata_first: Callable[[], None]) -> Iterable[Sequence[Entry]] | None:
    """The list replayed as it is read, chunk by chunk, each chunk's files read as soon as every entry of it
    is checked and counted against the cap; or, when the disk needs the whole list first, the whole-list
    survey's batches to replay as before (returned; nothing has been read then).

    Streaming keeps the order a whole-list replay uses: on flash the list's own; on a disk that may seek,
    only while the list is in physical order (as `collect` writes it) or, for a list in time order, bin by
    bin (a bin is a run of the list); and only when the first chunk's inodes answer from a cache (the inode
    pass would stop after its sample anyway). Where they wait for the disk, every inode is read ahead in
    inode order before the data, so the whole list is surveyed first, as before."""
    from tunectl.units import counted

    first, whole = _first_chunk(source)
    if whole:  # the whole list, checked: one batch, as before
        report.list_why = f"every entry checked before the first read: it has fewer than {FIRST_CHUNK} entries"
        return [first]
    why, sample = _why_not_streamed(disks, first, threads, use_io_uring, time_order, metadata_first)
    if why:
        report.list_why = f"every entry checked before the first read: {why}"
        from itertools import chain

        try:  # the first chunk kept, the rest read on from the same open list: decoded once
            return source.surveyed(chain([first], source.chunks))
        except UsageError as e:  # a bad entry, or more than the cap: no file read, but the metadata pass may have run
            if report.metadata is None or not report.metadata.bytes:
                raise
            kind_, message, hint = type(e), e.message, e.hint  # (the sample that chose the survey needed it)
            raise _Stopped(lambda already: kind_(message + already, hint=hint)) from None
        finally:
            source.close()
    report.list_read = "streamed"
    report.list_why = (f"read as it was checked: the first {counted(len(first), 'entry', 'entries')}, then "
                       f"{STREAM_CHUNK} at a time, each chunk's files read as soon as all of it passed the checks")
    metadata_first()
    with ListedOpener() as opener:
        stream = _Stream(report, disks, orders, progress, guard, threads, use_io_uring, time_order, opener, sample)
        if stream.run(source, first):
            return None
    if stream.unsorted:
        report.list_why += "; part of the list was not in disk order: those chunks were each sorted on their own"
    return None


def _first_chunk(source: ListSource) -> tuple[list[Entry], bool]:
    """The list's first chunk, checked and counted against the cap, and whether it is the whole list."""
    first = next(source.chunks, [])  # a bad entry here: nothing is read, the error is as it always was
    if not source.take(first):
        source.close()
        raise source.over_cap(source.files, source.bytes, "; no file of the list was read")
    if len(first) < FIRST_CHUNK:  # the end of the list, or a bad entry after these (raised now, before any read)
        more = next(source.chunks, None)
        if more is None:
            return first, True
        from itertools import chain

        source.chunks = chain([more], source.chunks)
    return first, False


def _why_not_streamed(disks: _Disks, first: Sequence[Entry], threads: int | None, use_io_uring: bool,
                      time_order: bool, metadata_first: Callable[[], None]) -> tuple[str, _Checker | None]:
    """Why the list must be surveyed whole before its first read ("" to stream it), judged by its first chunk:
    its order on a disk that seeks, and how fast its inodes come (the sample, returned: it checked the chunk)."""
    from _thread import allocate_lock

    from tunectl.units import counted

    devices = set(column(first, "device"))
    disks.add(devices)
    how = _how(disks, devices, time_order)
    sample = None
    why = ""
    if how == "physical" and not order.in_physical_order(first)[0]:
        why = "its entries are not in disk order: sorted as a whole first"
    if how != "list" and not why:
        # the metadata pass first (on a disk that seeks, waited for): the sample then times what it left to read,
        # rather than reading the inode tables cold, in inode order, ahead of the metadata sweep
        metadata_first()
        sample = _Checker(first, disks.devnums, None, allocate_lock())
        sample.reads = disks.reads(devices)
        sample.run(max(1, threads) if threads is not None else None, use_io_uring)
        if not sample.cached():
            meanwhile = ", while the disk read" if sample.read_meanwhile else ""  # None: its count unknown
            why = (f"its first {counted(len(first), 'inode')} came at {sample.sample_rate:,.0f} stats/s, below "
                   f"{FAST_STATS:,}/s{meanwhile}: the disk seeks, so every inode is read ahead, in inode order, first")
    return why, sample


class _Stream:
    """The chunk loop of a streamed replay: each chunk checked, counted in the report and read, and what runs
    from chunk to chunk (the time bin being filled, the last physical key, whether inodes answer fast).
    `sample`: the inode sample that checked the first chunk (None: the first chunk is on flash)."""

    def __init__(self, report: ReplayReport, disks: _Disks, orders: set[str], progress, guard: PressureGuard | None,
                 threads: int | None, use_io_uring: bool, time_order: bool, opener: ListedOpener,
                 sample: _Checker | None) -> None:
        from _thread import allocate_lock

        from tunectl.units import counted

        self.report, self.disks, self.orders, self.progress, self.guard = report, disks, orders, progress, guard
        self.threads, self.use_io_uring, self.time_order, self.opener = threads, use_io_uring, time_order, opener
        self.sample = sample  # used by the first chunk, then None
        self.fast_inodes = "" if sample is None else (
            f"inode pass stopped after {counted(len(sample.entries), 'file')}: {sample.said_cached()}; "
            "the rest read at open")
        self.last_key: tuple | None = None
        self.pending: list[Entry] = []  # the time bin being filled
        self.pending_listed = bytearray()
        self.filled = 0
        self.unsorted = False
        self.lock = allocate_lock()

    def run(self, source: ListSource, first: Sequence[Entry]) -> bool:
        """Every chunk from `first` on; True when memory pressure stopped it."""
        chunk: Sequence[Entry] | None = first
        while chunk is not None:
            if chunk and self._chunk(chunk):
                return True
            chunk = self._next(source)
        if self.pending:
            self._flush()
        return False

    def _issue(self, entries: Sequence[Entry], indices: Sequence[int], listed: bytearray, issuers: int = 1) -> bool:
        skipped: list[Skip] = []
        files, issued, stopped = _issue_with(self.opener, entries, indices, listed, self.disks.windows,
                                             self.disks.devnums, self.progress, skipped, self.guard, issuers)
        return self.report.add_issued(files, issued, skipped, self.guard, stopped)

    def _flush(self) -> bool:
        """The time bin being filled, read in physical order; True when memory pressure stopped it."""
        stopped = self._issue(self.pending, order.physical_indices(self.pending), self.pending_listed)
        self.pending, self.pending_listed, self.filled = [], bytearray(), 0
        return stopped

    def _next(self, source: ListSource) -> Sequence[Entry] | None:
        """The next chunk, checked and counted against the cap; a bad entry or the cap reads the bin being filled
        (checked and counted, as every entry before) and stops the replay with the error."""
        try:
            chunk = next(source.chunks, None)
        except ListError as e:
            if self.pending:
                self._flush()
            message, hint = e.message, e.hint
            raise _Stopped(lambda already: ListError(message + already, hint=hint)) from None
        if chunk is not None and not source.take(chunk):
            source.close()
            if self.pending:
                self._flush()
            files, nbytes = source.files, source.bytes
            raise _Stopped(lambda already: source.over_cap(files, nbytes, already))
        return chunk

    def _chunk(self, chunk: Sequence[Entry]) -> bool:
        """One chunk checked (the first one by the sample), counted in the report and read; True when memory
        pressure stopped it."""
        devices = set(column(chunk, "device"))
        self.disks.add(devices)
        how = _how(self.disks, devices, self.time_order)
        self.orders.add(how if how != "physical" else order.order_name(chunk))
        checker, inodes = self._check(chunk, how)
        report = self.report
        if checker.how != "none" or not report.inode_pass:
            report.inode_pass, report.threads = checker.how, checker.parallel
        report.inode_pass_files += len(chunk) - checker.deferred
        report.add_skips(checker.skipped)
        issuers, said = issuers_for(how)
        for d in devices:
            report.methods[d] = f"{self.disks.stacks[d].describe(how)}; {inodes}; {said}"
        return self._read(chunk, how, checker.listed, issuers)

    def _check(self, chunk: Sequence[Entry], how: str) -> tuple[_Checker, str]:
        """The chunk's checker and what its inode pass was: the first chunk's is the sample's, already run."""
        checker, self.sample = self.sample, None
        if checker is not None:
            if self.progress is not None:
                self.progress.advance(len(chunk))
            return checker, self.fast_inodes
        checker = _Checker(chunk, self.disks.devnums, self.progress, self.lock)
        checker.reads = self.disks.reads(set(column(chunk, "device")))
        if how == "list" or self.fast_inodes:
            checker.trust_all()
            return checker, self.fast_inodes if how != "list" else "inodes read at open"
        # a chunk on a disk that may seek, after a first one on flash: sampled on its own
        inodes = _check_inodes(checker, how, chunk, self.threads, self.use_io_uring)
        if checker.deferred:
            self.fast_inodes = inodes
        return checker, inodes

    def _read(self, chunk: Sequence[Entry], how: str, listed: bytearray, issuers: int) -> bool:
        """The chunk's files read in the order `how` says, by `issuers` threads (issuers_for); True when memory
        pressure stopped it."""
        if how == "time-bins":  # a bin is a run of the list, cut as the whole list's: read when full, in physical order
            ends, filled = order.bin_ends(chunk, order.BIN_BYTES, self.filled)
            start = 0
            for end in ends:
                self.pending += chunk[start:end]
                self.pending_listed += listed[start:end]
                if self._flush():
                    return True
                start = end
            self.pending += chunk[start:]
            self.pending_listed += listed[start:]
            self.filled = filled
            return False
        if self.pending and self._flush():
            return True
        indices: Sequence[int] = range(len(chunk))
        if how == "physical":  # the first chunk is (streaming needs it), the rest may not be
            in_order, self.last_key = order.in_physical_order(chunk, self.last_key)
            if not in_order:  # a list edited by hand: each chunk from here sorted on its own
                indices, self.unsorted = order.physical_indices(chunk), True
                self.last_key = None
        return self._issue(chunk, indices, listed, issuers)
