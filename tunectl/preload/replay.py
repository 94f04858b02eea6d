"""`preload replay`: bring a list into the page cache in physical order, as fast as the device allows.

Inodes are warmed from several threads while a few issuer threads fadvise(WILLNEED)
contiguous stretches of the physical order in read-ahead-window chunks; then the
replay waits until the devices have no reads in flight.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tunectl.errors import ExitCode
from tunectl.preload import order
from tunectl.preload.listing import Entry, PreloadList
from tunectl.preload.skip import CHANGED, UNREADABLE, VANISHED, Skip, why_changed
from tunectl.system.sysfs import Sysfs


@dataclass
class ReplayReport:
    list_path: str
    files: int = 0
    bytes: int = 0
    skipped: list[Skip] = field(default_factory=list)
    seconds: float = 0.0
    issue_seconds: float = 0.0
    settled: bool = True
    order: str = "physical"
    threads: int = 0
    verbose: int = 0

    @property
    def throughput(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> ExitCode:
        """Vanished and changed files are expected (reported, exit 0); unreadable ones are a partial failure."""
        return ExitCode.PARTIAL if any(s.status == UNREADABLE for s in self.skipped) else ExitCode.OK

    def to_json(self) -> dict:
        return {"list": self.list_path, "files": self.files, "bytes": self.bytes, "order": self.order,
                "skipped": [s.to_json() for s in self.skipped], "seconds": round(self.seconds, 4),
                "issue_seconds": round(self.issue_seconds, 4), "settled": self.settled,
                "throughput_mb_s": round(self.throughput / 1e6, 1), "threads": self.threads}


def _queue_dir(sysfs: Sysfs, device: str) -> str | None:
    """The sysfs queue/ directory of the disk under a file system's MAJ:MIN (a partition's parent)."""
    base = f"dev/block/{device}"
    if sysfs.exists(f"{base}/queue"):
        return f"{base}/queue"
    if sysfs.exists(f"{base}/partition"):
        parent = os.path.dirname(sysfs.realpath(base))
        rel = os.path.relpath(parent, os.path.realpath(sysfs.root))
        if not rel.startswith(".."):
            return f"{rel}/queue"
    return None


def read_window(sysfs: Sysfs, device: str) -> int:
    queue = _queue_dir(sysfs, device)

    def number(attr: str) -> int | None:
        text = sysfs.read_or(f"{queue}/{attr}") if queue else None
        return int(text) if text and text.isdigit() else None

    return order.window_bytes(number("read_ahead_kb"), number("max_sectors_kb"))


def _in_flight(sysfs: Sysfs, devices: Iterable[str]) -> int:
    total = 0
    for device in devices:
        text = sysfs.read_or(f"dev/block/{device}/inflight") or ""
        total += sum(int(n) for n in text.split() if n.isdigit())
    return total


def _warm_inodes(entries: Sequence[Entry], threads: int, stop: threading.Event) -> list[threading.Thread]:
    """stat() every file in inode order from several threads, so inode reads run in parallel.

    An open() waits for its inode at queue depth 1; warmed first, the data
    reads that follow in physical order can merge and keep the device busy.
    """
    todo = iter(order.inode_order(entries))

    def work() -> None:
        stat = os.stat
        for entry in todo:
            if stop.is_set():
                return
            try:  # noqa: SIM105 -- a hot loop: suppress() costs a context manager per file
                stat(entry.path)
            except OSError:
                pass

    workers = [threading.Thread(target=work, name=f"preload-warm-{i}", daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    return workers


class _Issuer:
    """WILLNEED over one contiguous stretch of the physical order, after checking each file is the listed one."""

    def __init__(self, entries: Sequence[Entry], windows: dict[str, int], devnums: dict[str, int], progress,
                 lock: threading.Lock) -> None:
        self.entries, self.windows, self.devnums, self.progress = entries, windows, devnums, progress
        self.lock = lock  # one progress bar for every stream
        self.files = self.bytes = 0
        self.skipped: list[Skip] = []

    def run(self) -> None:
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
        opener, fstat, close, fadvise, willneed = os.open, os.fstat, os.close, os.posix_fadvise, os.POSIX_FADV_WILLNEED
        windows, devnums, progress, skipped = self.windows, self.devnums, self.progress, self.skipped
        files = issued = 0
        for n, entry in enumerate(self.entries):
            if progress is not None and n and not n % 256:
                with self.lock:
                    progress.advance(256)
            try:
                fd = opener(entry.path, flags)
            except OSError as e:
                status = VANISHED if e.errno in (errno.ENOENT, errno.ENOTDIR) else UNREADABLE
                skipped.append(Skip(entry.path, status, os.strerror(e.errno or errno.EIO)))
                continue
            try:
                st = fstat(fd)
                size, devnum = entry.size, devnums[entry.device]
                if (st.st_ino != entry.inode or st.st_size != size or st.st_mtime_ns != entry.mtime_ns
                        or st.st_dev != devnum):
                    skipped.append(Skip(entry.path, CHANGED, why_changed(entry, st, devnum)))
                    continue
                window = windows[entry.device]
                if size <= window and entry.ranges == ((0, size),):
                    fadvise(fd, 0, size, willneed)  # the common small file: one call
                    issued += size
                else:
                    for offset, length in order.chunks(entry.ranges, size, window):
                        fadvise(fd, offset, length, willneed)
                        issued += length
                files += 1
            except OSError as e:
                skipped.append(Skip(entry.path, UNREADABLE, os.strerror(e.errno or errno.EIO)))
            finally:
                close(fd)
        self.files, self.bytes = files, issued


def replay(sysfs: Sysfs, plist: PreloadList, list_path: str, progress=None, threads: int = 8, streams: int = 4,
           settle_timeout: float = 10.0) -> ReplayReport:
    """Warm inodes from `threads` threads while `streams` threads issue WILLNEED, each over a contiguous
    stretch of the physical order (reads within a stretch merge; the stretches keep both the
    device queue and the CPUs busy: most of a cold replay is kernel time), then wait for the reads."""
    started = time.monotonic()
    entries = plist.entries
    report = ReplayReport(list_path, order=order.order_name(entries) if entries else "physical", threads=threads)
    devices = sorted({e.device for e in entries})
    windows = {d: read_window(sysfs, d) for d in devices}
    devnums = {d: os.makedev(*map(int, d.split(":"))) for d in devices}
    ordered = order.physical_order(entries)
    streams = max(1, min(streams, len(ordered)))
    step = -(-len(ordered) // streams)
    lock = threading.Lock()
    issuers = [_Issuer(ordered[i:i + step], windows, devnums, progress, lock) for i in range(0, len(ordered), step)]
    stop = threading.Event()
    workers = _warm_inodes(entries, threads, stop) if threads > 0 else []
    try:
        others = [threading.Thread(target=i.run, name="preload-issue", daemon=True) for i in issuers[1:]]
        for t in others:
            t.start()
        if issuers:
            issuers[0].run()
        for t in others:
            t.join()
    finally:
        stop.set()
        for w in workers:
            w.join()
    if progress is not None:
        progress.advance(len(entries))
    report.files = sum(i.files for i in issuers)
    report.bytes = sum(i.bytes for i in issuers)
    report.skipped = [s for i in issuers for s in i.skipped]
    report.issue_seconds = time.monotonic() - started
    # WILLNEED returns once the reads are queued: wait until the devices have nothing in flight.
    deadline = time.monotonic() + settle_timeout
    while _in_flight(sysfs, devices):
        if time.monotonic() > deadline:
            report.settled = False
            break
        time.sleep(0.002)
    report.seconds = time.monotonic() - started
    return report


