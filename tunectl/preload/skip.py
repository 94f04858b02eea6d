"""Why a file was passed over: Skip, its statuses, and whether a file is still the one a list names."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tunectl.preload.listing import Entry

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


def why_changed(entry: Entry, st: os.stat_result, devnum: int) -> str:
    """How the open file differs from its list entry (device, inode, size, mtime); "" when it is the listed one."""
    if st.st_dev != devnum:
        return f"now on device {os.major(st.st_dev)}:{os.minor(st.st_dev)}, listed {entry.device}"
    if st.st_ino != entry.inode:
        return f"inode {entry.inode} -> {st.st_ino} (replaced)"
    if st.st_size != entry.size:
        return f"size {entry.size} -> {st.st_size}"
    if st.st_mtime_ns != entry.mtime_ns:
        return "modified since the list was made (mtime differs)"
    return ""
