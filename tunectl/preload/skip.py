"""Why a file was passed over: Skip, its statuses, and whether a file is still the one a list names."""

from __future__ import annotations

import errno
import os
from collections import namedtuple
from stat import S_ISREG

from tunectl.preload.listing import Entry
from tunectl.status import Verdict
from tunectl.system.trust import irregular

# why a file is passed over, in the one verdict vocabulary (tunectl.status.PRELOAD_SKIPS; the JSON words unchanged)
VANISHED = Verdict.VANISHED
CHANGED = Verdict.CHANGED
UNREADABLE = Verdict.UNREADABLE


class Skip(namedtuple("Skip", "path status reason")):
    """A file passed over: path, status (a Verdict: VANISHED | CHANGED | UNREADABLE), reason (a named tuple: no
    dataclasses import in a boot-time replay)."""

    __slots__ = ()

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "reason": self.reason}


def failed(path: str, err: int) -> Skip:
    """A file that could not be stat()ed or opened: gone (ENOENT, or a directory on its path is now a
    file) is expected and reported; anything else (a permission, a name too long) is unreadable."""
    status = VANISHED if err in (errno.ENOENT, errno.ENOTDIR) else UNREADABLE
    return Skip(path, status, os.strerror(err or errno.EIO))


def why_changed(entry: Entry, st: os.stat_result, devnum: int) -> str:
    """How the open file differs from its list entry (type, device, inode, size, mtime); "" when it is the listed one."""
    return why_differs(entry, st.st_ino, st.st_size, st.st_mtime_ns, st.st_dev, devnum, st.st_mode)


def why_differs(entry: Entry, ino: int, size: int, mtime_ns: int, dev: int, devnum: int, mode: int) -> str:
    """why_changed on the five values alone (a statx() through io_uring has no os.stat_result). Anything but a regular
    file says so first: a named pipe's or a link's size is no reason."""
    if not S_ISREG(mode):
        return f"now {irregular(mode)}"
    if dev != devnum:
        return f"now on device {os.major(dev)}:{os.minor(dev)}, listed {entry.device}"
    if ino != entry.inode:
        return f"inode {entry.inode} -> {ino} (replaced)"
    if size != entry.size:
        return f"size {entry.size} -> {size}"
    if mtime_ns != entry.mtime_ns:
        return "modified since the list was made (mtime differs)"
    return ""
