#!/usr/bin/env python3
"""Would io_uring chains make `preload replay`'s data pass faster than plain WILLNEED? (issue #30)

Run as root: .venv/bin/python benchmarks/preload_chains.py [--runs 5] [CORPUS] (default /usr/share).

The replay's data pass makes five system calls per file from Python (a look at the name, open,
fstat, fadvise, close) where a plain WILLNEED loop makes three. This measures the data pass alone,
with the same list in the same (physical) order, in-process, no start-up and no list to read:
  (w) WILLNEED loop, directory order: open, fadvise(WILLNEED) in read-ahead-window chunks, close
  (p) the same loop in the list's physical order
  (r) tunectl's data pass as `preload replay` runs it (every file looked at by name before it is opened)
  (u) io_uring, no checks at all: per file a linked OPENAT (direct descriptor) -> FADVISE -> CLOSE chain,
      64 files in flight: the ceiling of moving the per-file calls out of Python
  (s) io_uring with the replay's checks: a look by name (Python), OPENAT in the ring, the opened file
      checked (fstat, Python) before any read, then FADVISE -> CLOSE in the ring; 128 files a round
Each run starts data-cold (every corpus file's pages dropped with DONTNEED, the inodes left cached, as
benchmarks/preload.py --cold evict) and is timed until the corpus' device has no requests in progress, by the
replay's own rule (field 9 of sysfs stat, the I/O scheduler's queue included; not `inflight`, which counts only
what the driver holds), at most 10 s (a wait that reaches it is printed);
CPU seconds are the process's (io_uring's kernel workers are its threads). Medians of --runs rounds,
the method order rotating from round to round. Measured on this project's 2-CPU VM (virtio, load 2-3):
see the commit that added this file for the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import statistics
import sys
import time
from pathlib import Path
from stat import S_ISREG

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import tunectl_argv  # noqa: E402
from benchmarks.preload import SETTLE, WINDOW, evict, files_in_walk_order, run_quiet  # noqa: E402
from tunectl.preload import order  # noqa: E402
from tunectl.preload.listfile import read_list  # noqa: E402
from tunectl.preload.replay import wait_until_drained  # noqa: E402
from tunectl.system import iouring  # noqa: E402
from tunectl.system.sysfs import Sysfs  # noqa: E402

# io_uring opcodes and submission flags (include/uapi/linux/io_uring.h)
OP_OPENAT, OP_CLOSE, OP_FADVISE = 18, 19, 24
SQE_FIXED_FILE, SQE_IO_LINK = 1, 4
REGISTER_FILES = 2
# O_CLOEXEC is refused with a direct descriptor (it never enters the process' file table)
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY


class Chains:
    """A ring (tunectl's statx ring, set up the same way) driven with other opcodes: the benchmark's only."""

    def __init__(self, slots: int) -> None:
        self.ring = iouring.StatxRing.open(entries=1024)
        self.slots = slots
        files = (ctypes.c_int * slots)(*([-1] * slots))  # a sparse table of direct descriptors
        if self.ring._libc.syscall(iouring._long(iouring._REGISTER), iouring._long(self.ring.fd),
                                   iouring._long(REGISTER_FILES), files, iouring._long(slots)) < 0:
            raise OSError(ctypes.get_errno(), "io_uring_register(FILES)")
        self.tail = self.ring._sqv[self.ring._sq_tail]
        self.unsubmitted = 0

    def put(self, *fields: int) -> None:
        r = self.ring
        iouring._SQE.pack_into(r._sqes, (self.tail & r._sq_mask) * iouring._SQE.size, *fields)
        self.tail = (self.tail + 1) & 0xFFFFFFFF
        self.unsubmitted += 1

    def submit(self, wait: int) -> list[tuple[int, int]]:
        """Submit what was put, wait for `wait` completions, return every completion posted as (user_data, res)
        (the ring's reaper also gives each completion's flags, not needed here)."""
        self.ring._sqv[self.ring._sq_tail] = self.tail
        done: list[tuple[int, int]] = []
        while self.unsubmitted or len(done) < wait:
            self.unsubmitted -= self.ring._enter(self.unsubmitted, 1 if len(done) < wait else 0)
            done += [(user_data, res) for user_data, res, _flags in self.ring._reap()]
        return done

    def close(self) -> None:
        self.ring.close()


def unchecked_chains(entries: list, in_flight: int = 64) -> int:
    """(u): OPENAT -> FADVISE -> CLOSE per file, linked, `in_flight` files at a time; files that failed."""
    chains = Chains(in_flight)
    paths = ctypes.create_string_buffer(b"\0".join(os.fsencode(e.path) for e in entries) + b"\0")
    base, offset, failed = ctypes.addressof(paths), 0, 0
    free, left, nxt = list(range(in_flight)), {}, 0
    while nxt < len(entries) or left:
        while nxt < len(entries) and free:
            slot, e = free.pop(), entries[nxt]
            chains.put(OP_OPENAT, SQE_IO_LINK, 0, iouring._AT_FDCWD, 0, base + offset, 0, OPEN_FLAGS, slot,
                       0, 0, slot + 1, 0, 0)
            chains.put(OP_FADVISE, SQE_IO_LINK | SQE_FIXED_FILE, 0, slot, 0, 0, min(e.size, WINDOW),
                       os.POSIX_FADV_WILLNEED, slot, 0, 0, 0, 0, 0)
            chains.put(OP_CLOSE, 0, 0, 0, 0, 0, 0, 0, slot, 0, 0, slot + 1, 0, 0)
            offset += len(os.fsencode(e.path)) + 1
            left[slot], nxt = 3, nxt + 1
        for slot, res in chains.submit(1):
            failed += res < 0 and res != -errno.ECANCELED
            left[slot] -= 1
            if not left[slot]:
                del left[slot]
                free.append(slot)
    chains.close()
    return failed


def checked_chains(entries: list, devnum: int, batch: int = 128) -> int:
    """(s): the replay's checks kept: look by name, OPENAT in the ring, fstat, FADVISE -> CLOSE in the ring."""
    chains = Chains(1)
    lstat, fstat, failed = os.lstat, os.fstat, 0
    for start in range(0, len(entries), batch):
        looked = []
        for e in entries[start:start + batch]:
            try:
                st = lstat(e.path)
            except OSError:
                failed += 1
                continue
            if S_ISREG(st.st_mode) and st.st_ino == e.inode:
                looked.append(e)
            else:
                failed += 1
        paths = ctypes.create_string_buffer(b"\0".join(os.fsencode(e.path) for e in looked) + b"\0")
        base, offset = ctypes.addressof(paths), 0
        for j, e in enumerate(looked):
            chains.put(OP_OPENAT, 0, 0, iouring._AT_FDCWD, 0, base + offset, 0, OPEN_FLAGS | os.O_CLOEXEC, j,
                       0, 0, 0, 0, 0)
            offset += len(os.fsencode(e.path)) + 1
        opened = chains.submit(len(looked))
        calls = 0
        for j, fd in opened:
            if fd < 0:
                failed += 1
                continue
            e, st = looked[j], fstat(fd)
            if S_ISREG(st.st_mode) and (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) == (
                    e.inode, devnum, e.size, e.mtime_ns):
                chains.put(OP_FADVISE, SQE_IO_LINK, 0, fd, 0, 0, min(e.size, WINDOW), os.POSIX_FADV_WILLNEED, 0,
                           0, 0, 0, 0, 0)
                calls += 1
            else:
                failed += 1
            chains.put(OP_CLOSE, 0, 0, fd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            calls += 1
        chains.submit(calls)
    chains.close()
    return failed


def willneed_loop(paths_sizes: list[tuple[str, int]]) -> None:
    for path, size in paths_sizes:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            for off in range(0, size, WINDOW):
                os.posix_fadvise(fd, off, WINDOW, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", default="/usr/share")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("this benchmark needs root (it drops the corpus' pages)")
    from tunectl.preload.replay import _issue

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    files = files_in_walk_order(args.corpus)
    lst = Path("/var/tmp") / f"tunectl-chains-{os.getpid()}.list"
    try:
        run_quiet(tunectl_argv() + ["preload", "collect", args.corpus, "-o", str(lst)])
        listed = read_list(str(lst)).entries
    finally:
        lst.unlink(missing_ok=True)
    devices = {e.device for e in listed}
    if len(devices) != 1:
        sys.exit(f"{args.corpus}: one file system expected, found {len(devices)}")
    device = devices.pop()
    devnum = os.makedev(*map(int, device.split(":")))
    physical = [listed[i] for i in order.physical_indices(listed)]
    in_order = list(range(len(listed)))
    window = {device: WINDOW}
    sysfs, timeouts = Sysfs("/sys"), []

    def replay_pass() -> None:
        _issue(physical, in_order, bytearray(b"\2" * len(physical)), window, {device: devnum}, None, [])

    methods = {
        "w": ("WILLNEED loop, directory order", lambda: willneed_loop(files)),
        "p": ("WILLNEED loop, physical order", lambda: willneed_loop([(e.path, e.size) for e in physical])),
        "r": ("tunectl's data pass (5 calls a file)", replay_pass),
        "u": ("io_uring chains, no checks", lambda: unchecked_chains(physical)),
        "s": ("io_uring chains, checks kept", lambda: checked_chains(physical, devnum)),
    }
    wall: dict[str, list[float]] = {k: [] for k in methods}
    cpu: dict[str, list[float]] = {k: [] for k in methods}
    for r in range(args.runs):
        keys = list(methods)
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            evict(files)
            time.sleep(0.2)
            c, t = time.process_time(), time.perf_counter()
            methods[k][1]()
            if not wait_until_drained(sysfs, [device], SETTLE):  # as the replay waits, by its own function
                timeouts.append(k)
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    print(f"{args.corpus}: {len(files)} files; data-cold, timed until {device} has no requests in progress (field 9 "
          f"of its sysfs stat, the replay's rule); medians of {args.runs}"
          + (f"; waits that reached {SETTLE} s: {' '.join(timeouts)}" if timeouts else ""))
    for k, (label, _fn) in methods.items():
        runs = " ".join(f"{s:.2f}" for s in wall[k])
        print(f"  ({k}) {label:<38} {statistics.median(wall[k]):5.2f} s  cpu {statistics.median(cpu[k]):4.2f} s"
              f"   (runs: {runs})")
    w = statistics.median(wall["w"])
    print("  ratios against (w): " + "  ".join(f"w/{k} {w / statistics.median(wall[k]):.2f}" for k in methods))
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
