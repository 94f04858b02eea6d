"""The fanotify edge: which files processes open, while a command runs.

Notification class only (FAN_CLASS_NOTIF): nothing is ever blocked. Each event
carries an open descriptor of the file, so what it was can be checked at once,
before it is renamed or deleted. Needs CAP_SYS_ADMIN; `Watch` raises
NotPermitted otherwise, and the caller falls back to a residency diff.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from tunectl.errors import NotPermitted, UsageError
from tunectl.system.roots import self_proc

FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_NOTIF = 0x1, 0x2, 0x0
FAN_MARK_ADD, FAN_MARK_MOUNT, FAN_MARK_FILESYSTEM = 0x1, 0x10, 0x100
FAN_ACCESS, FAN_OPEN, FAN_OPEN_EXEC = 0x1, 0x20, 0x1000
FAN_Q_OVERFLOW = 0x4000
AT_FDCWD = -100
_EVENT = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
FANOTIFY_METADATA_VERSION = 3


class Event(NamedTuple):
    pid: int
    fd: int  # open read-only descriptor of the file; the reader closes it
    mask: int


class Watch:
    """fanotify on the file systems holding `paths` (whole file systems; mounts where not allowed)."""

    def __init__(self, paths: Iterable[str], mask: int = FAN_OPEN | FAN_OPEN_EXEC) -> None:
        import ctypes

        self._lib = lib = ctypes.CDLL(None, use_errno=True)
        lib.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        lib.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        self.fd = lib.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK,
                                    os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if self.fd < 0:
            code = ctypes.get_errno()
            if code in (errno.EPERM, errno.EACCES):
                raise NotPermitted("fanotify is not permitted for this user (it needs CAP_SYS_ADMIN)",
                                   hint="run as root, or record with --method diff")
            raise UsageError(f"fanotify_init failed: {os.strerror(code)}", hint="record with --method diff")
        self.overflowed = False
        try:
            for path in paths:
                self._mark(path, mask)
        except BaseException:
            os.close(self.fd)
            raise

    def _mark(self, path: str, mask: int) -> None:
        import ctypes

        for how in (FAN_MARK_FILESYSTEM, FAN_MARK_MOUNT):
            if self._lib.fanotify_mark(self.fd, FAN_MARK_ADD | how, mask, AT_FDCWD, os.fsencode(path)) == 0:
                return
            code = ctypes.get_errno()
            if code not in (errno.EINVAL, errno.EXDEV, errno.ENODEV, errno.EOPNOTSUPP):
                break
        raise UsageError(f"cannot watch {path} with fanotify: {os.strerror(code)}")

    def events(self) -> Iterator[Event]:
        """Every event queued now (non-blocking)."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                length, version, _, _, mask, fd, pid = _EVENT.unpack_from(data, offset)
                if version != FANOTIFY_METADATA_VERSION or length < _EVENT.size:
                    return
                if mask & FAN_Q_OVERFLOW:
                    self.overflowed = True
                if fd >= 0:
                    yield Event(pid, fd, mask)
                offset += length

    def wait(self, timeout: float) -> None:
        import select

        select.select([self.fd], [], [], timeout)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def path_of(fd: int) -> str | None:
    try:
        path = os.readlink(self_proc("self", "fd", str(fd)))
    except OSError:
        return None
    return None if path.endswith(" (deleted)") else path


def parent_pid(pid: int) -> int | None:
    """The parent of a live process; None once it is gone."""
    try:
        with open(self_proc(str(pid), "stat"), "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[1])  # after "pid (comm) state"
