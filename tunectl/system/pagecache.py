"""The page-cache edge: where a file lies on disk (FIEMAP), what of it is cached (mincore),
and asking the kernel to read ahead (posix_fadvise WILLNEED). No root needed for any of it.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import NamedTuple

FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)
_FIEMAP_HEADER = struct.Struct("=QQLLLL")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_FIEMAP_EXTENT = struct.Struct("=QQQ16xL12x")  # fe_logical, fe_physical, fe_length, reserved, fe_flags, reserved
FIEMAP_EXTENT_UNKNOWN = 0x2  # data location not known yet
FIEMAP_EXTENT_DELALLOC = 0x4  # delayed allocation: no block until writeback
# ENOTTY/EOPNOTSUPP: no fiemap in this file system (squashfs, tmpfs, procfs, many FUSE).
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS}


class Extent(NamedTuple):
    logical: int
    physical: int
    length: int
    flags: int

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
        _libc = lib
    return _libc


def residency(fd: int, size: int) -> bytes:
    """mincore(2) over the whole file: one byte per page, bit 0 set when the page is cached.

    Beware: for a file the caller may not write (and does not own, without
    CAP_FOWNER) the kernel answers "all resident" to hide cache side channels;
    see `residency_observable`.
    """
    import ctypes

    if size <= 0:
        return b""
    lib = _lib()
    prot_read, map_shared = 0x1, 0x01
    addr = lib.mmap(None, size, prot_read, map_shared, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    try:
        vec = ctypes.create_string_buffer((size + 4095) // 4096)
        if lib.mincore(addr, size, vec) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return vec.raw
    finally:
        lib.munmap(addr, size)


def residency_observable(path: str, st: os.stat_result) -> bool:
    """Whether mincore tells the truth about this file for this caller (owner, root, or writable)."""
    euid = os.geteuid()
    return euid == 0 or st.st_uid == euid or os.access(path, os.W_OK)


def device_of(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
