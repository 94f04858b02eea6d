"""`preload show`: what a list holds and how much of it is in the page cache now (mincore)."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from tunectl.errors import ExitCode
from tunectl.preload import order
from tunectl.preload.listing import Entry, PreloadList
from tunectl.preload.skip import CHANGED, UNREADABLE, failed, why_changed
from tunectl.system import pagecache
from tunectl.system.trust import Untrusted, open_listed


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

