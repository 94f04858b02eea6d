"""statx() of many paths at once through io_uring: the kernel runs them in parallel, not Python threads.

A replay's inode pass stats tens of thousands of files. From Python threads each
stat costs interpreter time under the GIL, and eight threads spend more of it
handing the GIL over than waiting for the disk. io_uring runs a STATX request in
one of the kernel's io-wq workers (a lookup may sleep on a directory or inode
block, so STATX always goes there), as many at once as the ring allows; Python
only fills submission entries and reads results.

Just enough io_uring for that, with ctypes and mmap: no liburing. It needs Linux
5.6 (IORING_OP_STATX); `StatxRing.open` raises OSError where io_uring is missing
or refused (ENOSYS on old kernels, EPERM under kernel.io_uring_disabled or a
container's seccomp filter), and the caller stats from threads instead.

Memory ordering: there is no SQPOLL thread, so the kernel reads the submission
ring inside io_uring_enter on this CPU, after the entries were written. The
completion ring is written by io-wq workers on other CPUs, tail last (a store
release); reading the tail and then the entries needs an acquire load, which
Python cannot express but x86's total store order gives for free. So the ring
is offered on x86 only; elsewhere `open` raises and the caller uses threads.

Lifetime: a worker writes its struct statx whenever it finishes, so nothing it
may write is freed while a request is in flight. A pass that ends early (an
exception in the consumer, Ctrl-C) takes back what the kernel has not read and
waits for the rest; if even that wait is interrupted, the buffers are kept for
the life of the process.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from itertools import accumulate, repeat
from operator import add

# The io_uring syscalls have one number on every architecture but alpha.
_SETUP, _ENTER, _REGISTER = 425, 426, 427
_ENTER_GETEVENTS = 1
# COOP_TASKRUN: the kernel need not interrupt this task (an IPI) to run io_uring's task work; it
# waits for the next io_uring_enter. Measured: a warm /usr/share pass 0.19 s -> 0.11 s.
_SETUP_COOP_TASKRUN = 1 << 8
_TSO_MACHINES = ("x86_64", "i386", "i486", "i586", "i686")  # see "Memory ordering" above
_REGISTER_IOWQ_MAX_WORKERS = 19  # Linux 5.15; older kernels refuse it and keep their default
_OP_STATX = 21
_AT_FDCWD = -100
_STATX_BASIC_STATS = 0x7FF
_AT_SYMLINK_NOFOLLOW = 0x100
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000

# struct io_uring_sqe, 64 bytes: opcode, flags, ioprio, fd, off (STATX: the struct statx address),
# addr (the path), len (the mask), statx_flags, user_data, buf_index, personality, splice_fd_in, addr3, pad
_SQE = struct.Struct("=BBHiQQIIQHHiQQ")
_CQE = struct.Struct("=QiI")  # user_data, res (-errno on failure), flags
# struct statx: stx_mode at 28, stx_ino and stx_size at 32, stx_mtime (sec, nsec) at 112, stx_dev_major/minor at 136
_STATX = struct.Struct("=28xH2xQQ64xqI12xII")
_STATX_SIZE = 256

_u32 = ctypes.c_uint32
_long = ctypes.c_long  # syscall(2) is variadic and reads every argument as a long: pass them so


class _SqOffsets(ctypes.Structure):
    _fields_ = [(n, _u32) for n in ("head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array",
                                    "resv1")] + [("user_addr", ctypes.c_uint64)]


class _CqOffsets(ctypes.Structure):
    _fields_ = [(n, _u32) for n in ("head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags",
                                    "resv1")] + [("user_addr", ctypes.c_uint64)]


class _Params(ctypes.Structure):
    _fields_ = [(n, _u32) for n in ("sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle",
                                    "features", "wq_fd")] + [("resv", _u32 * 3), ("sq_off", _SqOffsets),
                                                             ("cq_off", _CqOffsets)]


# (inode, size, mtime_ns, (dev_major, dev_minor), st_mode) of a path itself (a symbolic link is not
# followed), or -errno where statx failed.
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a boot-time replay ~4 ms to import: only for the checker
    from typing import Union

    StatxResult = Union[tuple[int, int, int, tuple[int, int], int], int]


class StatxRing:
    """One ring of `entries` submission slots; `statx_all` streams any number of paths through it."""

    def __init__(self, fd: int, params: _Params, libc: ctypes.CDLL) -> None:
        self.fd, self._libc = fd, libc
        sq, cq = params.sq_off, params.cq_off
        self.entries = params.sq_entries
        self._sq = mmap.mmap(fd, sq.array + params.sq_entries * 4, offset=_OFF_SQ_RING)
        self._cq = mmap.mmap(fd, cq.cqes + params.cq_entries * _CQE.size, offset=_OFF_CQ_RING)
        self._sqes = mmap.mmap(fd, params.sq_entries * _SQE.size, offset=_OFF_SQES)
        sqv, self._cqv = memoryview(self._sq).cast("I"), memoryview(self._cq).cast("I")
        self._cqb = memoryview(self._cq)  # the completions as bytes: unpacked a run at a time
        self._sqv = sqv
        for i in range(params.sq_entries):  # slot i of the index array names entry i, for good
            sqv[sq.array // 4 + i] = i
        self._sq_head, self._sq_tail, self._sq_mask = sq.head // 4, sq.tail // 4, sqv[sq.ring_mask // 4]
        self._cq_head, self._cq_tail, self._cq_mask = cq.head // 4, cq.tail // 4, self._cqv[cq.ring_mask // 4]
        self._cqes, self._cq_entries = cq.cqes, params.cq_entries
        # Results land in a small circle of struct statx buffers: at most `entries` are in flight.
        self._results = ctypes.create_string_buffer(_STATX_SIZE * self.entries)
        self._results_addr = ctypes.addressof(self._results)
        self._paths: ctypes.Array | None = None  # the path buffer of the pass under way
        self._in_flight = self._unsubmitted = 0  # read by the kernel and not reaped; written, not yet read
        self._busy = False

    def _settle(self) -> None:
        """Take back the entries the kernel has not read and wait for those it has: until then an
        io-wq worker may still write into self._results (and read self._paths)."""
        sqv = self._sqv  # the kernel's own head: exact, whichever statement an interrupt came between
        sqv[self._sq_tail] = sqv[self._sq_head]
        self._unsubmitted = 0
        try:
            while self._in_flight:
                self._enter(0, 1)
                self._in_flight -= len(self._reap())
        except BaseException:  # cannot wait (a second Ctrl-C): never free what the kernel may write
            _KEPT_FOR_THE_KERNEL.append((self._results, self._paths))
            raise
        finally:
            self._paths = None

    @classmethod
    def open(cls, entries: int = 256, workers: int = 32) -> StatxRing:  # the kernel allows up to 32768
        """A ring whose STATX requests run in at most `workers` kernel threads; OSError where io_uring is refused."""
        if os.uname().machine not in _TSO_MACHINES:
            raise OSError(errno.ENOTSUP, "io_uring from Python is used on x86 only (completion ring ordering)")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        for flags in (_SETUP_COOP_TASKRUN, 0):  # COOP_TASKRUN is Linux 5.19: EINVAL before
            params = _Params()
            params.flags = flags
            fd = libc.syscall(_long(_SETUP), _long(entries), ctypes.byref(params))
            err = ctypes.get_errno() if fd < 0 else 0
            if err != errno.EINVAL:
                break
        if fd < 0:
            raise OSError(err, f"io_uring_setup: {os.strerror(err)}")
        try:
            ring = cls(fd, params, libc)
        except BaseException:
            os.close(fd)
            raise
        # STATX has no file, so io-wq counts it as bounded work: at most min(entries, 4 x CPUs)
        # workers by default, 8 on two CPUs. Lookups mostly wait on the disk: more help (on
        # /usr/share, 2 CPUs: 8 workers 0.40 s, 32 workers 0.32 s; no gain past 32).
        limits = (_u32 * 2)(workers, workers)  # [bounded, unbounded]
        libc.syscall(_long(_REGISTER), _long(fd), _long(_REGISTER_IOWQ_MAX_WORKERS), limits, _long(2))
        return ring

    def close(self) -> None:
        """Wait for any request still in flight, then unmap and close; a second call does nothing."""
        if self.fd < 0:
            return
        try:  # noqa: SIM105 (contextlib: an import a boot replay would pay for this one line)
            self._settle()  # the buffers were kept; closing cancels what has not started
        except OSError:
            pass
        for m in (self._sqv, self._cqv, self._cqb):
            m.release()
        for m in (self._sq, self._cq, self._sqes):
            m.close()
        fd, self.fd = self.fd, -1
        os.close(fd)

    def __enter__(self) -> StatxRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _enter(self, to_submit: int, min_complete: int) -> int:
        done = self._libc.syscall(_long(_ENTER), _long(self.fd), _long(to_submit), _long(min_complete),
                                  _long(_ENTER_GETEVENTS), None, _long(0))
        if done < 0:
            err = ctypes.get_errno()
            if err == errno.EINTR:  # nothing was lost: the caller goes round again
                return 0
            raise OSError(err, f"io_uring_enter: {os.strerror(err)}")
        return done

    def _reap(self) -> list[tuple[int, int, int]]:
        """(user_data, res, flags) of every completion posted so far, consumed at once (the head moves on):
        unpacked by struct a contiguous run of the ring at a time, not one call per completion."""
        cqv = self._cqv
        head, tail = cqv[self._cq_head], cqv[self._cq_tail]
        count = (tail - head) & 0xFFFFFFFF
        if not count:
            return []
        start = head & self._cq_mask
        run = min(count, self._cq_entries - start)  # up to the end of the ring, then from its start
        at = self._cqes + start * _CQE.size
        done = list(_CQE.iter_unpack(self._cqb[at:at + run * _CQE.size]))
        if run < count:
            done += _CQE.iter_unpack(self._cqb[self._cqes:self._cqes + (count - run) * _CQE.size])
        cqv[self._cq_head] = tail
        return done

    def statx_all(self, paths: Sequence[bytes], dir_fds: Sequence[int] | None = None
                  ) -> Iterator[tuple[int, StatxResult]]:
        """(position in `paths`, result) for every path, in completion order; one pass at a time. `dir_fds`: the
        directory each path is relative to (held open by the caller till the pass is over); None: the cwd."""
        if self._busy or self.fd < 0:
            raise RuntimeError("statx_all: one pass at a time, on an open ring")
        self._busy = True
        try:
            buf = self._paths = ctypes.create_string_buffer(b"\0".join(paths) + b"\0")  # NUL-terminated
            names = list(accumulate(map(add, map(len, paths), repeat(1)), initial=ctypes.addressof(buf)))
            results, results_addr, unpack = self._results, self._results_addr, _STATX.unpack_from
            sqes, pack, mask, slots, size = self._sqes, _SQE.pack_into, self._sq_mask, self.entries, _SQE.size
            tail, nxt, total = self._sqv[self._sq_tail], 0, len(paths)
            free = list(range(slots))  # result buffers not in use; user_data carries (index << 16) | slot
            while nxt < total or len(free) < slots:
                first = nxt
                while nxt < total and free:
                    slot = free.pop()
                    pack(sqes, (tail & mask) * size, _OP_STATX, 0, 0, _AT_FDCWD if dir_fds is None else dir_fds[nxt],
                         results_addr + slot * _STATX_SIZE, names[nxt], _STATX_BASIC_STATS, _AT_SYMLINK_NOFOLLOW,
                         nxt << 16 | slot, 0, 0, 0, 0, 0)
                    tail = (tail + 1) & 0xFFFFFFFF
                    nxt += 1
                self._sqv[self._sq_tail] = tail
                self._unsubmitted += nxt - first
                submitted = self._enter(self._unsubmitted, 1)
                self._unsubmitted -= submitted
                reaped = self._reap()
                self._in_flight += submitted - len(reaped)
                for user_data, res, _ in reaped:
                    slot = user_data & 0xFFFF
                    if res < 0:
                        free.append(slot)
                        yield user_data >> 16, res
                        continue
                    mode, ino, size_, sec, nsec, major, minor = unpack(results, slot * _STATX_SIZE)
                    free.append(slot)  # read: the slot may take the next request
                    yield user_data >> 16, (ino, size_, sec * 1_000_000_000 + nsec, (major, minor), mode)
        finally:
            self._busy = False
            if self.fd >= 0:
                self._settle()


# Buffers the kernel might still write into after a wait was interrupted: never freed.
_KEPT_FOR_THE_KERNEL: list = []
