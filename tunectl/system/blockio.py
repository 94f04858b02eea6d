"""The block I/O edge of bench and explain: what a path is, cold buffered reads, and dropping only its cached pages.

Everything is opened O_RDONLY: nothing here can write to a device or a file.
Caches are dropped per file and per block device (POSIX_FADV_DONTNEED, then
BLKFLSBUF on block devices), never machine-wide (the vm.drop_caches sysctl
would evict every other workload's pages and distort their performance).
"""

from __future__ import annotations

import errno
import os
import stat
import time

from tunectl.errors import NotPermitted, TunectlError, UsageError
from tunectl.record import record

BLKFLSBUF = 0x1261  # _IO(0x12, 97): write back and invalidate the block device's buffer cache


@record(frozen=True)
class PathInfo:
    path: str
    kind: str  # "block" | "file"
    devnum: str  # "maj:min": the device itself (block) or the one its filesystem is on (file)
    size: int  # bytes (0 for a block device: sysfs knows its size)
    ino: int = 0  # the inode stat found: which file (or node) this is, to compare with an earlier look


def _os_error(e: OSError, path: str, doing: str, named: bool = True) -> TunectlError:
    """`e` in words for people. `named`: `path` is the target the user named (a typo, a device not plugged in: say
    what to name); else one tunectl found on its stack (a node, a loop's backing file), which can only have gone
    since it was found."""
    if e.errno in (errno.EACCES, errno.EPERM):
        return NotPermitted(f"cannot {doing} {path}: {e.strerror}",
                            hint="reading it needs read access to the target and its block devices: run as root")
    if e.errno in (errno.ENOENT, errno.ENOTDIR) and not named:
        return UsageError(f"cannot {doing} {path}: it vanished while tunectl measured (a device or file under the "
                          "target removed or renamed)", where=path,
                          hint="run again once nothing adds or removes devices under the target")
    if e.errno in (errno.ENOENT, errno.ENOTDIR):  # a typo, or a device not plugged in: say what it takes
        return UsageError(f"cannot {doing} {path}: {e.strerror}", where=path,
                          hint="name a block device (sda, /dev/sda: `lsblk` lists them) or an existing file on one")
    return UsageError(f"cannot {doing} {path}: {e.strerror}")


def inspect(path: str) -> PathInfo:
    """A block device node or a regular file; UsageError for anything else."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise _os_error(e, path, "stat") from None
    if stat.S_ISBLK(st.st_mode):
        return PathInfo(path, "block", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}", 0, st.st_ino)
    if stat.S_ISREG(st.st_mode):
        return PathInfo(path, "file", f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_size, st.st_ino)
    raise UsageError(f"{path} is neither a block device nor a regular file",
                     hint="name a block device (sda, /dev/sda) or one regular file on a disk-backed filesystem")


def node_devnum(path: str) -> str | None:
    """maj:min of a block device node, None if `path` is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None


def open_read(path: str, block_device: bool) -> tuple[int, os.stat_result]:
    """`path` opened once for reading (`trust.open_walked`: links root or the user owns, the last component looked
    at before the open): a block device node (`block_device`) or a regular file, nothing else. A named pipe, a
    character device or a directory put at the name is refused, never opened (an open of a pipe would block
    forever; of a device node, act on it). Its descriptor (the caller's to close) and fstat; one byte is read
    through it, so a file root may not read fails here, before any setting is changed."""
    from tunectl.system import trust

    try:
        fd, st = trust.open_walked(path, frozenset({stat.S_IFBLK if block_device else stat.S_IFREG}))
    except trust.Untrusted as e:
        raise UsageError(e.message, hint=e.hint, code="untrusted-link" if isinstance(e, trust.OthersLink) else None,
                         where=path) from None
    except OSError as e:
        raise _os_error(e, path, "open") from None
    try:
        os.pread(fd, 1, 0)
    except OSError as e:
        os.close(fd)
        raise _os_error(e, path, "read") from None
    return fd, st


def reopen(fd: int, path: str) -> int:
    """A new open, read-only, of the very file open at `fd` (the caller's to close), through `trust.reopen`: the
    kernel's link to that open file in /proc, not a name another user can redirect. What the kernel copies into
    an open file when it is opened (the read-ahead window: see `bench.runner.Io.real`) is then taken now, not at
    `fd`'s open. `path` names it in an error; where /proc is not mounted, that error says so."""
    from tunectl.system import trust

    try:
        new = trust.reopen(fd, os.O_RDONLY, path)
    except trust.Untrusted as e:
        raise UsageError(f"cannot open {path} again: {e.found}", hint=e.hint, where=path) from None
    except OSError as e:
        raise _os_error(e, path, "open") from None
    if new is None:
        raise UsageError(f"cannot open {path} again: /proc is not mounted (no {trust.PROC_FD})", hint=trust.PROC_HINT,
                         where=path)
    return new


def read_sequential(path: str, limit: int, block: int, fd: int | None = None) -> tuple[int, float]:
    """Read `path` from the start with buffered read(2)s of `block` bytes, up to `limit` bytes: (bytes, seconds).
    `fd`: a descriptor already open on it (the caller's to close), read from its start instead."""
    buf = bytearray(block)
    view = memoryview(buf)
    own = fd is None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if fd is None else fd
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as e:
        raise _os_error(e, path, "open") from None
    total = 0
    try:
        started = time.perf_counter()
        while total < limit:
            n = os.readv(fd, [view[: min(block, limit - total)]])
            if n == 0:
                break
            total += n
        seconds = time.perf_counter() - started
    except OSError as e:
        raise _os_error(e, path, "read") from None
    finally:
        if own:
            os.close(fd)
    return total, seconds


def drop_cached(files: list[str], block_devices: list[str]) -> None:
    """Evict the clean cached pages of these files and block devices, nothing else: each found on the target's
    stack before (its nodes, a loop's backing file), so one missing now vanished since."""
    for path in [*files, *block_devices]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _os_error(e, path, "open", named=False) from None
        try:
            drop_cached_of(fd, path, path in block_devices)
        finally:
            os.close(fd)


def drop_cached_of(fd: int, path: str, block_device: bool = False) -> None:
    """Evict the clean cached pages of the file (or block device) open at `fd`; `path` names it in an error."""
    import fcntl

    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if block_device:
            fcntl.ioctl(fd, BLKFLSBUF)
    except OSError as e:
        raise _os_error(e, path, "drop the cached pages of") from None
