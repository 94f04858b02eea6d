"""The edges that measure: a cold read with every layer's /sys/block/*/stat around it, and a block trace.

Cold means: the file's pages, every backing file's and every block device's
of the stack dropped one by one (fadvise DONTNEED, BLKFLSBUF), as bench does;
never /proc/sys/vm/drop_caches. The read uses the application's read size.
The trace runs in a tracefs instance of its own (instances/tunectl-explain-PID),
filtered to the stack's devices, and removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from tunectl.bench.diskstat import delta, read_stats
from tunectl.context import Context
from tunectl.errors import NotPermitted, UsageError
from tunectl.explain import trace as tracing
from tunectl.explain.model import ColdRead, StackFacts
from tunectl.system import blockio


def cold_files(facts: StackFacts, path: str) -> list[str]:
    """The file read and every loop's backing file: their pages are dropped before a cold read."""
    return [path, *(la.facts.loop.backing_file for la in facts.all("loop") if la.facts.loop and la.facts.loop.backing_file)]


def cold_read(ctx: Context, names: list[str], files: list[str], path: str, read_size: int, limit: int,
              fd: int | None = None) -> ColdRead:
    """Drop `files`' and block devices `names`' cached pages, then read `path` with /sys/block/*/stat around it.
    `fd`: `path` opened already (`facts.open_file`): its pages are dropped and it is read through it, not by name."""
    kept = []
    if fd is not None:
        blockio.drop_cached_of(fd, path)
        files = [f for f in files if f != path]
    blockio.drop_cached(files, [])
    for name in names:
        node = ctx.roots.node(name)
        try:
            if node:
                blockio.drop_cached([], [node])
        except NotPermitted:
            kept.append(name)  # a device this run may not open (a VM's root disk): its pages stay
    before = read_stats(ctx.sysfs, names)
    n, seconds = blockio.read_sequential(path, limit, read_size, fd)
    after = read_stats(ctx.sysfs, names)
    return ColdRead(path, read_size, n, seconds, tuple(delta(name, before[name], after[name]) for name in names),
                    tuple(kept))


class TraceUnavailable(UsageError):
    """tracefs has no block events here (not mounted, or a kernel built without them)."""


def _tracefs(ctx: Context) -> str:
    for rel in ("kernel/tracing", "kernel/debug/tracing"):
        path = os.path.join(str(ctx.sysfs.root), rel)
        if os.path.isdir(os.path.join(path, "events", "block", "block_rq_complete")):
            return path
    raise TraceUnavailable(
        f"--trace: tracefs under {ctx.sysfs.root}/kernel/tracing has no block events on this kernel",
        hint="mount tracefs (mount -t tracefs nodev /sys/kernel/tracing) on a kernel with CONFIG_BLK_DEV_IO_TRACE; "
             "leave out --trace to get the per-layer counts without timings")


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def dev_filter(devnums: list[str]) -> str:
    """A tracefs filter on the events' `dev` field (the kernel's dev_t: major << 20 | minor)."""
    values = []
    for devnum in devnums:
        major, minor = (int(x) for x in devnum.split(":"))
        values.append(f"dev == {major << 20 | minor}")
    return " || ".join(values)


@contextlib.contextmanager
def _instance(ctx: Context) -> Iterator[str]:
    root = _tracefs(ctx)
    path = os.path.join(root, "instances", f"tunectl-explain-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as e:
        raise TraceUnavailable(f"--trace: cannot create the tracefs instance {path}: {e.strerror}",
                               hint="run as root; tracefs must allow instances") from None
    try:
        yield path
    finally:
        for event in tracing.EVENTS:
            with contextlib.suppress(OSError):
                _write(os.path.join(path, "events", "block", event, "enable"), "0")
        with contextlib.suppress(OSError):
            os.rmdir(path)


def traced(ctx: Context, facts: StackFacts, measure: Callable[[], ColdRead]) -> tuple[ColdRead, dict[str, tracing.Timing]]:
    """`measure()` with the four block events of the stack's devices recorded; timings by kernel name."""
    devnums = [la.device.devnum for la in facts.blocks if la.device.devnum]
    by_devnum = {la.device.devnum: la.name for la in facts.blocks if la.device.devnum}
    with _instance(ctx) as inst:
        _write(os.path.join(inst, "buffer_size_kb"), "16384")
        for event in tracing.EVENTS:
            base = os.path.join(inst, "events", "block", event)
            _write(os.path.join(base, "filter"), dev_filter(devnums))
            _write(os.path.join(base, "enable"), "1")
        cold = measure()
        for event in tracing.EVENTS:
            _write(os.path.join(inst, "events", "block", event, "enable"), "0")
        with open(os.path.join(inst, "trace"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    per = tracing.timings(tracing.parse_events(text))
    return cold, {by_devnum.get(dev, dev): t for dev, t in per.items()}
