"""A fake sysfs that stores values the way the kernel does, and builders for realistic trees.

``FakeKernel`` is a :class:`tunectl.system.sysfs.Sysfs` on a plain directory whose ``write``
behaves like the block layer's store handlers on Linux 6.18 (HZ=250), as measured
on a real kernel:

- ``queue/scheduler`` accepts only an offered name (or the ``deadline`` alias),
  moves the brackets, replaces ``queue/iosched/`` with the new scheduler's knobs at
  their defaults and resets ``nr_requests``; writing the active one changes nothing.
- Numbers are parsed like ``kstrtoul``/``kstrtoint`` (no spaces, no hex, one
  trailing newline): anything else is EINVAL. Most knobs clamp rather than
  refuse; iosched times are stored in jiffies and read back rounded.
- Writing a queue *limit* (rotational, add_random, iostats, stable_writes,
  max_sectors_kb, write_cache) raises a small read_ahead_kb, as 6.18's
  blk_apply_bdi_limits() does: to 2 x max_sectors_kb on a rotational disk without
  an optimal I/O size, and to at least 128 KiB. ``FakeKernel(generation="6.12")``
  models 6.11-6.16 instead (measured on Debian's 6.12): such a write raises it to
  2 x optimal_io_size, at least 128 KiB, whether rotational or not.
- Read-only attributes fail EACCES, missing ones ENOENT.

Every rule lives in the ``QUEUE_RULES``/``IOSCHED_RULES`` tables below. Tests can
make a device vanish (now or after N writes) or refuse one attribute with an errno.

``FakeTree`` builds trees shaped like ``/sys`` (``block/`` and ``class/block/``
symlinks into ``devices/...``, partitions as subdirectories, ``holders/`` and
``slaves/`` links) and a matching udev database (``b<maj>:<min>`` files with
``E:``/``S:`` lines). The topology functions at the bottom build common stacks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from tunectl.errors import SysfsError
from tunectl.system.sysfs import Sysfs, describe_errno
from tunectl.system.udevdb import UdevDb

ALL_SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq")  # the kernel lists them in registration order
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)
UINT_MAX = (1 << 32) - 1
PAGE_KB = 4
MAX_SCHED_RQ = 2048  # 16 * BLKDEV_DEFAULT_RQ: nr_requests limit while an elevator is active
BLKDEV_MIN_RQ = 4
BLKDEV_DEFAULT_RQ = 128
DEF_MAX_SECTORS_KB = 4096  # max_sectors_kb default cap (BLK_DEF_MAX_SECTORS_CAP)
VM_READAHEAD_KB = 128  # VM_READAHEAD_PAGES

Value = Union[int, str]


class KernelRefusal(Exception):
    """Raised inside a store rule; becomes a SysfsError with the attribute path."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- parsing like the kernel's kstrto*() helpers -------------------------------------------

_UNSIGNED = re.compile(r"\+?[0-9]+\n?\Z")
_SIGNED = re.compile(r"[+-]?[0-9]+\n?\Z")


def _kstrto(text: str, signed: bool, bits: int) -> int:
    if not (_SIGNED if signed else _UNSIGNED).match(text):
        raise KernelRefusal(errno.EINVAL)
    value = int(text)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise KernelRefusal(errno.ERANGE)
    return value


def parse_queue_var(text: str) -> int:
    """queue_var_store(): kstrtoul, and any failure or a value above UINT_MAX is EINVAL."""
    try:
        value = _kstrto(text, signed=False, bits=64)
    except KernelRefusal:
        raise KernelRefusal(errno.EINVAL) from None
    if value > UINT_MAX:
        raise KernelRefusal(errno.EINVAL)
    return value


def parse_int(text: str) -> int:  # kstrtoint: mq-deadline knobs
    return _kstrto(text, signed=True, bits=32)


def parse_ulong(text: str) -> int:  # kstrtoul: bfq knobs
    return _kstrto(text, signed=False, bits=64)


def parse_s64(text: str) -> int:  # kstrtoll: wbt_lat_usec
    return _kstrto(text, signed=True, bits=64)


def parse_raw(text: str) -> str:
    return text


# --- jiffies -------------------------------------------------------------------------------


def msecs_to_jiffies(ms: int, hz: int) -> int:
    return -(-ms * hz // 1000)  # rounds up, like the kernel


def jiffies_to_msecs(jiffies: int, hz: int) -> int:
    return -(-jiffies * 1000 // hz)  # exact when HZ divides 1000, else rounds up, like the kernel


# --- the device a write lands on -------------------------------------------------------------


class QueueView:
    """One device directory as the store rules see it."""

    def __init__(self, kernel: FakeKernel, devdir: str) -> None:
        self.kernel = kernel
        self.devdir = devdir

    def text(self, attr: str, default: str = "") -> str:
        try:
            with open(os.path.join(self.devdir, attr)) as f:
                return f.read().rstrip("\n")
        except OSError:
            return default

    def num(self, attr: str, default: int = 0) -> int:
        try:
            return int(self.text(attr))
        except ValueError:
            return default

    def put(self, attr: str, value: Value) -> None:
        _put(os.path.join(self.devdir, attr), f"{value}\n")

    def scheduler(self) -> tuple[Optional[str], tuple[str, ...]]:
        active, offered = None, []
        for token in self.text("queue/scheduler").split():
            if token.startswith("["):
                token = token.strip("[]")
                active = token
            offered.append(token)
        if active is None and len(offered) == 1:
            active = offered[0]
        return active, tuple(offered)

    def nr_tags(self) -> int:
        """Hardware queue depth, from blk-mq's ``mq/0/nr_tags``."""
        return self.num("mq/0/nr_tags", BLKDEV_DEFAULT_RQ)

    def switch_scheduler(self, name: str) -> None:
        # elevator_switch(): a new elevator resets the request depth and brings its own knobs.
        depth = self.nr_tags()
        if os.path.exists(os.path.join(self.devdir, "queue/nr_requests")):
            self.put("queue/nr_requests", depth if name == "none" else 2 * min(depth, BLKDEV_DEFAULT_RQ))
        _, offered = self.scheduler()
        _put(os.path.join(self.devdir, "queue/scheduler"), scheduler_line(offered, name))
        iosched = os.path.join(self.devdir, "queue/iosched")
        shutil.rmtree(iosched, ignore_errors=True)
        defaults = iosched_defaults(name, self.num("queue/nr_requests", 2 * BLKDEV_DEFAULT_RQ), self.kernel.hz)
        if defaults is not None:
            os.mkdir(iosched)
            for knob, value in defaults.items():
                _put(os.path.join(iosched, knob), f"{value}\n")


def scheduler_line(offered: Sequence[str], active: Optional[str]) -> str:
    if tuple(offered) == ("none",):
        return "none\n"  # bio-based queues on older kernels: no brackets
    return "".join(f"[{s}] " if s == active else f"{s} " for s in offered) + "\n"


def iosched_defaults(scheduler: str, nr_requests: int, hz: int) -> Optional[dict[str, int]]:
    """Knobs and their defaults right after switching to `scheduler`; None for 'none'."""
    ms = lambda jiffies: jiffies_to_msecs(jiffies, hz)  # noqa: E731
    table: dict[str, dict[str, int]] = {
        "mq-deadline": {
            "async_depth": nr_requests,  # 6.18 sets it to the full depth (older kernels: 3/4)
            "fifo_batch": 16,
            "front_merges": 1,
            "prio_aging_expire": ms(10 * hz),
            "read_expire": ms(hz // 2),
            "write_expire": ms(5 * hz),
            "writes_starved": 2,
        },
        "bfq": {
            "back_seek_max": 16384,
            "back_seek_penalty": 2,
            "fifo_expire_async": 250,
            "fifo_expire_sync": 125,
            "low_latency": 1,
            "max_budget": 0,
            "slice_idle": 8,
            "slice_idle_us": 8000,
            "strict_guarantees": 0,
            "timeout_sync": ms(hz // 8),
        },
        "kyber": {"read_lat_nsec": 2_000_000, "write_lat_nsec": 10_000_000},
    }
    return table.get(scheduler)


# --- store rules -----------------------------------------------------------------------------

Store = Callable[[QueueView, Value], Optional[Value]]  # returns the value to show; None: unchanged


@dataclass(frozen=True)
class Rule:
    """How the kernel stores one attribute: parse the text, store the value, then side effects."""

    parse: Callable[[str], Value]
    store: Store
    effect: Optional[Callable[[QueueView, Value], None]] = None


def clamp(lo: int, hi: int) -> Store:
    return lambda q, v: max(lo, min(hi, v))


def jiffies(lo: int, hi: int) -> Store:
    def store(q: QueueView, v: Value) -> int:
        hz = q.kernel.hz
        return jiffies_to_msecs(msecs_to_jiffies(max(lo, min(hi, v)), hz), hz)

    return store


def exact(q: QueueView, v: Value) -> Value:
    return v


def flag(q: QueueView, v: Value) -> int:
    return int(v != 0)


def ignored(q: QueueView, v: Value) -> None:
    return None


def store_read_ahead(q: QueueView, kb: Value) -> int:
    return kb - kb % PAGE_KB  # kept as whole pages


def store_nr_requests(q: QueueView, nr: Value) -> int:
    active, _ = q.scheduler()
    limit = q.nr_tags() if active in (None, "none") else MAX_SCHED_RQ
    nr = max(nr, BLKDEV_MIN_RQ)  # small values are raised, not refused
    if nr > limit:
        raise KernelRefusal(errno.EINVAL)
    return nr


def resize_async_depth(q: QueueView, nr: Value) -> None:
    # mq-deadline's depth_updated() hook resets async_depth to the new depth.
    if q.scheduler()[0] == "mq-deadline":
        q.put("queue/iosched/async_depth", nr)


def store_rq_affinity(q: QueueView, v: Value) -> Optional[int]:
    return v if v in (0, 1, 2) else None  # other values leave the flags alone


def store_nomerges(q: QueueView, v: Value) -> int:
    return 2 if v == 2 else int(v != 0)


def store_max_sectors(q: QueueView, kb: Value) -> int:
    hw = q.num("queue/max_hw_sectors_kb", UINT_MAX)
    if kb == 0:
        return min(hw, DEF_MAX_SECTORS_KB)
    if kb < PAGE_KB:
        raise KernelRefusal(errno.EINVAL)
    return min(kb, hw)


def store_wbt_lat(q: QueueView, usec: Value) -> int:
    if usec < -1:
        raise KernelRefusal(errno.EINVAL)
    if usec == -1:
        return 75000 if q.text("queue/rotational") == "1" else 2000
    return usec


def store_io_poll(q: QueueView, text: Value) -> None:
    # 6.18 ignores writes on pollable queues and refuses them everywhere else.
    if q.text("queue/io_poll") != "1":
        raise KernelRefusal(errno.EINVAL)
    return None


def store_write_cache(q: QueueView, text: Value) -> str:
    if text.startswith("write back"):
        return "write back"
    if text.startswith("write through") or text == "none":
        return "write through"
    raise KernelRefusal(errno.EINVAL)


SCHEDULER_ALIASES = {"deadline": "mq-deadline"}  # elevator_alias; cfq and noop are gone


def store_scheduler(q: QueueView, text: Value) -> None:
    name = text.strip()
    if not name:
        return None  # an empty write is accepted and does nothing
    if name.startswith("none"):
        name = "none"  # the kernel matches "none" by prefix
    name = SCHEDULER_ALIASES.get(name, name)
    active, offered = q.scheduler()
    if name not in offered and name in q.kernel.modules:
        q.kernel.load_scheduler(name)  # elv_iosched_store: request_module("<name>-iosched"), then switch
        active, offered = q.scheduler()
    if name not in offered:
        raise KernelRefusal(errno.EINVAL)
    if name != active:
        q.switch_scheduler(name)
    return None  # switch_scheduler rewrote the file


def read_ahead_floor(rotational: bool, optimal_io_size: int, max_sectors_kb: int) -> int:
    """blk_apply_bdi_limits(): read-ahead of at least twice the optimal I/O size -- on a
    rotational disk without one, twice max_sectors_kb (6.17+; pass rotational=False for
    6.11-6.16) -- and at least 128 KiB."""
    io_opt_kb = optimal_io_size // 1024 or (max_sectors_kb if rotational else 0)
    return max(2 * io_opt_kb - 2 * io_opt_kb % PAGE_KB, VM_READAHEAD_KB)


def raise_read_ahead(q: QueueView, v: Value) -> None:
    # Every queue-limits update (probe, and writes of the attributes that are limits) derives read-ahead again
    # and raises a smaller value to it, never lowers (measured on 6.18 and Debian's 6.12). 6.17+ derives twice
    # max_sectors_kb on a rotational disk without optimal_io_size; 6.11-6.16 do not.
    rotational = q.text("queue/rotational") == "1" and q.kernel.generation != "6.12"
    floor = read_ahead_floor(rotational, q.num("queue/optimal_io_size"), q.num("queue/max_sectors_kb"))
    if q.num("queue/read_ahead_kb") < floor:
        q.put("queue/read_ahead_kb", floor)


def also(attr: str, convert: Callable[[int], int]) -> Callable[[QueueView, Value], None]:
    """Two files backed by one kernel variable (bfq slice_idle in ms and in us)."""
    return lambda q, v: q.put(attr, convert(v))


_queue_feature = Rule(parse_queue_var, flag, raise_read_ahead)

QUEUE_RULES: dict[str, Rule] = {
    "scheduler": Rule(parse_raw, store_scheduler),
    "read_ahead_kb": Rule(parse_queue_var, store_read_ahead),
    "nr_requests": Rule(parse_queue_var, store_nr_requests, resize_async_depth),
    "rq_affinity": Rule(parse_queue_var, store_rq_affinity),
    "nomerges": Rule(parse_queue_var, store_nomerges),
    "add_random": _queue_feature,
    "iostats": _queue_feature,
    "rotational": _queue_feature,
    "stable_writes": _queue_feature,
    "max_sectors_kb": Rule(parse_queue_var, store_max_sectors, raise_read_ahead),
    "wbt_lat_usec": Rule(parse_s64, store_wbt_lat),
    "io_poll": Rule(parse_raw, store_io_poll),
    "io_poll_delay": Rule(parse_raw, ignored),  # deprecated: always reads -1
    "write_cache": Rule(parse_raw, store_write_cache, raise_read_ahead),
}

_dd_time = Rule(parse_int, jiffies(0, INT_MAX))
_bfq_ms = Rule(parse_ulong, clamp(1, INT_MAX))

IOSCHED_RULES: dict[str, dict[str, Rule]] = {
    "mq-deadline": {
        "read_expire": _dd_time,
        "write_expire": _dd_time,
        "prio_aging_expire": _dd_time,
        "writes_starved": Rule(parse_int, clamp(INT_MIN, INT_MAX)),
        "front_merges": Rule(parse_int, clamp(0, 1)),
        "fifo_batch": Rule(parse_int, clamp(0, INT_MAX)),
        "async_depth": Rule(parse_int, clamp(1, INT_MAX)),
    },
    "bfq": {
        "back_seek_max": Rule(parse_ulong, clamp(0, INT_MAX)),
        "back_seek_penalty": Rule(parse_ulong, clamp(1, INT_MAX)),
        "fifo_expire_async": _bfq_ms,
        "fifo_expire_sync": _bfq_ms,
        "low_latency": Rule(parse_ulong, clamp(0, 1)),
        "max_budget": Rule(parse_ulong, clamp(0, INT_MAX)),
        "slice_idle": Rule(parse_ulong, clamp(0, INT_MAX), also("queue/iosched/slice_idle_us", lambda ms: ms * 1000)),
        "slice_idle_us": Rule(parse_ulong, clamp(0, UINT_MAX), also("queue/iosched/slice_idle", lambda us: us // 1000)),
        "strict_guarantees": Rule(parse_ulong, clamp(0, 1)),
        "timeout_sync": Rule(parse_ulong, jiffies(1, INT_MAX)),
    },
    "kyber": {
        "read_lat_nsec": Rule(parse_ulong, exact),
        "write_lat_nsec": Rule(parse_ulong, exact),
    },
}


# --- the fake kernel ---------------------------------------------------------------------------


class FakeKernel(Sysfs):
    """A Sysfs on a directory tree whose writes behave like the kernel's (see module doc).

    Attributes without a rule (every file not in QUEUE_RULES/IOSCHED_RULES) are
    read-only: writing them fails EACCES, as opening a 0444 sysfs file does.
    """

    GENERATIONS = ("6.18", "6.12")  # how a queue-limit write re-derives read-ahead (raise_read_ahead)

    def __init__(self, root: Union[str, os.PathLike], hz: int = 250, generation: str = "6.18") -> None:
        super().__init__(root)
        self.hz = hz
        self.generation = generation
        self._refusals: dict[tuple[str, str], int] = {}
        self._vanish_countdown: dict[str, int] = {}
        self._real_root = os.path.realpath(self.root)
        self.modules: set[str] = set()  # schedulers built as modules, not loaded yet (see as_modules)
        # apply writes devices from several threads; a module load rewrites every queue's scheduler
        # file, which the kernel does under its elevator lock: one write at a time here.
        self._lock = threading.RLock()

    # hooks for tests

    def refuse(self, name: str, attr: str, errno: int) -> None:
        """Fail every later write to ``block/<name>/<attr>`` (e.g. ``queue/scheduler``) with `errno`."""
        self._refusals[(name, attr)] = errno

    def vanish(self, name: str) -> None:
        """Hot-unplug `name`: its directory and links go; later reads and writes fail ENOENT."""
        self._vanish_countdown.pop(name, None)
        devdir = os.path.realpath(self.path(f"block/{name}"))
        if not os.path.isdir(devdir):
            return
        parts = [e for e in os.listdir(devdir) if os.path.isfile(os.path.join(devdir, e, "partition"))]
        # Links in the devices above and below point at this one: they go with it.
        for node in [name, *parts]:
            nodedir = os.path.join(devdir, node) if node != name else devdir
            for upper in os.listdir(os.path.join(nodedir, "holders")):
                _unlink_quiet(os.path.join(os.path.realpath(os.path.join(nodedir, "holders", upper)), "slaves", node))
            self._unlink_node(node, nodedir)
        for lower in os.listdir(os.path.join(devdir, "slaves")):
            _unlink_quiet(os.path.join(os.path.realpath(os.path.join(devdir, "slaves", lower)), "holders", name))
        _unlink_quiet(self.path(f"block/{name}"))
        shutil.rmtree(devdir)

    def as_modules(self, *schedulers: str) -> None:
        """Build `schedulers` as modules, not loaded (a distribution kernel: bfq, kyber): every queue stops
        listing them, and the first write of one's name anywhere loads it, after which every blk-mq queue
        lists it (an elevator registers for all queues)."""
        self.modules.update(schedulers)
        for devdir in self._scheduler_dirs():
            view = QueueView(self, devdir)
            active, offered = view.scheduler()
            kept = [s for s in offered if s not in schedulers or s == active]
            _put(os.path.join(devdir, "queue/scheduler"), scheduler_line(kept, active))

    def load_scheduler(self, name: str) -> None:
        self.modules.discard(name)
        for devdir in self._scheduler_dirs():
            view = QueueView(self, devdir)
            active, offered = view.scheduler()
            if name not in offered:
                _put(os.path.join(devdir, "queue/scheduler"), scheduler_line([*offered, name], active))

    def _scheduler_dirs(self) -> list[str]:
        """Device directories of the blk-mq queues (a scheduler file listing more than "none")."""
        out = []
        for name in sorted(os.listdir(self.path("block"))):
            devdir = os.path.realpath(self.path(f"block/{name}"))
            _, offered = QueueView(self, devdir).scheduler()
            if offered and offered != ("none",):
                out.append(devdir)
        return out

    def vanish_after_writes(self, name: str, n: int) -> None:
        """Let `n` more writes to `name` succeed; the device vanishes before the one after."""
        self._vanish_countdown[name] = n

    # the kernel's side of write(2)

    def write(self, rel: str, value: str) -> None:
        with self._lock:
            self._write(rel, value)

    def _write(self, rel: str, value: str) -> None:
        path = self.path(rel)
        self.writes += 1
        try:
            self._store(path, value)
        except KernelRefusal as e:
            raise SysfsError(rel, e.code, describe_errno(e.code)) from None

    def _store(self, path: Path, value: str) -> None:
        real = os.path.realpath(path)
        devdir, attr = self._split(real)
        name = os.path.basename(devdir) if devdir else ""
        if name in self._vanish_countdown:
            if self._vanish_countdown[name] <= 0:
                self.vanish(name)
                raise KernelRefusal(errno.ENOENT)
            self._vanish_countdown[name] -= 1
        if not os.path.lexists(real):
            raise KernelRefusal(errno.ENOENT)
        if os.path.isdir(real):
            raise KernelRefusal(errno.EISDIR)
        if (name, attr) in self._refusals:
            raise KernelRefusal(self._refusals[(name, attr)])
        rule = self._rule(devdir, attr)
        if rule is None:
            raise KernelRefusal(errno.EACCES)
        view = QueueView(self, devdir)
        shown = rule.store(view, rule.parse(value))
        if shown is not None:
            view.put(attr, shown)
        if rule.effect is not None:
            rule.effect(view, shown if shown is not None else rule.parse(value))

    def _split(self, real: str) -> tuple[str, str]:
        """Device directory and the attribute path below it, e.g. ('.../block/sda', 'queue/nr_requests')."""
        inside = real[len(self._real_root) :]
        if "/queue/" in inside:
            devdir, _, rest = inside.rpartition("/queue/")
            return self._real_root + devdir, f"queue/{rest}"
        # Not a queue attribute: the device is the nearest directory with a `dev` file.
        parent = os.path.dirname(real)
        while len(parent) > len(self._real_root):
            if os.path.isfile(os.path.join(parent, "dev")):
                return parent, real[len(parent) + 1 :]
            parent = os.path.dirname(parent)
        return "", real

    def _rule(self, devdir: str, attr: str) -> Optional[Rule]:
        if attr.startswith("queue/iosched/"):
            active, _ = QueueView(self, devdir).scheduler()
            return IOSCHED_RULES.get(active or "", {}).get(attr[len("queue/iosched/") :])
        if attr.startswith("queue/") and "/" not in attr[len("queue/") :]:
            return QUEUE_RULES.get(attr[len("queue/") :])
        return None

    def _unlink_node(self, name: str, devdir: str) -> None:
        _unlink_quiet(self.path(f"class/block/{name}"))
        devnum = QueueView(self, devdir).text("dev")
        if devnum:
            _unlink_quiet(self.path(f"dev/block/{devnum}"))


# --- building trees ----------------------------------------------------------------------------


def _put(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _unlink_quiet(path: Union[str, os.PathLike]) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _link(target_abs: str, link_abs: str) -> None:
    os.symlink(os.path.relpath(target_abs, os.path.dirname(link_abs)), link_abs)


def sd_name(index: int) -> str:
    """The kernel's SCSI disk names: 0 -> sda, 25 -> sdz, 26 -> sdaa."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(ord("a") + rem) + letters
    return "sd" + letters


def _wwn_hex(wwn: str) -> str:
    return wwn.lower().removeprefix("0x")


# Queue files a request-based (blk-mq) disk has besides the tunables and the scheduler.
_READ_ONLY_QUEUE = {
    "chunk_sectors": "0",
    "dax": "0",
    "discard_granularity": "0",
    "discard_max_hw_bytes": "0",
    "discard_zeroes_data": "0",
    "dma_alignment": "511",
    "fua": "0",
    "max_discard_segments": "1",
    "max_integrity_segments": "0",
    "max_segment_size": "65536",
    "max_segments": "168",
    "nr_zones": "0",
    "virt_boundary_mask": "0",
    "write_same_max_bytes": "0",
    "write_zeroes_max_bytes": "0",
    "zone_append_max_bytes": "0",
    "zoned": "none",
}

# An idle disk's counters as 6.1 and 6.12 print them (tests/data/recorded): reads and writes in flight, and
# the 17 fields of Documentation/block/stat.rst, right-aligned.
_IDLE_INFLIGHT = f"{0:8} {0:8}"
_IDLE_STAT = " ".join(f"{0:8}" for _ in range(17))

_IDENTITY_FILES = ("model", "vendor", "serial", "wwid", "name")

_MAJORS = {"sd": 8, "vd": 254, "xvd": 202, "nvme": 259, "mmc": 179, "dm": 252, "md": 9, "loop": 7, "zram": 253}


@dataclass
class _Node:
    name: str
    devdir: str  # absolute real directory
    devnum: str
    partitions: list[str]


class FakeTree:
    """A fake ``/sys`` plus udev database. ``sysfs`` is a FakeKernel, ``udev`` a UdevDb on it."""

    def __init__(self, root: Union[str, os.PathLike], udev_root: Union[str, os.PathLike], hz: int = 250) -> None:
        self.root = Path(root)
        self.udev_root = Path(udev_root)
        for sub in ("block", "class/block", "dev/block", "devices/virtual/block"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.udev_root.mkdir(parents=True, exist_ok=True)
        self.sysfs = FakeKernel(self.root, hz=hz)
        self.udev = UdevDb(self.udev_root)
        self._root = str(self.root)
        self._nodes: dict[str, _Node] = {}
        self._minor: dict[int, int] = {}
        self._seq = 0
        self.topologies: dict[str, list[str]] = {}  # filled by all_topologies()

    @classmethod
    def create(cls, base: Union[str, os.PathLike], hz: int = 250) -> FakeTree:
        """A tree at ``<base>/sys`` with its udev database at ``<base>/udev``."""
        return cls(Path(base) / "sys", Path(base) / "udev", hz=hz)

    def has(self, name: str) -> bool:
        return name in self._nodes

    def devdir(self, name: str) -> Path:
        """The real directory of a device or partition (below ``devices/``)."""
        return Path(self._nodes[name].devdir)

    def partitions_of(self, name: str) -> list[str]:
        return list(self._nodes[name].partitions)

    def size_of(self, name: str) -> int:
        """Size in 512-byte sectors, as ``size`` shows it."""
        return int(Path(self._nodes[name].devdir, "size").read_text())

    def devnum(self, name: str) -> str:
        return self._nodes[name].devnum

    # --- whole devices

    def add_disk(
        self,
        name: str,
        *,
        rotational: bool = False,
        model: Optional[str] = None,
        vendor: Optional[str] = None,
        serial: Optional[str] = None,
        wwn: Optional[str] = None,
        bus: Optional[str] = "ata",
        size_sectors: int = 2 * 1024 * 1024 * 64,  # 64 GiB
        schedulers: Optional[Sequence[str]] = ALL_SCHEDULERS,
        active: Optional[str] = None,
        logical_block_size: int = 512,
        physical_block_size: int = 512,
        minimum_io_size: Optional[int] = None,
        optimal_io_size: int = 0,
        alignment_offset: int = 0,
        discard_max_bytes: int = 0,
        removable: bool = False,
        partitions: Sequence[tuple[int, int]] = (),
        udev: Optional[Mapping[str, str]] = None,
        by_id: Sequence[str] = (),
        with_udev: bool = True,
        read_ahead_kb: Optional[int] = None,
        nr_requests: Optional[int] = None,
        queue_depth: int = 32,
        max_hw_sectors_kb: int = 32767,
        io_poll: bool = False,
        write_cache: str = "write back",
        extra_files: Optional[Mapping[str, str]] = None,
        lean: bool = False,
        devpath: Optional[str] = None,
    ) -> str:
        """A whole disk (and its partitions), shaped by `bus`: ata, scsi, usb, nvme, virtio, mmc, xen or None.

        `schedulers=None` leaves out the scheduler file and the other blk-mq-only
        attributes (a bio-based queue on 6.18); `("none",)` is a bio-based queue on
        older kernels. `active` defaults to mq-deadline for a single-queue disk
        and none for NVMe. `partitions` are (start, size) in 512-byte sectors.
        `udev` adds or overrides properties; `by_id` adds ``disk/by-id/`` links;
        `with_udev=False` writes no udev record at all. `extra_files` are written
        relative to the device directory (e.g. ``{"loop/backing_file": "/img"}``).
        `read_ahead_kb` defaults to what the kernel leaves after probing (see
        read_ahead_floor: 2 x max_sectors_kb on a rotational disk, else 128).
        `devpath` overrides the directory below the root (e.g. an NVMe namespace under
        ``devices/virtual/nvme-subsystem/``), keeping the `bus` identity files.
        `lean=True` is the fast path for bulk trees: it leaves out the files tunectl
        never reads (most read-only queue limits, power/, uevent, ...).
        """
        if active is None and schedulers:
            active = "none" if bus == "nvme" or "mq-deadline" not in schedulers else "mq-deadline"
        blk_mq = schedulers is not None and tuple(schedulers) != ("none",)
        max_sectors_kb = min(max_hw_sectors_kb, DEF_MAX_SECTORS_KB)
        if read_ahead_kb is None:  # what the kernel leaves after probing the disk
            read_ahead_kb = read_ahead_floor(rotational, optimal_io_size, max_sectors_kb)
        if nr_requests is None:
            nr_requests = queue_depth if active in (None, "none") else 2 * min(queue_depth, BLKDEV_DEFAULT_RQ)
        hw_path, device_link, device_files = self._hardware(name, bus, model, vendor, serial, wwn)
        devpath = devpath or hw_path
        devdir = os.path.join(self._root, devpath)
        major = _MAJORS.get(_driver(name), 259)
        node = self._add_node(name, devdir, major, 16 if major in (8, 254, 202) else (8 if major == 179 else 1))
        queue = {
            "add_random": "0",
            "hw_sector_size": str(logical_block_size),
            "io_poll": "1" if io_poll else "0",
            "io_poll_delay": "-1",
            "iostats": "1",
            "logical_block_size": str(logical_block_size),
            "max_hw_sectors_kb": str(max_hw_sectors_kb),
            "max_sectors_kb": str(max_sectors_kb),
            "minimum_io_size": str(minimum_io_size or physical_block_size),
            "nomerges": "0",
            "optimal_io_size": str(optimal_io_size),
            "physical_block_size": str(physical_block_size),
            "read_ahead_kb": str(read_ahead_kb),
            "rotational": "1" if rotational else "0",
            "stable_writes": "0",
            "write_cache": write_cache,
            "discard_max_bytes": str(discard_max_bytes),
        }
        if not lean:
            queue.update(_READ_ONLY_QUEUE)
        if discard_max_bytes:
            queue["discard_max_hw_bytes"] = str(discard_max_bytes)
            queue["discard_granularity"] = str(physical_block_size)
        if schedulers is not None:
            queue["scheduler"] = scheduler_line(schedulers, active).rstrip("\n")
        if blk_mq:
            queue["nr_requests"] = str(nr_requests)
            queue["rq_affinity"] = "1"
            queue["wbt_lat_usec"] = "75000" if rotational else "2000"
        top = {
            "dev": node.devnum,
            "size": str(size_sectors),
            "removable": "1" if removable else "0",
            "ro": "0",
            "alignment_offset": str(alignment_offset),
        }
        if not lean:
            top.update({"discard_alignment": "0", "capability": "0", "hidden": "0",
                        "ext_range": "256" if major == 259 else "16", "uevent": _uevent(name, node.devnum, "disk"),
                        "inflight": _IDLE_INFLIGHT, "stat": _IDLE_STAT})
        self._make_dirs(devdir, blk_mq, lean)
        _write_all(devdir, top)
        _write_all(os.path.join(devdir, "queue"), queue)
        if blk_mq:
            _write_all(os.path.join(devdir, "mq/0"), {"nr_tags": str(queue_depth)})
        defaults = iosched_defaults(active or "none", nr_requests, self.sysfs.hz) if blk_mq else None
        if defaults is not None:
            os.mkdir(os.path.join(devdir, "queue/iosched"))
            _write_all(os.path.join(devdir, "queue/iosched"), {k: str(v) for k, v in defaults.items()})
        if device_link is not None:
            os.makedirs(device_link, exist_ok=True)
            _write_all(device_link, {k: v for k, v in device_files.items() if not lean or k in _IDENTITY_FILES})
            _link(device_link, os.path.join(devdir, "device"))
        for rel, text in _disk_files(bus, serial, wwn).items():
            _put(os.path.join(devdir, rel), text + "\n")
        for rel, text in (extra_files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(devdir, rel)), exist_ok=True)
            _put(os.path.join(devdir, rel), text + "\n")
        self._publish(node)
        props, links = _udev_disk(name, bus, model, vendor, serial, wwn, devpath)
        links += [f"disk/by-id/{link}" for link in by_id]
        if partitions:
            props["ID_PART_TABLE_TYPE"] = "gpt"
        props.update(udev or {})
        if with_udev:
            self._write_udev(node.devnum, props, links, devpath, "disk")
        for number, (start, size) in enumerate(partitions, 1):
            self._add_partition(node, number, start, size, alignment_offset, props, links if with_udev else None)
        return name

    def add_disks(self, count: int, start: int = 0, lean: bool = True, **kwargs: Any) -> list[str]:
        """`count` SCSI-named disks (sda, sdb, ... sdaa ...), each with a unique WWN and serial; lean by default."""
        names = []
        for i in range(start, start + count):
            name = sd_name(i)
            self.add_disk(name, wwn=f"5000c500{i:08x}", serial=f"ZA{i:06d}", lean=lean, **kwargs)
            names.append(name)
        return names

    def add_dm(
        self,
        name: str,
        dm_name: str,
        uuid: str,
        slaves: Sequence[str],
        *,
        size_sectors: Optional[int] = None,
        schedulers: Optional[Sequence[str]] = None,
        read_ahead_kb: Optional[int] = None,
        rotational: bool = False,
        logical_block_size: Optional[int] = None,
        with_udev: bool = True,
    ) -> str:
        """A bio-based device-mapper device over `slaves` (disks or partitions): dm/name, dm/uuid,
        slaves/ and the lower devices' holders/. On 6.18 a bio-based queue has no scheduler
        file (`schedulers=None`); pass ``("none",)`` for older kernels."""
        lbs = logical_block_size or self._lower_block_size(slaves)
        size = size_sectors if size_sectors is not None else sum(self.size_of(s) for s in slaves)
        self._add_virtual(name, size, schedulers, read_ahead_kb, rotational, lbs)
        node = self._nodes[name]
        _write_all(os.path.join(node.devdir, "dm"), {"name": dm_name, "uuid": uuid, "suspended": "0",
                                                    "rq_based_seq_io_merge_deadline": "0", "use_blk_mq": "0"},
                   mkdir=True)
        self._stack(name, slaves)
        if with_udev:
            props = {"DM_NAME": dm_name, "DM_UUID": uuid, "DM_SUSPENDED": "0", "DM_UDEV_RULES_VSN": "2"}
            links = [f"mapper/{dm_name}", f"disk/by-id/dm-name-{dm_name}", f"disk/by-id/dm-uuid-{uuid}"]
            self._write_udev(node.devnum, props, links, os.path.relpath(node.devdir, self._root), "disk")
        return name

    def add_md(
        self,
        name: str,
        members: Sequence[str],
        *,
        level: str = "raid1",
        uuid: str = "3f1c5d2a:9be04c1e:7a6d8f02:c4b1e9d3",
        md_name: Optional[str] = None,
        size_sectors: Optional[int] = None,
        schedulers: Optional[Sequence[str]] = None,
        read_ahead_kb: Optional[int] = None,
        optimal_io_size: int = 0,
        with_udev: bool = True,
    ) -> str:
        """A software RAID array over `members`: md/level, slaves/ and the members' holders/; MD_UUID in udev."""
        if size_sectors is None:
            sizes = [self.size_of(m) for m in members]
            size_sectors = min(sizes) if level == "raid1" else sum(sizes)
        rotational = all(self._rotational(m) for m in members)
        self._add_virtual(name, size_sectors, schedulers, read_ahead_kb, rotational,
                          self._lower_block_size(members), optimal_io_size)
        node = self._nodes[name]
        _write_all(os.path.join(node.devdir, "md"), {"level": level, "raid_disks": str(len(members)),
                                                    "array_state": "clean", "metadata_version": "1.2"}, mkdir=True)
        self._stack(name, members)
        if with_udev:
            md_name = md_name or f"host:{name[2:]}"
            props = {"MD_LEVEL": level, "MD_DEVICES": str(len(members)), "MD_METADATA": "1.2",
                     "MD_UUID": uuid, "MD_NAME": md_name}
            links = [f"md/{name[2:]}", f"disk/by-id/md-uuid-{uuid}", f"disk/by-id/md-name-{md_name}"]
            self._write_udev(node.devnum, props, links, os.path.relpath(node.devdir, self._root), "disk")
        return name

    def add_loop(self, name: str, backing_file: str, *, size_sectors: int = 2 * 1024 * 1024,
                 logical_block_size: int = 512, active: str = "mq-deadline", rotational: bool = True) -> str:
        """A bound loop device: blk-mq with 128 tags, all schedulers offered, mq-deadline after attach."""
        return self.add_disk(name, bus=None, rotational=rotational, size_sectors=size_sectors, active=active,
                             logical_block_size=logical_block_size, physical_block_size=logical_block_size,
                             queue_depth=128, max_hw_sectors_kb=1280,
                             extra_files={"loop/backing_file": backing_file, "loop/offset": "0",
                                          "loop/sizelimit": "0", "loop/autoclear": "0",
                                          "loop/partscan": "0", "loop/dio": "0"})

    def add_zram(self, name: str, *, size_sectors: int = 8 * 1024 * 1024) -> str:
        """A zram device: bio-based, and on 6.18 without a scheduler file."""
        self._add_virtual(name, size_sectors, None, None, False, 4096)
        _write_all(self._nodes[name].devdir, {"disksize": str(size_sectors * 512), "comp_algorithm": "lzo [zstd]",
                                              "initstate": "1"})
        return name

    # --- internals

    def _hardware(self, name: str, bus: Optional[str], model: Optional[str], vendor: Optional[str],
                  serial: Optional[str], wwn: Optional[str]) -> tuple[str, Optional[str], dict[str, str]]:
        """The device path for `bus`, and the parent device directory `device` links to with its files."""
        self._seq += 1
        n = self._seq
        root = self._root
        if bus in ("ata", "scsi", "usb"):
            h = n - 1
            if bus == "ata":
                parent = f"devices/pci0000:00/0000:00:17.0/ata{n}/host{h}/target{h}:0:0/{h}:0:0:0"
            elif bus == "scsi":
                parent = f"devices/pci0000:00/0000:00:10.0/host{h}/target{h}:0:0/{h}:0:0:0"
            else:
                parent = f"devices/pci0000:00/0000:00:14.0/usb2/2-{n}/2-{n}:1.0/host{h}/target{h}:0:0/{h}:0:0:0"
            files = {"vendor": f"{('ATA' if bus == 'ata' else vendor or ''):<8}"[:8],
                     "model": f"{model or '':<16}"[:16],  # SCSI INQUIRY: 16 characters, padded
                     "rev": "0001", "state": "running", "queue_depth": "32", "timeout": "30"}
            if wwn:
                files["wwid"] = f"naa.{_wwn_hex(wwn)}"
            return f"{parent}/block/{name}", os.path.join(root, parent), files
        if bus == "nvme":
            ctrl = re.sub(r"n\d+$", "", name)
            parent = f"devices/pci0000:00/0000:00:1d.0/0000:3d:{n:02x}.0/nvme/{ctrl}"
            files = {"model": f"{model or '':<40}", "serial": f"{serial or '':<20}", "firmware_rev": "5B2QGXA7",
                     "transport": "pcie", "state": "live"}
            return f"{parent}/{name}", os.path.join(root, parent), files
        if bus in ("virtio", "xen"):
            # xen-blkfront: devices/vbd-<major 202 << 8 | minor>/block/xvdX
            parent = (f"devices/pci0000:00/0000:00:{n + 3:02x}.0/virtio{n}" if bus == "virtio"
                      else f"devices/vbd-{(202 << 8) + 16 * (ord(name[-1]) - ord('a'))}")
            return f"{parent}/block/{name}", os.path.join(root, parent), {"vendor": "0x1af4", "device": "0x0002"}
        if bus == "mmc":
            host = re.sub(r"\D", "", name) or "0"
            parent = f"devices/platform/fe320000.mmc/mmc_host/mmc{host}/mmc{host}:0001"
            files = {"name": model or "", "serial": serial or "0x00000000", "type": "MMC", "manfid": "0x000015",
                     "oemid": "0x0100"}
            return f"{parent}/block/{name}", os.path.join(root, parent), files
        return f"devices/virtual/block/{name}", None, {}

    def _add_node(self, name: str, devdir: str, major: int, minors: int) -> _Node:
        if name in self._nodes:
            raise ValueError(f"fake tree already has a device named {name}")
        minor = self._minor.get(major, 0)
        if major in (252, 9, 7, 253) and name[-1:].isdigit():  # dm-N, mdN, loopN, zramN: N is the minor
            minor = int(re.sub(r"\D", "", name))
        self._minor[major] = max(self._minor.get(major, 0), minor + minors)
        node = _Node(name, devdir, f"{major}:{minor}", [])
        self._nodes[name] = node
        return node

    def _make_dirs(self, devdir: str, blk_mq: bool, lean: bool) -> None:
        os.makedirs(os.path.join(devdir, "queue"))
        os.mkdir(os.path.join(devdir, "holders"))
        os.mkdir(os.path.join(devdir, "slaves"))
        if not lean:
            os.mkdir(os.path.join(devdir, "power"))
        if blk_mq:
            os.makedirs(os.path.join(devdir, "mq/0"))

    def _publish(self, node: _Node) -> None:
        _link(node.devdir, os.path.join(self._root, "block", node.name))
        _link(node.devdir, os.path.join(self._root, "class/block", node.name))
        _link(node.devdir, os.path.join(self._root, "dev/block", node.devnum))

    def _add_partition(self, disk: _Node, number: int, start: int, size: int, alignment_offset: int,
                       disk_props: Mapping[str, str], disk_links: Optional[list[str]]) -> None:
        pname = f"{disk.name}p{number}" if disk.name[-1].isdigit() else f"{disk.name}{number}"
        major, minor = (int(x) for x in disk.devnum.split(":"))
        if major == 259:  # blkext: partitions take the next free minors
            minor = self._minor[259]
            self._minor[259] += 1
        else:
            minor += number
        devnum = f"{major}:{minor}"
        pdir = os.path.join(disk.devdir, pname)
        os.mkdir(pdir)
        os.mkdir(os.path.join(pdir, "holders"))
        os.mkdir(os.path.join(pdir, "power"))
        _write_all(pdir, {"partition": str(number), "start": str(start), "size": str(size), "dev": devnum, "ro": "0",
                          "alignment_offset": str(alignment_offset), "discard_alignment": "0",
                          "uevent": _uevent(pname, devnum, "partition", number)})
        disk.partitions.append(pname)
        self._nodes[pname] = _Node(pname, pdir, devnum, [])
        _link(pdir, os.path.join(self._root, "class/block", pname))
        _link(pdir, os.path.join(self._root, "dev/block", devnum))
        if disk_links is not None:
            props = {k: v for k, v in disk_props.items() if k.startswith("ID_")}  # udev imports the parent's
            props.update({"ID_PART_TABLE_TYPE": "gpt", "ID_PART_ENTRY_SCHEME": "gpt",
                          "ID_PART_ENTRY_NUMBER": str(number), "ID_PART_ENTRY_OFFSET": str(start),
                          "ID_PART_ENTRY_SIZE": str(size), "PARTN": str(number)})
            links = [f"{link}-part{number}" for link in disk_links if link.startswith(("disk/by-id/", "disk/by-path/"))]
            self._write_udev(devnum, props, links, os.path.relpath(pdir, self._root), "partition")

    def _add_virtual(self, name: str, size: int, schedulers: Optional[Sequence[str]], read_ahead_kb: Optional[int],
                     rotational: bool, lbs: int, optimal_io_size: int = 0) -> None:
        self.add_disk(name, bus=None, schedulers=schedulers, size_sectors=size, read_ahead_kb=read_ahead_kb,
                      rotational=rotational, logical_block_size=lbs, physical_block_size=lbs,
                      optimal_io_size=optimal_io_size, with_udev=False, max_hw_sectors_kb=UINT_MAX // 2)

    def _stack(self, upper: str, lowers: Iterable[str]) -> None:
        up = self._nodes[upper]
        for lower in lowers:
            low = self._nodes[lower]
            _link(low.devdir, os.path.join(up.devdir, "slaves", lower))
            _link(up.devdir, os.path.join(low.devdir, "holders", upper))

    def _whole(self, name: str) -> _Node:
        node = self._nodes[name]
        return node if os.path.isdir(os.path.join(node.devdir, "queue")) else self._nodes[
            os.path.basename(os.path.dirname(node.devdir))]

    def _rotational(self, name: str) -> bool:
        return Path(self._whole(name).devdir, "queue/rotational").read_text().strip() == "1"

    def _lower_block_size(self, names: Sequence[str]) -> int:
        sizes = [int(Path(self._whole(n).devdir, "queue/logical_block_size").read_text()) for n in names]
        return max(sizes, default=512)

    def _write_udev(self, devnum: str, props: Mapping[str, str], links: Sequence[str], devpath: str,
                    devtype: str) -> None:
        lines = [f"S:{link}" for link in links]
        lines += ["W:4", "I:1700000000", f"E:DEVTYPE={devtype}"] + [f"E:{k}={v}" for k, v in props.items()]
        lines += ["G:systemd", "Q:systemd", "V:1"]
        _put(os.path.join(self.udev_root, f"b{devnum}"), "\n".join(lines) + "\n")


def _driver(name: str) -> str:
    for prefix in ("nvme", "mmc", "dm", "md", "loop", "zram", "xvd", "vd", "sd"):
        if name.startswith(prefix):
            return prefix
    return ""


def _write_all(directory: str, files: Mapping[str, str], mkdir: bool = False) -> None:
    if mkdir:
        os.makedirs(directory, exist_ok=True)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name, text in files.items():
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
            os.write(fd, f"{text}\n".encode())
            os.close(fd)
    finally:
        os.close(dfd)


def _uevent(name: str, devnum: str, devtype: str, partn: Optional[int] = None) -> str:
    major, minor = devnum.split(":")
    text = f"MAJOR={major}\nMINOR={minor}\nDEVNAME={name}\nDEVTYPE={devtype}"
    return text + (f"\nPARTN={partn}" if partn is not None else "")


def _disk_files(bus: Optional[str], serial: Optional[str], wwn: Optional[str]) -> dict[str, str]:
    """Identity files that live in the block device's own directory."""
    if bus == "nvme":
        files = {"nsid": "1"}
        if wwn:
            files["wwid"] = wwn
        return files
    if bus == "virtio" and serial:
        return {"serial": serial[:20]}  # virtio-blk exposes at most 20 bytes
    return {}


def _udev_encode(text: str) -> str:
    """udev's encode_devnode_name(): blanks and unsafe bytes as \\xNN."""
    return "".join(c if c.isalnum() or c in "#+-.:=@_" else f"\\x{ord(c):02x}" for c in text)


def _udev_disk(name: str, bus: Optional[str], model: Optional[str], vendor: Optional[str], serial: Optional[str],
               wwn: Optional[str], devpath: str) -> tuple[dict[str, str], list[str]]:
    """What 60-persistent-storage.rules (ata_id, scsi_id, path_id) record for a disk."""
    model_ = (model or "").strip().replace(" ", "_")
    props: dict[str, str] = {}
    links: list[str] = []
    pci = re.search(r"/(0000:[0-9a-f:.]+)/", devpath)
    if bus in ("ata", "scsi", "usb"):
        props["ID_BUS"] = bus
        props["ID_TYPE"] = "disk"
        if model:
            props["ID_MODEL"] = model_  # udev replaces blanks; the _ENC form keeps them, escaped and padded
            props["ID_MODEL_ENC"] = _udev_encode(f"{model:<{40 if bus == 'ata' else 16}}")
        if vendor and bus != "ata":  # ata_id records no vendor; sysfs shows "ATA"
            props["ID_VENDOR"] = vendor.strip().replace(" ", "_")
            props["ID_VENDOR_ENC"] = _udev_encode(f"{vendor:<8}")
        if serial:
            props["ID_SERIAL_SHORT"] = serial
            if bus == "ata":
                props["ID_ATA"] = "1"
                props["ID_SERIAL"] = f"{model_}_{serial}"
                links.append(f"disk/by-id/ata-{props['ID_SERIAL']}")
            elif bus == "usb":
                props["ID_SERIAL"] = f"{props.get('ID_VENDOR', '')}_{model_}_{serial}-0:0"
                links.append(f"disk/by-id/usb-{props['ID_SERIAL']}")
        if wwn:
            props["ID_WWN"] = f"0x{_wwn_hex(wwn)}"
            props["ID_WWN_WITH_EXTENSION"] = props["ID_WWN"]
            links.append(f"disk/by-id/wwn-{props['ID_WWN']}")
            if bus == "scsi":
                props["ID_SCSI"] = "1"
                props["ID_SERIAL"] = f"3{_wwn_hex(wwn)}"
                links.append(f"disk/by-id/scsi-{props['ID_SERIAL']}")
        if pci:
            host = re.search(r"/host(\d+)/", devpath)
            props["ID_PATH"] = f"pci-{pci.group(1)}-{bus}-{int(host.group(1)) + 1 if host else 1}"
    elif bus == "nvme":
        if model:
            props["ID_MODEL"] = model.strip()
        if serial:
            props["ID_SERIAL_SHORT"] = serial
            props["ID_SERIAL"] = f"{model_}_{serial}"
            links.append(f"disk/by-id/nvme-{props['ID_SERIAL']}")
        if wwn:
            props["ID_WWN"] = wwn
            links.append(f"disk/by-id/nvme-{wwn}")
        props["ID_NSID"] = "1"
        if pci:
            props["ID_PATH"] = f"pci-{re.findall(r'0000:[0-9a-f:.]+', devpath)[-1]}-nvme-1"
    elif bus == "virtio":
        if serial:
            props["ID_SERIAL"] = serial[:20]
            links.append(f"disk/by-id/virtio-{serial[:20]}")
        if pci:
            props["ID_PATH"] = f"pci-{pci.group(1)}"
    elif bus == "mmc":
        if model:
            props["ID_NAME"] = model
        if serial:
            props["ID_SERIAL"] = serial
            links.append(f"disk/by-id/mmc-{model or ''}_{serial}")
        props["ID_PATH"] = "platform-fe320000.mmc"
    if "ID_PATH" in props:
        props["ID_PATH_TAG"] = re.sub(r"[^A-Za-z0-9-]", "_", props["ID_PATH"])
        links.append(f"disk/by-path/{props['ID_PATH']}")
    return props, links


# --- ready topologies: each populates `tree` and returns the names involved, top device first --------


def sata_hdd(tree: FakeTree, name: str = "sda") -> list[str]:
    """A 4 TB 512e SATA disk with a WWN and one aligned partition."""
    tree.add_disk(name, rotational=True, bus="ata", model="ST4000DM004-2CV104", serial="ZFN0ABCD",
                  wwn="0x5000c500a1b2c3d4", size_sectors=7814037168, physical_block_size=4096,
                  partitions=[(2048, 7814033408)])
    return [name]


def sata_ssd(tree: FakeTree, name: str = "sdb") -> list[str]:
    """A 1 TB SATA SSD: an EFI partition and a data partition."""
    tree.add_disk(name, rotational=False, bus="ata", model="Samsung SSD 870 EVO 1TB", serial="S6PUNX0R712345A",
                  wwn="0x5002538e40a1b2c3", size_sectors=1953525168, discard_max_bytes=2147450880,
                  partitions=[(2048, 1048576), (1050624, 1952472064)])
    return [name]


def nvme_disk(tree: FakeTree, name: str = "nvme0n1") -> list[str]:
    """A 1 TB NVMe namespace (no scheduler active, deep queue) with an EUI-64 wwid."""
    tree.add_disk(name, rotational=False, bus="nvme", model="Samsung SSD 980 PRO 1TB", serial="S5GXNF0R123456",
                  wwn="eui.002538b981b0a1f2", size_sectors=1953525168, queue_depth=1023,
                  discard_max_bytes=2199023255040, partitions=[(2048, 1048576), (1050624, 1952474111)])
    return [name]


def virtio_disk(tree: FakeTree, name: str = "vda") -> list[str]:
    """A virtio disk that claims to rotate, as many hypervisors report; its first partition is
    at sector 63 (an old DOS-era image), misaligned on purpose."""
    tree.add_disk(name, rotational=True, bus="virtio", serial="vm-disk-01", size_sectors=67108864,
                  queue_depth=256, partitions=[(63, 1048513), (1048576, 66058240)])
    return [name]


def dm_crypt_over_ssd(tree: FakeTree, name: str = "dm-0", disk: str = "sdb") -> list[str]:
    """LUKS2 on the SSD's second partition."""
    if not tree.has(disk):
        sata_ssd(tree, disk)
    part = tree.partitions_of(disk)[-1]
    tree.add_dm(name, "luks-5e1e0b9e-7e4f-4cc1-9d57-2b5c1a0e8f11",
                "CRYPT-LUKS2-5e1e0b9e7e4f4cc19d572b5c1a0e8f11-luks-5e1e0b9e-7e4f-4cc1-9d57-2b5c1a0e8f11",
                [part], size_sectors=tree.size_of(part) - 32768)
    return [name, part, disk]


def dm_verity_over_mmc(tree: FakeTree, name: str = "dm-1", disk: str = "mmcblk0") -> list[str]:
    """A read-only dm-verity root: data on mmcblk0p2, hash tree on mmcblk0p3, eMMC with schedulers.
    This dm device shows a bare ``none`` scheduler, as bio-based queues did before 6.15ish."""
    if not tree.has(disk):
        tree.add_disk(disk, rotational=False, bus="mmc", model="DG4016", serial="0x1a2b3c4d", size_sectors=30535680,
                      queue_depth=64, partitions=[(8192, 131072), (139264, 4194304), (4333568, 65536)])
    data, hashes = tree.partitions_of(disk)[1:3]
    tree.add_dm(name, "vroot", "CRYPT-VERITY-8c7f5b3d0e2a4f6b9d1c3e5a7b9d0f21-vroot", [data, hashes],
                size_sectors=tree.size_of(data), schedulers=("none",))
    return [name, data, hashes, disk]


def lvm_over_md(tree: FakeTree, name: str = "dm-2", md: str = "md0", members: Sequence[str] = ("sdc", "sdd")) -> list[str]:
    """An LVM volume on a RAID1 of two whole HDDs; md has no scheduler of its own."""
    for i, member in enumerate(members):
        if not tree.has(member):
            tree.add_disk(member, rotational=True, bus="ata", model="WDC WD20EFRX-68EUZN0", serial=f"WD-WCC4M{i}XYZ123",
                          wwn=f"0x50014ee2b{i:07x}", size_sectors=3907029168, physical_block_size=4096)
    tree.add_md(md, list(members))
    tree.add_dm(name, "vg0-data", "LVM-k3JqW2bXc9RtYu8ZpLm4Nv6Ox0Qa1Sd2Fg3Hj4Kl5Zx6Cv7Bn8Mq9We0Rt1Yu2Ip", [md],
                size_sectors=tree.size_of(md) - 8192)
    return [name, md, *members]


def zram_swap(tree: FakeTree, name: str = "zram0") -> list[str]:
    tree.add_zram(name)
    return [name]


def loop_image(tree: FakeTree, name: str = "loop0", backing_file: str = "/var/lib/images/disk.img") -> list[str]:
    tree.add_loop(name, backing_file)
    return [name]


TOPOLOGIES: dict[str, Callable[[FakeTree], list[str]]] = {
    "sata_hdd": sata_hdd,
    "sata_ssd": sata_ssd,
    "nvme": nvme_disk,
    "virtio": virtio_disk,
    "dm_crypt": dm_crypt_over_ssd,
    "dm_verity": dm_verity_over_mmc,
    "lvm_md": lvm_over_md,
    "zram": zram_swap,
    "loop": loop_image,
}


def all_topologies(tree: FakeTree) -> dict[str, list[str]]:
    """Every topology in one tree: sda, sdb(+dm-0), nvme0n1, vda, mmcblk0(+dm-1), sdc+sdd->md0->dm-2, zram0, loop0."""
    tree.topologies.update({key: build(tree) for key, build in TOPOLOGIES.items()})
    return tree.topologies


# --- filesystems and mounts (tunectl mounts) --------------------------------------------------------


def add_filesystem(tree: FakeTree, name: str, fstype: str, *, uuid: Optional[str] = None, label: Optional[str] = None,
                   partuuid: Optional[str] = None, partlabel: Optional[str] = None) -> str:
    """What udev's blkid builtin records for a filesystem on `name` (ID_FS_*, ID_PART_ENTRY_*) and
    the /dev/disk/by-* links it makes; labels keep udev's two forms (ID_FS_LABEL safe, _ENC exact)."""
    path = tree.udev_root / f"b{tree.devnum(name)}"
    lines = path.read_text().splitlines() if path.exists() else ["E:DEVTYPE=disk"]
    props = {"ID_FS_TYPE": fstype, "ID_FS_USAGE": "filesystem" if fstype != "swap" else "other"}
    links = []
    if uuid:
        props.update(ID_FS_UUID=uuid, ID_FS_UUID_ENC=uuid)
        links.append(f"disk/by-uuid/{uuid}")
    if label:
        props.update(ID_FS_LABEL=re.sub(r"[^\w.-]", "_", label), ID_FS_LABEL_ENC=_udev_encode(label))
        links.append(f"disk/by-label/{_udev_encode(label)}")
    if partuuid:
        props["ID_PART_ENTRY_UUID"] = partuuid
        links.append(f"disk/by-partuuid/{partuuid}")
    if partlabel:
        props["ID_PART_ENTRY_NAME"] = _udev_encode(partlabel)
        links.append(f"disk/by-partlabel/{_udev_encode(partlabel)}")
    text = [f"S:{link}" for link in links] + lines + [f"E:{k}={v}" for k, v in props.items()]
    _put(str(path), "\n".join(text) + "\n")
    return name


def stack_discard(tree: FakeTree, upper: str, lowers: Sequence[str]) -> None:
    """A stacked device's discard limit, as dm and md compute it: the smallest of the devices
    below, and 0 (no discard) as soon as one of them cannot."""
    limits = [int(Path(tree._whole(n).devdir, "queue/discard_max_bytes").read_text()) for n in lowers]
    _put(os.path.join(tree._nodes[upper].devdir, "queue/discard_max_bytes"), f"{min(limits, default=0)}\n")


def mountinfo_line(tree: FakeTree, mount_id: int, name: str, target: str, fstype: str, source: str,
                   vfs: str = "rw,relatime", sb: str = "rw", root: str = "/") -> str:
    """One /proc/self/mountinfo record for a filesystem on fake device `name`, escaped as the kernel does."""
    def esc(text: str) -> str:
        return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)

    return f"{mount_id} 1 {tree.devnum(name)} {esc(root)} {esc(target)} {vfs} shared:{mount_id} - {fstype} {esc(source)} {sb}"
# --- block I/O statistics (tunectl bench) --------------------------------------------------------

STAT_FIELDS = 17  # Documentation/block/stat.rst as of 5.5: 11 + 4 discard + 2 flush


def block_stat(tree: FakeTree, name: str) -> list[int]:
    """The counters of ``block/<name>/stat`` (all zero if the device has none yet)."""
    path = tree.root / "block" / name / "stat"
    return [int(v) for v in path.read_text().split()] if path.exists() else [0] * STAT_FIELDS


def bump_block_stat(tree: FakeTree, name: str, reads: int = 0, merged: int = 0, sectors: int = 0,
                    read_ms: int = 0, queue_ms: int = 0) -> None:
    """Account completed reads as the kernel does: fields 1-4, io_ticks and time_in_queue."""
    v = block_stat(tree, name)
    v[0] += reads
    v[1] += merged
    v[2] += sectors
    v[3] += read_ms
    v[9] += read_ms
    v[10] += queue_ms
    # The kernel pads every field to a width; readers must split on runs of blanks.
    (tree.root / "block" / name / "stat").write_text("".join(f"{x:>8} " for x in v).rstrip() + "\n")
# --- I/O limits for alignment (tunectl align)

# Data disks per stripe, as md computes io_opt = chunk * data disks (raid5.c, raid0.c, raid10.c).
_MD_DATA_DISKS: dict[str, Callable[[int], int]] = {
    "raid0": lambda n: n,
    "raid4": lambda n: n - 1,
    "raid5": lambda n: n - 1,
    "raid6": lambda n: n - 2,
    "raid10": lambda n: n // 2,  # near=2
}


def striped_md(tree: FakeTree, name: str, members: Sequence[str], *, level: str = "raid5", chunk_kib: int = 512,
               size_sectors: Optional[int] = None) -> str:
    """An md array with the I/O limits the md driver sets: minimum_io_size is the chunk,
    optimal_io_size a full stripe of data (chunk x data disks)."""
    chunk = chunk_kib * 1024
    tree.add_md(name, members, level=level, size_sectors=size_sectors,
                optimal_io_size=chunk * _MD_DATA_DISKS[level](len(members)))
    _put(os.path.join(tree.devdir(name), "queue", "minimum_io_size"), f"{chunk}\n")
    return name
