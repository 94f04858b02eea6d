"""The page-cache edge: where a file lies on disk (FIEMAP), what of it is cached (mincore),
and asking the kernel to read ahead (posix_fadvise WILLNEED). No root needed for any of it.
"""

from __future__ import annotations

import errno
import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple

    class _Fields(NamedTuple):
        logical: int
        physical: int
        length: int
        flags: int
else:  # typing is one of the largest modules a boot replay would import before its first read (metadata.py)
    from collections import namedtuple

    _Fields = namedtuple("_Fields", "logical physical length flags")

FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)
_FIEMAP_HEADER = struct.Struct("=QQLLLL")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_FIEMAP_EXTENT = struct.Struct("=QQQ16xL12x")  # fe_logical, fe_physical, fe_length, reserved, fe_flags, reserved
FIEMAP_EXTENT_UNKNOWN = 0x2  # data location not known yet
FIEMAP_EXTENT_DELALLOC = 0x4  # delayed allocation: no block until writeback
# ENOTTY/EOPNOTSUPP: no fiemap in this file system (squashfs, tmpfs, procfs, many FUSE).
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS}


class Extent(_Fields):
    """One FIEMAP extent: byte offsets and length (ints), and the kernel's flags."""

    __slots__ = ()

    @property
    def located(self) -> bool:
        return not self.flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC)


def fiemap(fd: int, start: int = 0, length: int = 2**64 - 1, count: int = 32) -> list[Extent] | None:
    """Up to `count` extents of the open file from byte `start`; None where the file system has no FIEMAP.

    Never FIEMAP_FLAG_SYNC: that would write dirty data back, and a read-only
    command writes nothing. Dirty, unallocated extents come back not `located`.
    """
    import fcntl

    buf = bytearray(_FIEMAP_HEADER.pack(start, length, 0, 0, count, 0) + bytes(_FIEMAP_EXTENT.size * count))
    try:
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    except OSError as e:
        if e.errno in _UNSUPPORTED:
            return None
        raise
    mapped = _FIEMAP_HEADER.unpack_from(buf)[3]
    return [Extent(*_FIEMAP_EXTENT.unpack_from(buf, _FIEMAP_HEADER.size + i * _FIEMAP_EXTENT.size))
            for i in range(min(mapped, count))]


def first_physical(fd: int, offset: int = 0) -> int | None:
    """Device byte offset of the data at `offset`; None if unknown (no FIEMAP, a hole, not written back)."""
    extents = fiemap(fd, offset, count=1)
    if not extents or not extents[0].located:
        return None
    first = extents[0]
    return first.physical + max(0, offset - first.logical)


def willneed(fd: int, offset: int, length: int) -> None:
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)


_libc = None


def _lib():
    global _libc
    if _libc is None:
        import ctypes

        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        lib.syscall.restype = ctypes.c_long
        _libc = lib
    return _libc


def residency(fd: int, size: int) -> bytes:
    """mincore(2) over the whole file: one byte per page, bit 0 set when the page is cached.

    Beware: for a file the caller may not write (and does not own, without
    CAP_FOWNER) the kernel answers "all resident" to hide cache side channels;
    see `residency_observable`.
    """
    if size <= 0:
        return b""
    return residency_at(fd, 0, size)


def residency_observable(path: str, st: os.stat_result) -> bool:
    """Whether mincore tells the truth about this file for this caller (owner, root, or writable)."""
    euid = os.geteuid()
    return euid == 0 or st.st_uid == euid or os.access(path, os.W_OK)


def device_of(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def open_block_device(path: str, devnum: str) -> int:
    """A read-only descriptor on the block device node `path`, which must be MAJ:MIN `devnum`.

    Opened without following a link, and checked to be a block device with that
    very number (OSError ENODEV otherwise): a name swapped in /dev never makes
    tunectl read another device or a file.
    """
    import stat

    major, minor = map(int, devnum.split(":"))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISBLK(st.st_mode) or st.st_rdev != os.makedev(major, minor):
        os.close(fd)
        raise OSError(errno.ENODEV, f"{path} is not block device {devnum}")
    return fd


_CACHESTAT = 451  # cachestat(2), Linux 6.5: cached pages of a range in one call
PAGE_SIZE = 4096


def cached_pages(fd: int, offset: int, length: int) -> int | None:
    """cachestat(2): how many pages of the range are cached; None where the kernel has no cachestat."""
    import ctypes

    lib = _lib()
    rng = (ctypes.c_uint64 * 2)(offset, length)
    out = (ctypes.c_uint64 * 5)()
    if lib.syscall(_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(out), 0) != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise OSError(code, os.strerror(code))
    return int(out[0])


def residency_at(fd: int, offset: int, length: int) -> bytes:
    """mincore(2) over `length` bytes from `offset` (a multiple of the page size): one byte per page."""
    import ctypes

    lib = _lib()
    prot_read, map_shared = 0x1, 0x01
    addr = lib.mmap(None, length, prot_read, map_shared, fd, offset)
    if addr in (None, ctypes.c_void_p(-1).value):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    try:
        vec = ctypes.create_string_buffer((length + 4095) // 4096)
        if lib.mincore(addr, length, vec) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return vec.raw
    finally:
        lib.munmap(addr, length)


def device_cached_ranges(fd: int, size: int) -> list[tuple[int, int]] | None:
    """Byte ranges of an open block device's pages that are in its page cache now.

    By cachestat(2), bisecting: a range with nothing cached is left at once, a range all cached is
    taken whole. Not mincore: ext4 reads its metadata through buffer heads, which leave the page
    itself not "uptodate", and mincore reports such pages as absent (on Linux 6.18, 60 pages cached
    after a walk, 4 of them seen by mincore). None without cachestat (before Linux 6.5).
    """
    if size <= 0:
        return []
    if cached_pages(fd, 0, PAGE_SIZE) is None:
        return None
    out: list[tuple[int, int]] = []
    stack = [(0, (size + PAGE_SIZE - 1) // PAGE_SIZE)]  # page ranges [lo, hi) still to look at
    while stack:
        lo, hi = stack.pop()
        n = cached_pages(fd, lo * PAGE_SIZE, (hi - lo) * PAGE_SIZE)
        if not n:
            continue
        if n >= hi - lo:
            out.append((lo * PAGE_SIZE, min(hi * PAGE_SIZE, size) - lo * PAGE_SIZE))
            continue
        mid = (lo + hi) // 2
        stack += [(mid, hi), (lo, mid)]  # low half first: ranges come out in order
    merged: list[tuple[int, int]] = []
    for start, length in out:
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1] = (merged[-1][0], merged[-1][1] + length)
        else:
            merged.append((start, length))
    return merged


def sequential_rate(path: str, devnum: str, nbytes: int = 32 << 20, block: int = 1 << 20) -> float | None:
    """Bytes/s of one sequential O_DIRECT read of `nbytes` from the middle of block device `path` (the
    page cache is neither used nor filled); None when it cannot be opened, is small or refuses O_DIRECT."""
    import fcntl
    import mmap
    import time

    try:
        fd = open_block_device(path, devnum)
    except OSError:
        return None
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size < 2 * nbytes:
            return None
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
        start = size // 2 // block * block
        began = time.monotonic()
        done = 0
        while done < nbytes:
            n = os.preadv(fd, [buf], start + done)
            if n <= 0:
                break
            done += n
        seconds = time.monotonic() - began
        return done / seconds if done and seconds > 0 else None
    except OSError:
        return None
    finally:
        buf.close()
        os.close(fd)
