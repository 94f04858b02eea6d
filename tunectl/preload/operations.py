"""The preload operations behind collect, record, replay and show.

Each returns a report; rendering and exit codes are the CLI's business. OS
access goes through tunectl.system.pagecache (FIEMAP, mincore, fadvise),
tunectl.system.fanotify and the Sysfs edge (read-ahead window, in-flight I/O).
"""

from __future__ import annotations

import errno
import os
import stat as stat_
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tunectl.errors import ExitCode, NotPermitted, UsageError
from tunectl.preload import order
from tunectl.preload.listing import Entry, ListError, PreloadList, parse, render
from tunectl.system import pagecache
from tunectl.system.sysfs import Sysfs

VANISHED = "vanished"
CHANGED = "changed"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Skip:
    path: str
    status: str  # vanished | changed | unreadable
    reason: str

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "reason": self.reason}


# ---------------------------------------------------------------- the list file

def read_list(path: str) -> PreloadList:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        code = e.errno or errno.EIO
        if code in (errno.EACCES, errno.EPERM):
            raise NotPermitted(f"{path}: cannot read the preload list: {os.strerror(code)}",
                               hint="run as the user who wrote it, or as root") from None
        raise UsageError(f"{path}: cannot read the preload list: {os.strerror(code)}",
                         hint="make one with `tunectl preload collect PATHS -o LIST`") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ListError(f"{path}:{line}: not UTF-8 text") from None
    return parse(text, path)


def write_list(path: str, entries: Sequence[Entry]) -> None:
    from tunectl.system.state import atomic_write

    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    target = Path(path)
    try:
        atomic_write(target, render(entries, created).encode())
    except OSError as e:
        code = e.errno or errno.EIO
        cls = NotPermitted if code in (errno.EACCES, errno.EPERM, errno.EROFS) else UsageError
        raise cls(f"{path}: cannot write the preload list: {os.strerror(code)}") from None


# ---------------------------------------------------------------- collect

@dataclass
class CollectReport:
    list_path: str
    entries: list[Entry]
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verbose: int = 0

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def to_json(self) -> dict:
        return {"list": self.list_path, "files": len(self.entries), "bytes": sum(e.bytes for e in self.entries),
                "physical": sum(1 for e in self.entries if e.physical is not None),
                "order": order.order_name(self.entries) if self.entries else None,
                "skipped": [s.to_json() for s in self.skipped], "notes": self.notes}


def walk(paths: Iterable[str]) -> Iterator[str]:
    """Regular files named, and those below the directories named, in directory order.

    Inside trees only d_type decides (no stat, no open): symlinks are not followed
    and device nodes, FIFOs and sockets are never opened (opening a tape rewinds it).
    """
    for top in paths:
        if not os.path.isdir(top):
            if os.path.isfile(top):
                yield top
            continue
        stack = [top]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    subdirs = []
                    for entry in it:
                        if entry.is_file(follow_symlinks=False):
                            yield entry.path
                        elif entry.is_dir(follow_symlinks=False):
                            subdirs.append(entry.path)
            except OSError:
                continue
            stack.extend(reversed(subdirs))


def _entry_for(path: str, fd: int, st: os.stat_result, ranges: tuple[tuple[int, int], ...]) -> Entry:
    physical = pagecache.first_physical(fd, ranges[0][0]) if ranges else None
    return Entry(path, pagecache.device_of(st), st.st_ino, st.st_size,
                 st.st_mtime_ns, ranges, physical)


def describe_file(path: str, resident: bool = False) -> tuple[Entry | None, Skip | None]:
    """One list entry for a file: whole, or with `resident` only its cached pages (None when none are)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        status = VANISHED if e.errno == errno.ENOENT else UNREADABLE
        return None, Skip(path, status, os.strerror(e.errno or errno.EIO))
    try:
        st = os.fstat(fd)
        if not stat_.S_ISREG(st.st_mode):
            return None, None
        if resident:
            if not pagecache.residency_observable(path, st):
                return None, Skip(path, UNREADABLE, "residency not observable: mincore reports every page of a "
                                                    "file you neither own nor may write as resident (run as root)")
            ranges = tuple(order.pages_to_ranges(pagecache.residency(fd, st.st_size), st.st_size))
            if not ranges:
                return None, None
        else:
            ranges = ((0, st.st_size),) if st.st_size else ()
        return _entry_for(os.path.abspath(path), fd, st, ranges), None
    except OSError as e:
        return None, Skip(path, UNREADABLE, os.strerror(e.errno or errno.EIO))
    finally:
        os.close(fd)


def collect(paths: Sequence[str], list_path: str, resident: bool = False) -> CollectReport:
    for p in paths:
        if not os.path.lexists(p):
            raise UsageError(f"{p}: no such file or directory", hint="collect takes existing files and directories")
    report = CollectReport(list_path, [])
    seen: set[tuple[str, int]] = set()
    for path in walk(paths):
        entry, skip = describe_file(path, resident)
        if skip:
            report.skipped.append(skip)
        if entry and (entry.device, entry.inode) not in seen:  # hard links: read once
            seen.add((entry.device, entry.inode))
            report.entries.append(entry)
    write_list(list_path, report.entries)
    return report


# ---------------------------------------------------------------- record

@dataclass
class RecordReport(CollectReport):
    method: str = "fanotify"
    command: list[str] = field(default_factory=list)
    command_status: int = 0
    other_processes: int = 0  # opens by processes outside the command's tree, left out
    gone_processes: int = 0  # processes that exited before they could be placed: their opens are kept

    def to_json(self) -> dict:
        doc = super().to_json()
        doc.update(method=self.method, command=self.command, command_status=self.command_status,
                   ignored_opens=self.other_processes, exited_processes_kept=self.gone_processes)
        return doc


def _start(command: Sequence[str], stdout_to_stderr: bool):
    import subprocess

    try:  # under --json our stdout carries one document: the command's output goes to stderr
        return subprocess.Popen(list(command), stdout=2 if stdout_to_stderr else None)
    except OSError as e:
        raise UsageError(f"cannot run {command[0]}: {os.strerror(e.errno or errno.EIO)}") from None


def _under(path: str, scope: Sequence[str]) -> bool:
    return any(path == s or path.startswith(s.rstrip("/") + "/") for s in scope)


def _record_fanotify(report: RecordReport, command: Sequence[str], scope: Sequence[str], quiet: bool) -> None:
    from tunectl.system import fanotify

    me = os.getpid()
    seen: dict[tuple[int, int], Entry] = {}
    with fanotify.Watch(scope) as watch:
        proc = _start(command, quiet)
        verdict: dict[int, bool] = {proc.pid: True}

        def ours(pid: int) -> bool:
            """In the command's process tree; a process already gone counts as ours (most likely it was)."""
            chain = []
            while pid not in verdict:
                chain.append(pid)
                parent = fanotify.parent_pid(pid)
                if parent is None or parent <= 1 or len(chain) > 64:
                    result = parent is None
                    report.gone_processes += result
                    break
                pid = parent
            else:
                result = verdict[pid]
            for p in chain:
                verdict[p] = result
            return result

        def drain() -> None:
            for event in watch.events():
                try:
                    if event.pid == me:
                        continue
                    if not ours(event.pid):
                        report.other_processes += 1
                        continue
                    st = os.fstat(event.fd)
                    if not stat_.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                        continue
                    path = fanotify.path_of(event.fd)
                    if path and _under(path, scope):
                        ranges = ((0, st.st_size),) if st.st_size else ()
                        seen[(st.st_dev, st.st_ino)] = _entry_for(path, event.fd, st, ranges)
                except OSError:
                    continue
                finally:
                    os.close(event.fd)

        while proc.poll() is None:
            watch.wait(0.05)
            drain()
        drain()
        report.command_status = proc.returncode
        if watch.overflowed:
            report.notes.append("the fanotify queue overflowed: some opens were lost")
    report.entries.extend(seen.values())


def _resident_map(scope: Sequence[str]) -> dict[tuple[str, int], tuple[str, bytes]]:
    snapshot = {}
    for path in walk(scope):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if stat_.S_ISREG(st.st_mode) and pagecache.residency_observable(path, st):
                snapshot[(pagecache.device_of(st), st.st_ino)] = (path, pagecache.residency(fd, st.st_size))
        except OSError:
            pass
        finally:
            os.close(fd)
    return snapshot


def _record_diff(report: RecordReport, command: Sequence[str], scope: Sequence[str], quiet: bool) -> None:
    before = _resident_map(scope)
    proc = _start(command, quiet)
    report.command_status = proc.wait()
    after = _resident_map(scope)
    for key, (path, vec) in after.items():
        old = before.get(key, (path, b""))[1]
        new = bytes(1 if (v & 1 and not (i < len(old) and old[i] & 1)) else 0 for i, v in enumerate(vec))
        if 1 not in new:
            continue
        entry, _ = describe_file(path)
        if entry and (entry.device, entry.inode) == key:
            report.entries.append(entry._replace(ranges=tuple(order.pages_to_ranges(new, entry.size))))
    report.notes.append("residency diff: only pages the command brought into the cache are seen; "
                        "files that were cached already are missed (drop caches first for a full record)")


def record(command: Sequence[str], list_path: str, method: str = "auto", scope: Sequence[str] = (),
           stdout_to_stderr: bool = False) -> RecordReport:
    if not command:
        raise UsageError("record needs a command after --", hint="tunectl preload record -o LIST -- CMD ARGS...")
    scope = [os.path.abspath(s) for s in scope]
    for s in scope:
        if not os.path.isdir(s):
            raise UsageError(f"--scope {s}: no such directory")
    report = RecordReport(list_path, [], method=method, command=list(command))
    if method in ("auto", "fanotify"):
        try:
            report.method = "fanotify"
            _record_fanotify(report, command, scope or ["/"], stdout_to_stderr)
        except NotPermitted as e:
            if method == "fanotify":
                raise
            report.method = "diff"
            report.notes.append(f"{e.message}; falling back to a before/after residency diff")
    if report.method == "diff":
        _record_diff(report, command, scope or ["/usr", "/etc"], stdout_to_stderr)
    if report.command_status:
        report.notes.append(f"the command exited with status {report.command_status}")
    write_list(list_path, report.entries)
    return report


# ---------------------------------------------------------------- replay

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


def _changed(entry: Entry, st: os.stat_result, devnum: int) -> str:
    if st.st_dev != devnum:
        return f"now on device {os.major(st.st_dev)}:{os.minor(st.st_dev)}, listed {entry.device}"
    if st.st_ino != entry.inode:
        return f"inode {entry.inode} -> {st.st_ino} (replaced)"
    if st.st_size != entry.size:
        return f"size {entry.size} -> {st.st_size}"
    if st.st_mtime_ns != entry.mtime_ns:
        return "modified since the list was made (mtime differs)"
    return ""


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
                    skipped.append(Skip(entry.path, CHANGED, _changed(entry, st, devnum)))
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


# ---------------------------------------------------------------- show

@dataclass(frozen=True)
class FileResidency:
    path: str
    status: str  # resident | partial | cold | unknown | vanished | changed | unreadable
    wanted: int
    cached: int | None
    reason: str = ""

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "bytes": self.wanted, "resident_bytes": self.cached,
                "reason": self.reason}


@dataclass
class ShowReport:
    list_path: str
    created: str
    files: list[FileResidency]
    verbose: int = 0
    exit_code: ExitCode = ExitCode.OK

    def totals(self) -> dict:
        counts: dict[str, int] = {}
        for f in self.files:
            counts[f.status] = counts.get(f.status, 0) + 1
        wanted = sum(f.wanted for f in self.files)
        cached = sum(f.cached or 0 for f in self.files)
        return {"files": len(self.files), "bytes": wanted, "resident_bytes": cached,
                "resident_percent": round(100.0 * cached / wanted, 1) if wanted else 100.0, "by_status": counts}

    def to_json(self) -> dict:
        return {"list": self.list_path, "created": self.created, **self.totals(),
                "entries": [f.to_json() for f in self.files]}


def residency_of(entry: Entry) -> FileResidency:
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        status = VANISHED if e.errno in (errno.ENOENT, errno.ENOTDIR) else UNREADABLE
        return FileResidency(entry.path, status, entry.bytes, None, os.strerror(e.errno or errno.EIO))
    try:
        st = os.fstat(fd)
        why = _changed(entry, st, os.makedev(*map(int, entry.device.split(":"))))
        if why:
            return FileResidency(entry.path, CHANGED, entry.bytes, None, why)
        if not pagecache.residency_observable(entry.path, st):
            return FileResidency(entry.path, "unknown", entry.bytes, None,
                                 "mincore hides the cache state of files you neither own nor may write")
        cached, wanted = order.resident_bytes(pagecache.residency(fd, st.st_size), entry.ranges, st.st_size)
        status = "resident" if cached >= wanted else "cold" if cached == 0 else "partial"
        return FileResidency(entry.path, status, wanted, cached)
    except OSError as e:
        return FileResidency(entry.path, UNREADABLE, entry.bytes, None, os.strerror(e.errno or errno.EIO))
    finally:
        os.close(fd)


def show(plist: PreloadList, list_path: str) -> ShowReport:
    return ShowReport(list_path, plist.created, [residency_of(e) for e in plist.entries])

