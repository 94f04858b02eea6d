"""`preload show`: what a list holds and how much of it is in the page cache now (mincore)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

from tunectl.errors import ExitCode
from tunectl.preload import metadata, order
from tunectl.preload import stats as stats_
from tunectl.preload.listfile import ColumnsRead
from tunectl.preload.listing import Entry, PreloadList, metadata_of, placed_of
from tunectl.preload.skip import CHANGED, UNREADABLE, failed, why_changed
from tunectl.preload.stats import Floor, HitRate
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.status import Verdict
from tunectl.system import pagecache
from tunectl.system.sysfs import Sysfs
from tunectl.system.trust import Untrusted, open_listed


@record(frozen=True)
class FileResidency:
    path: str
    status: Verdict  # RESIDENCY (resident | partial | cold | unknown) or PRELOAD_SKIPS (vanished | changed | unreadable)
    wanted: int
    cached: int | None
    reason: str = ""

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "bytes": self.wanted, "resident_bytes": self.cached,
                "reason": self.reason}


@record(frozen=True)
class MetadataResidency:
    """A device's recorded metadata ranges and how much of them is cached now (None: cannot tell)."""

    device: str
    ranges: int
    bytes: int
    cached: int | None

    @property
    def percent(self) -> float | None:
        return None if self.cached is None else round(100.0 * self.cached / self.bytes, 1) if self.bytes else 100.0

    def to_json(self) -> dict:
        return {"device": self.device, "ranges": self.ranges, "bytes": self.bytes, "resident_bytes": self.cached}


@record(frozen=True)
class OrderSource:
    """Where a replay's order on one file system comes from: fiemap, squashfs (the image's inode table) or inode."""

    device: str
    source: str
    files: int

    def to_json(self) -> dict:
        return {"device": self.device, "source": self.source, "files": self.files}


@record
class Stats:
    """`show --stats`: what a replay of the list reads and issues, its floor, and the hit rate."""

    bytes: int
    files: int
    metadata_bytes: int
    requests: int
    floor: Floor
    hit: HitRate | None = None

    def to_json(self) -> dict:
        return {"bytes": self.bytes, "files": self.files, "metadata_bytes": self.metadata_bytes,
                "requests": self.requests, "floor": self.floor.to_json(),
                "hit_rate": self.hit.to_json() if self.hit else None}


@record
class ShowReport(Report):
    list_path: str
    created: str
    files: list[FileResidency]
    verbose: int = 0
    metadata: list[MetadataResidency] = field(default_factory=list)
    stats: Stats | None = None
    order: list[OrderSource] = field(default_factory=list)
    columns: ColumnsRead | None = None  # whether the entries came from LIST.cols, and why not

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def print_text(self, out) -> None:
        from tunectl.preload.text import print_report, shown

        print_report(self, out, shown)

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
                "entries": [f.to_json() for f in self.files], "metadata": [m.to_json() for m in self.metadata],
                "stats": self.stats.to_json() if self.stats else None, "order": [o.to_json() for o in self.order],
                "columns": self.columns.to_json() if self.columns and self.columns.status else None}


def residency_of(entry: Entry) -> FileResidency:
    try:
        fd = open_listed(entry.path)  # looked at before it is opened: no device, pipe or link is ever opened
    except Untrusted as e:
        return FileResidency(entry.path, CHANGED, entry.bytes, None, f"now {e.found}")
    except OSError as e:
        skip = failed(entry.path, e.errno or errno.EIO)
        return FileResidency(entry.path, skip.status, entry.bytes, None, skip.reason)
    try:
        st = os.fstat(fd)
        why = why_changed(entry, st, os.makedev(*map(int, entry.device.split(":"))))
        if why:
            return FileResidency(entry.path, CHANGED, entry.bytes, None, why)
        if not pagecache.residency_observable(entry.path, st):
            return FileResidency(entry.path, Verdict.UNKNOWN, entry.bytes, None,
                                 "mincore hides the cache state of files you neither own nor may write")
        cached, wanted = order.resident_bytes(pagecache.residency(fd, st.st_size), entry.ranges, st.st_size)
        status = Verdict.RESIDENT if cached >= wanted else Verdict.COLD if cached == 0 else Verdict.PARTIAL
        return FileResidency(entry.path, status, wanted, cached)
    except OSError as e:
        return FileResidency(entry.path, UNREADABLE, entry.bytes, None, os.strerror(e.errno or errno.EIO))
    finally:
        os.close(fd)


def measure_floor(devices: Iterable[str], nbytes: int, sysfs: Sysfs, dev_root: str | None) -> Floor:
    """The floor of reading `nbytes` from these devices: at the slowest one's measured sequential rate."""
    rates = [metadata.sequential_rate(sysfs, dev_root, d) for d in sorted(set(devices))] if dev_root else []
    known = [r for r in rates if r]
    return Floor(min(known) if known and len(known) == len(rates) else None, nbytes)


def show(plist: PreloadList, list_path: str, header: dict | None = None, dev_root: str | None = None,
         sysfs: Sysfs | None = None, stats: bool = False, against: PreloadList | None = None) -> ShowReport:
    """Each file's residency, the metadata ranges' (from the list's `header`), and with `stats` the numbers."""
    recorded = metadata_of(header or {}, list_path)
    report = ShowReport(list_path, plist.created, [residency_of(e) for e in plist.entries])
    from tunectl.preload.places import sources

    report.order = [OrderSource(dev, how, n) for dev, (how, n) in
                    sources(plist.entries, placed_of(header or {}, list_path)).items()]
    cached = metadata.residency(recorded, sysfs, dev_root) if recorded and sysfs else {}
    for device, ranges in sorted(recorded.items()):
        found = cached.get(device)
        report.metadata.append(MetadataResidency(device, len(ranges), sum(n for _, n in ranges),
                                                 found[0] if found else None))
    if stats:
        from tunectl.preload.replay import read_stack

        devices = {e.device for e in plist.entries} | set(recorded)
        windows = {d: read_stack(sysfs, d).window if sysfs else order.window_bytes(None, None) for d in devices}
        meta_bytes = sum(m.bytes for m in report.metadata)
        meta_calls = sum(len(list(order.chunks(order.coalesce(r, metadata.GAP), 1 << 62, windows[d])))
                         for d, r in recorded.items())
        data = sum(e.bytes for e in plist.entries)
        report.stats = Stats(data, len(plist.entries), meta_bytes, stats_.requests(plist.entries, windows) + meta_calls,
                             measure_floor(devices, data + meta_bytes, sysfs, dev_root) if sysfs else Floor(None, 0),
                             stats_.hit_rate(plist.entries, against.entries) if against is not None else None)
    return report

