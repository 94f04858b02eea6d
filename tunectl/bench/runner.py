"""Running a sweep: snapshot every setting it may touch, set each point, read cold, restore.

The snapshot is a `tuning.journal.Journal` in the current form (what `journal.json`
holds), so the restore is `rollback_plan` + `apply_settings`: the same code
that brings back a scheduler's knobs after a switch (the kernel resets them)
and nr_requests (a switch resets it too). The state lock is held throughout,
so a `tunectl apply` started meanwhile waits instead of interleaving.

Before the first point the target is read once, unmeasured (`Io.warm`): what the
sweep drops between points (the file's pages, each device's buffer cache) is not
every cache on the way. squashfs keeps partial compressed blocks in a page cache
of its own from 6.5 on when its device's block size is the page size (a 4 KiB
dm-verity), and dm-verity keeps the hash blocks it read in dm-bufio; neither
fadvise nor BLKFLSBUF reaches them (squashfs's empties only on unmount or through
vm.drop_caches, the whole machine's, never used). Without the warm read the first
point alone reads them from the disk and no two points compare; with it every
point starts from the same caches.
"""

from __future__ import annotations

from collections.abc import Callable

from tunectl.attributes import parse_scheduler
from tunectl.bench.diskstat import DiskStat, delta, read_stats
from tunectl.bench.results import RandomRead, Run
from tunectl.bench.stack import Opened, Target
from tunectl.bench.sweep import Point
from tunectl.context import Context
from tunectl.devices.discover import read_device
from tunectl.errors import ExitCode, NotPermitted, TunectlError
from tunectl.record import field, record
from tunectl.status import Status
from tunectl.system.hold import holding
from tunectl.system.interrupts import interrupts_deferred, sigterm_interrupts
from tunectl.system.runner import Completed
from tunectl.system.sysfs import Sysfs
from tunectl.tuning import apply as applying
from tunectl.tuning.journal import Journal, JournalEntry
from tunectl.tuning.plan import Setting


class BenchError(TunectlError):
    """The kernel refused a setting of the sweep (the sweep stops; what was changed is restored)."""

    exit_code = ExitCode.PARTIAL
    code = "bench"


@record
class Io:
    """The OS edges a sweep uses; tests swap them for fakes."""

    read: Callable[[str, int, int], tuple[int, float]]
    drop: Callable[[list[str], list[str]], None]
    random: Callable[[str, int], RandomRead] | None = None
    warm: Callable[[str, int, int], object] | None = None  # the unmeasured read before the first point

    @classmethod
    def real(cls, run: Callable[..., Completed], opened: Opened, random_seconds: float = 3.0) -> Io:
        """Reads of this machine's devices, the target's through `opened` (its descriptor: the sweep names the
        target by `read_path`, but never opens that name again); fio through `run` (the Context's runner)."""
        import os
        import stat

        from tunectl.system import blockio

        def read(path: str, limit: int, block: int) -> tuple[int, float]:
            # Kernel quirk: an open file's read-ahead window (file->f_ra.ra_pages) is copied from the queue's
            # read_ahead_kb when the file is opened (file_ra_state_init), not looked up at each read; a later
            # write of read_ahead_kb reaches only files opened after it. Read through the descriptor held since
            # the start, every point would read with the read-ahead of that open. So each read is a new open of
            # the same file, taken after this point's read_ahead_kb is set: through /proc/self/fd (the held
            # descriptor's file, no name looked up again), as fio's opens are.
            fd = blockio.reopen(opened.fd, path)
            try:
                return blockio.read_sequential(path, limit, block, fd)
            finally:
                os.close(fd)

        device = stat.S_ISBLK(os.fstat(opened.fd).st_mode)

        def drop(files: list[str], block_devices: list[str]) -> None:
            for path in files:  # the target file: the sweep drops no other
                blockio.drop_cached_of(opened.fd, path)
            if device:
                # Kernel quirk: the last close of a block device empties its page cache (blkdev_put ->
                # blkdev_flush_mapping -> kill_bdev), and a partition's cache is its own, not its disk's. Opened
                # by name for each read, the target was closed after each and so read cold; held open for the
                # sweep, a partition's cache survives the drops of its disk's node (`block_devices`): every
                # point after the first would read it from memory. So the target is dropped through its own
                # descriptor too.
                blockio.drop_cached_of(opened.fd, opened.path, block_device=True)
            blockio.drop_cached([], block_devices)

        def fio(path: str, size: int) -> RandomRead:
            from tunectl.bench.fio import fio_argv, parse_fio_json

            # fio opens a name: this process's descriptor's, which /proc reopens as the very file it is open on
            argv = fio_argv(f"/proc/{os.getpid()}/fd/{opened.fd}", size, random_seconds)
            return parse_fio_json(run(argv, timeout=random_seconds + 60).stdout)

        return cls(read, drop, fio, read)


@record
class Sweep:
    ctx: Context
    stack: Target
    points: list[Point]
    size: int  # bytes per point
    block: int  # bytes per read(2)
    io: Io
    random: bool = False
    on_point: Callable[[int, Point], None] = lambda i, p: None
    on_done: Callable[[int, Run], None] = lambda i, r: None
    runs: list[Run] = field(default_factory=list)
    changed: bool = False  # a setting was written (so a restore was due)
    restored: list[applying.Outcome] = field(default_factory=list)
    interrupted: bool = False

    @property
    def restore_failures(self) -> list[applying.Outcome]:
        return [o for o in self.restored if o.status not in (Status.CHANGED, Status.IN_SYNC)]

    def run(self) -> list[Run]:
        # The hold tells a verify meanwhile that these devices carry the sweep's temporary values.
        with self.ctx.state.locked(), holding(self.ctx.state.dir, "tunectl bench",
                                              [d.name for d in self.stack.devices]), sigterm_interrupts():
            journal = snapshot(self.ctx, self.stack)
            try:
                self._warm()
                for i, point in enumerate(self.points, 1):
                    self.on_point(i, point)
                    self._set(point)
                    run = self._measure(i, point)
                    self.runs.append(run)
                    self.on_done(i, run)
            except KeyboardInterrupt:
                self.interrupted = True
                raise
            finally:
                if self.changed:
                    with interrupts_deferred():
                        self.restored = restore(self.ctx, self.stack, journal)
        return self.runs

    def _set(self, point: Point) -> None:
        settings = []
        for dev in self.stack.scheduled if point.scheduler else ():
            current = _scheduler(self.ctx.sysfs, dev.name)
            settings.append(Setting(dev.name, dev.identity, "scheduler", current, point.scheduler, "bench",
                                    Status.CHANGE if current != point.scheduler else Status.IN_SYNC))
        top = self.stack.top
        settings.append(Setting(top.name, top.identity, "read_ahead_kb", None, point.read_ahead_kb, "bench", Status.CHANGE))
        self.changed = True
        outcomes = applying.apply_settings(self.ctx.sysfs, settings, workers=1)
        bad = [o for o in outcomes if o.status not in (Status.CHANGED, Status.IN_SYNC)]
        if bad:
            o = bad[0]
            what = f"cannot set {o.setting.device} {o.setting.attribute} to {o.setting.after}: {o.error}"
            if o.status == Status.NOT_PERMITTED:
                raise NotPermitted(what, hint="run as root")
            raise BenchError(what, hint="the kernel refused a value of the sweep; leave it out of "
                                        "--read-ahead/--schedulers")

    def _warm(self) -> None:
        """Read once what any point may read (its bytes and the deepest read-ahead beyond), measuring nothing."""
        if self.io.warm is None or not self.points:
            return
        deepest = max(p.read_ahead_kb for p in self.points) * 1024
        self.io.warm(self.stack.read_path, min(self.size + deepest, self.stack.read_bytes), self.block)

    def _stats(self) -> dict[str, DiskStat]:
        return read_stats(self.ctx.sysfs, [dev.name for dev in self.stack.devices])

    def _measure(self, order: int, point: Point) -> Run:
        nodes = [self.stack.nodes[d.name] for d in self.stack.devices]
        files = [self.stack.read_path] if self.stack.kind == "file" else []
        limit = min(self.size, self.stack.read_bytes)
        self.io.drop(files, nodes)
        before = self._stats()
        n, seconds = self.io.read(self.stack.read_path, limit, self.block)
        after = self._stats()
        stats = tuple(delta(name, before[name], after[name]) for name in before)
        rnd = None
        if self.random and self.io.random is not None:
            self.io.drop(files, nodes)
            rnd = self.io.random(self.stack.read_path, limit)
        return Run(point, order, n, seconds, stats, rnd)


def _scheduler(sysfs: Sysfs, name: str) -> str | None:
    return parse_scheduler(sysfs.read_or(f"block/{name}/queue/scheduler", "") or "")[0]


def snapshot(ctx: Context, stack: Target) -> Journal:
    """Before the first change: every value the sweep may disturb, as a journal (tuning.journal's current form)."""
    entries = {}
    scheduled = {d.name for d in stack.scheduled}
    for old in stack.devices:
        dev = read_device(ctx.sysfs, ctx.udev, old.name) or old
        attrs: dict = {}
        iosched = {}
        if dev.name == stack.top.name:
            attrs["read_ahead_kb"] = dev.queue.get("read_ahead_kb")
        if dev.name in scheduled and dev.scheduler:
            attrs["scheduler"] = dev.scheduler
            if "nr_requests" in dev.queue:
                attrs["nr_requests"] = dev.queue["nr_requests"]  # a scheduler switch resets it
            iosched[dev.scheduler] = dict(dev.iosched)
        if attrs:
            entries[dev.identity] = JournalEntry(dev.name, attrs, iosched)
    return Journal(entries)


def restore(ctx: Context, stack: Target, journal: Journal) -> list[applying.Outcome]:
    """Put back the snapshot; a device that is gone (a detached loop) fails per attribute, never silently."""
    devices = [d for d in (read_device(ctx.sysfs, ctx.udev, d.name) for d in stack.devices) if d is not None]
    settings = applying.rollback_plan(journal, devices, lambda d: True)
    present = {d.identity for d in devices}
    gone = [applying.Outcome(Setting(entry.name, identity, attr, None, value, "snapshot", Status.FAILED),
                             Status.FAILED, error="the device is gone (detached or removed); not restored")
            for identity, entry in journal.devices.items() if identity not in present
            for attr, value in sorted(entry.attributes.items())]
    return applying.apply_settings(ctx.sysfs, settings, workers=1) + gone


