"""The catalogue of kernel attributes tunectl may touch, with types, ranges and rounding.

This is the allow-list: a profile can name nothing else, a plan writes nothing
else. Values are normalised here once, on the way in (profile) and on the way
back (sysfs text), so the rest of the code compares typed values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tunectl.record import record

SCHEDULERS = ("none", "mq-deadline", "bfq", "kyber")
LEGACY_SCHEDULERS = {"deadline": "mq-deadline", "cfq": "bfq", "noop": "none"}
# The module that provides each scheduler when it is not built in (block/Makefile: mq-deadline.o,
# kyber-iosched.o, bfq.o); writing the scheduler's name loads it through its "<name>-iosched" alias.
SCHEDULER_MODULES = {"mq-deadline": "mq-deadline", "bfq": "bfq", "kyber": "kyber-iosched"}
SCHEDULER_MODULE_NAMES = tuple(SCHEDULER_MODULES.values())  # what KernelModules.loadable() is asked for

# Kernel HZ values in use; sysfs times stored in jiffies read back rounded up to one tick.
_HZ_CANDIDATES = (100, 250, 300, 1000)


@record(frozen=True)
class Attribute:
    """One queue attribute tunectl manages: its range or choices, unit, and how the kernel rounds it."""

    name: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None  # string-valued attributes
    unit: str = ""
    rounding: str = "exact"  # exact | jiffies | pages
    doc: str = ""

    @property
    def is_int(self) -> bool:
        return self.choices is None


def _int(name: str, lo: int, hi: int, unit: str = "", rounding: str = "exact", doc: str = "") -> Attribute:
    return Attribute(name, lo, hi, None, unit, rounding, doc)


_MS = 3_600_000  # one hour in ms: a sane upper bound for expiry times

IOSCHED: dict[str, dict[str, Attribute]] = {
    "mq-deadline": {
        a.name: a
        for a in (
            _int("read_expire", 1, _MS, "ms", "jiffies", "deadline for a read request"),
            _int("write_expire", 1, _MS, "ms", "jiffies", "deadline for a write request"),
            _int("writes_starved", 1, 1024, "", "exact", "read batches allowed before a write batch"),
            _int("front_merges", 0, 1, "", "exact", "try front merges (0 saves a lookup)"),
            _int("fifo_batch", 1, 1024, "requests", "exact", "requests per batch"),
            _int("async_depth", 1, 65536, "requests", "exact", "tags usable by async requests"),
            _int("prio_aging_expire", 1, _MS, "ms", "jiffies", "starvation limit for low-priority I/O"),
        )
    },
    "bfq": {
        a.name: a
        for a in (
            _int("back_seek_max", 0, 1 << 30, "KiB", "exact", "longest backward seek"),
            _int("back_seek_penalty", 1, 1024, "", "exact", "cost factor of backward seeks"),
            _int("fifo_expire_async", 1, _MS, "ms", "exact", "deadline of async requests"),
            _int("fifo_expire_sync", 1, _MS, "ms", "exact", "deadline of sync requests"),
            _int("low_latency", 0, 1, "", "exact", "favour interactive and soft real-time tasks"),
            _int("max_budget", 0, 1 << 30, "sectors", "exact", "maximum budget (0 = auto)"),
            _int("slice_idle", 0, 1000, "ms", "exact", "idle time waiting for the next sync request"),
            _int("slice_idle_us", 0, 1_000_000, "us", "exact", "slice_idle in microseconds"),
            _int("strict_guarantees", 0, 1, "", "exact", "strict service guarantees"),
            _int("timeout_sync", 1, 10_000, "ms", "jiffies", "budget timeout of sync queues"),
        )
    },
    "kyber": {
        a.name: a
        for a in (
            _int("read_lat_nsec", 1, 10**12, "ns", "exact", "target read latency"),
            _int("write_lat_nsec", 1, 10**12, "ns", "exact", "target write latency"),
        )
    },
    "none": {},
}

QUEUE: dict[str, Attribute] = {
    a.name: a
    for a in (
        _int("read_ahead_kb", 0, 65536, "KiB", "pages", "read-ahead window"),
        _int("nr_requests", 4, 65536, "requests", "exact", "request queue depth"),
        _int("rq_affinity", 0, 2, "", "exact", "complete I/O on the submitting CPU (1) or core (2)"),
        _int("nomerges", 0, 2, "", "exact", "0 merge, 1 simple merges only, 2 never merge"),
        _int("add_random", 0, 1, "", "exact", "feed the entropy pool"),
        _int("iostats", 0, 1, "", "exact", "keep I/O statistics"),
        _int("max_sectors_kb", 4, 1 << 22, "KiB", "exact", "largest request size"),
        _int("wbt_lat_usec", -1, 10**9, "us", "exact", "writeback throttling target (-1 default, 0 off)"),
        _int("rotational", 0, 1, "", "exact", "treat the device as spinning"),
        _int("io_poll", 0, 1, "", "exact", "polled I/O"),
        _int("io_poll_delay", -1, 10**9, "us", "exact", "poll delay (-1 classic, 0 hybrid)"),
        _int("stable_writes", 0, 1, "", "exact", "stable pages during writeback"),
        Attribute("write_cache", choices=("write back", "write through"), doc="volatile write cache mode"),
    )
}

ALL_IOSCHED_KNOBS = sorted({k for knobs in IOSCHED.values() for k in knobs})

# Writing one of these "queue limits" commits the queue limits, and the kernel (6.11+) derives
# read_ahead_kb again (READ_AHEAD_GENERATIONS), so read-ahead goes last.
LIMIT_ATTRS = frozenset({"rotational", "add_random", "iostats", "stable_writes", "max_sectors_kb", "write_cache"})


@record(frozen=True)
class ReadAheadGeneration:
    """How one range of kernel releases derives read_ahead_kb when a device's queue limits are committed
    (at probe, and on every write of a LIMIT_ATTRS attribute): blk_apply_bdi_limits()."""

    since: tuple[int, int]  # first release (major, minor) that behaves so
    rotational_max_sectors: bool  # a rotational disk without optimal_io_size reads ahead 2 x max_sectors_kb
    on_limit_write: str  # "raise": to the derived value, a larger one stays; "keep": untouched
    rule: str


# Newest first. 6.18 measured on loop devices (tests/root/tuning/test_read_ahead_devices.py): a fresh loop
# device (rotational, max_sectors_kb 1280, optimal_io_size 0) starts at 2560; writing rotational or
# max_sectors_kb raises a smaller value to 2 x max_sectors_kb (rotational) or 128 (not), and leaves a larger
# one. Debian's 6.12 and 6.1 measured in the VM tier (tests/vm/test_classify_apply.py, on SCSI, SATA, NVMe,
# SD, virtio and loop): every device starts at 128 (2 x optimal_io_size where one is set, rotational or
# not); on 6.12 the same writes raise a hand-set 64 to 128 and leave 16384 (the table said "set", lowering
# it, read from the source: the measurement corrected it); on 6.1 they leave both. 6.11 and 6.13-6.16 are
# not measured: taken to behave as 6.12.
READ_AHEAD_GENERATIONS = (
    ReadAheadGeneration((6, 17), True, "raise",
                        "2 x optimal_io_size, or on a rotational disk without one 2 x max_sectors_kb, at least "
                        "128 KiB; a queue-limit write (rotational, max_sectors_kb, ...) raises read_ahead_kb to it"),
    ReadAheadGeneration((6, 11), False, "raise",
                        "2 x optimal_io_size, at least 128 KiB; a queue-limit write (rotational, max_sectors_kb, "
                        "...) raises read_ahead_kb to it"),
    ReadAheadGeneration((0, 0), False, "keep", "2 x optimal_io_size, at least 128 KiB, at probe only"),
)


def release_version(release: str) -> tuple[int, int] | None:
    """``6.18.44-fc-v657`` -> (6, 18); None when the text names no release."""
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def read_ahead_generation(release: str) -> ReadAheadGeneration:
    """The rules of `release` (an unknown release: the newest's)."""
    version = release_version(release)
    if version is None:
        return READ_AHEAD_GENERATIONS[0]
    return next(g for g in READ_AHEAD_GENERATIONS if version >= g.since)


def derived_read_ahead_kb(release: str, rotational: bool, optimal_io_size: int, max_sectors_kb: int,
                          page_kb: int = 4) -> int:
    """The read-ahead (KiB) a queue-limits commit derives on `release` (optimal_io_size in bytes)."""
    generation = read_ahead_generation(release)
    io_opt_kb = optimal_io_size // 1024
    if not io_opt_kb and rotational and generation.rotational_max_sectors:
        io_opt_kb = max_sectors_kb
    return max(2 * io_opt_kb - 2 * io_opt_kb % page_kb, VM_READAHEAD_KB)


def read_ahead_after_limits(release: str, current_kb: int, rotational: bool, optimal_io_size: int,
                            max_sectors_kb: int) -> int:
    """read_ahead_kb after a write of a LIMIT_ATTRS attribute, on `release`, when it was `current_kb`."""
    derived = derived_read_ahead_kb(release, rotational, optimal_io_size, max_sectors_kb)
    on_write = read_ahead_generation(release).on_limit_write
    return max(derived, current_kb) if on_write == "raise" else current_kb


# The knobs' values right after a switch to their scheduler (block/mq-deadline.c, bfq-iosched.c, kyber-iosched.c),
# in the units sysfs shows (ms, read back through jiffies at HZ 250 and 1000 alike for these).
KNOB_DEFAULTS: dict[str, dict[str, int]] = {
    "mq-deadline": {"read_expire": 500, "write_expire": 5000, "writes_starved": 2, "front_merges": 1,
                    "fifo_batch": 16, "prio_aging_expire": 10000},
    "bfq": {"back_seek_max": 16384, "back_seek_penalty": 2, "fifo_expire_async": 250, "fifo_expire_sync": 125,
            "low_latency": 1, "max_budget": 0, "slice_idle": 8, "slice_idle_us": 8000, "strict_guarantees": 0},
    "kyber": {"read_lat_nsec": 2_000_000, "write_lat_nsec": 10_000_000},
}
# Drivers that ask for no scheduler by default (BLK_MQ_F_NO_SCHED_BY_DEFAULT), by kernel-name prefix.
NO_SCHED_BY_DEFAULT = ("loop", "nvme", "ublkb")


def default_scheduler(name: str, hw_queues: int) -> tuple[str, str]:
    """The scheduler the kernel gives a new disk (elevator_get_default), and the rule, for kernel name `name`."""
    if name.startswith(NO_SCHED_BY_DEFAULT):
        return "none", "none: the driver asks for no scheduler by default"
    if hw_queues > 1:
        return "none", f"none: a multi-queue device ({hw_queues} hardware queues)"
    return "mq-deadline", "mq-deadline: a single-queue device"


# --- topology: the read-ahead the kernel derives from a device's optimal I/O size ---------------------------

VM_READAHEAD_KB = 128  # VM_READAHEAD_PAGES: the kernel's smallest default read-ahead
PAGE_KB_CANDIDATES = (4, 16, 64)  # page sizes in use (x86/most arm64, arm64 16K, ppc64/arm64 64K)
# optimal_io_size values that are controller errors, not sizes: USB-SATA bridges and some cloud NVMe
# report 0xffff blocks (of 512 bytes: 32 MiB - 512; or of the logical block). util-linux ignores them
# (libfdisk alignment.c: "33553920 (32 MiB - 512) is always a controller error"), as it ignores an
# io_opt that is not a multiple of the physical (or logical) sector.
BOGUS_IO_OPT_BLOCKS = 0xFFFF
BOGUS_IO_OPT = frozenset({BOGUS_IO_OPT_BLOCKS * 512})


def kernel_read_ahead_kb(io_opt: int, page_kb: int = 4) -> int:
    """The read-ahead the kernel sets from io_opt (blk_apply_bdi_limits: twice io_opt in whole pages, >= 128 KiB)."""
    return max(io_opt * 2 // (page_kb * 1024) * page_kb, VM_READAHEAD_KB)


def io_opt_sanity(io_opt: int | None, physical_block_size: int | None,
                  logical_block_size: int | None = None) -> tuple[str, str, int] | None:
    """The one io_opt sanity rule (util-linux's): None when the size is believable (or 0), else why not:
    ``("bogus", "", 0)`` for 0xffff blocks, ``("not-multiple", "physical_block_size", 4096)`` for a size
    that is not a multiple of a sector size."""
    if not io_opt or io_opt <= 0:
        return None
    if io_opt in BOGUS_IO_OPT or (logical_block_size and io_opt == BOGUS_IO_OPT_BLOCKS * logical_block_size):
        return ("bogus", "", 0)
    for name, size in (("physical_block_size", physical_block_size), ("logical_block_size", logical_block_size)):
        if size and size > 0 and io_opt % size:
            return ("not-multiple", name, size)
    return None


def io_opt_doubt(io_opt: int | None, physical_block_size: int | None) -> str | None:
    """Why util-linux would ignore this optimal I/O size (bytes), or None when it is believable."""
    problem = io_opt_sanity(io_opt, physical_block_size)
    if problem is None:
        return None
    if problem[0] == "bogus":
        return f"{io_opt} (32 MiB - 512) is a controller error, not a size"
    return f"{io_opt} is not a multiple of the physical sector ({problem[2]})"


def derived_from_doubtful_io_opt(read_ahead_kb: object, io_opt: int | None,
                                 physical_block_size: int | None) -> str | None:
    """The doubt, when `read_ahead_kb` is what the kernel derived from an io_opt util-linux would ignore."""
    doubt = io_opt_doubt(io_opt, physical_block_size)
    if doubt is None or not isinstance(read_ahead_kb, int) or read_ahead_kb <= VM_READAHEAD_KB:
        return None
    if any(kernel_read_ahead_kb(io_opt or 0, page) == read_ahead_kb for page in PAGE_KB_CANDIDATES):
        return doubt
    return None


def side_effects(attr: str) -> frozenset[str]:
    """Attributes the kernel (6.x) rewrites by itself when `attr` is written.

    A scheduler switch resets nr_requests; writing nr_requests resets the
    scheduler's async_depth; writing a queue limit recomputes read_ahead_kb.
    (A switch also replaces every iosched knob: callers handle that as a whole.)
    """
    if attr == "scheduler":
        return frozenset({"nr_requests"})
    if attr == "nr_requests":
        return frozenset({"iosched/async_depth"})
    if attr in LIMIT_ATTRS:  # READ_AHEAD_GENERATIONS: how each kernel derives it
        return frozenset({"read_ahead_kb"})
    return frozenset()


def write_order(attr: str) -> tuple[int, str]:
    """Sort key for one device's writes.

    The scheduler first (its knobs exist only once it is active; a switch also
    resets nr_requests), then nr_requests (writing it resets async_depth), then
    the knobs, other queue attributes, and read_ahead_kb last (limits raise it).
    """
    if attr == "scheduler":
        return (0, attr)
    if attr == "nr_requests":
        return (1, attr)
    if attr.startswith("iosched/"):
        return (2, attr)
    if attr == "read_ahead_kb":
        return (4, attr)
    return (3, attr)


def modular_schedulers(loadable: Mapping[str, str]) -> dict[str, str]:
    """Scheduler -> module file, for the schedulers the kernel has as loadable modules
    (KernelModules.loadable(SCHEDULER_MODULE_NAMES): the module tree's lines for these only).

    Such a scheduler is not in ``queue/scheduler`` until something loads it, but
    writing its name there loads it: tunectl counts it as offered.
    """
    out = {}
    for scheduler, module in SCHEDULER_MODULES.items():
        path = loadable.get(module.replace("-", "_"))
        if path:
            out[scheduler] = path
    return out


def knob(scheduler: str, name: str) -> Attribute | None:
    return IOSCHED.get(scheduler, {}).get(name)


def schedulers_with_knob(name: str) -> list[str]:
    return [s for s, knobs in IOSCHED.items() if name in knobs]


def parse_scheduler(text: str) -> tuple[str | None, tuple[str, ...]]:
    """``none [mq-deadline] kyber`` -> ('mq-deadline', ('none', 'mq-deadline', 'kyber'))."""
    active = None
    offered = []
    for token in text.split():
        if token.startswith("[") and token.endswith("]"):
            token = token[1:-1]
            active = token
        offered.append(token)
    if active is None and len(offered) == 1:
        active = offered[0]
    return active, tuple(offered)


def parse_value(attr: Attribute, text: str) -> int | str:
    """Sysfs text -> typed value; ints where the attribute is numeric and the text is one."""
    text = text.strip()
    if attr.is_int:
        try:
            return int(text)
        except ValueError:
            return text
    return text


def format_value(value: int | str) -> str:
    return str(value)


def _jiffies_round_trip(ms: int, hz: int) -> int:
    # msecs_to_jiffies rounds up; jiffies_to_msecs is exact when HZ divides 1000 and rounds up otherwise.
    jiffies = -(-ms * hz // 1000)
    return -(-jiffies * 1000 // hz)


def kernel_equivalent(attr: Attribute, wanted: int | str, actual: int | str | None) -> bool:
    """True when `actual` is what the kernel stores for `wanted` (its own rounding explains it)."""
    if actual == wanted:
        return True
    if not isinstance(wanted, int) or not isinstance(actual, int):
        return False
    if attr.rounding == "jiffies":
        return any(_jiffies_round_trip(wanted, hz) == actual for hz in _HZ_CANDIDATES)
    if attr.rounding == "pages":
        # read_ahead_kb is stored as pages: the value reads back rounded down to a page.
        return any(wanted - wanted % page == actual for page in (4, 16, 64))
    return False


# --- ranges: {min: N}, {max: N} or {min: N, max: M} instead of a number (SPEC.md §3) --------------------------


def is_range(wanted: object) -> bool:
    return isinstance(wanted, dict)


def range_text(bounds: dict) -> str:
    """{min: 128} -> '128..', {max: 512} -> '..512', {min: 1, max: 2} -> '1..2'."""
    return f"{bounds.get('min', '')}..{bounds.get('max', '')}"


def nearest_in_range(bounds: dict, actual: object) -> int | None:
    """The value of the range closest to `actual` (itself when inside); None when `actual` is not a number."""
    if not isinstance(actual, int) or isinstance(actual, bool):
        return None
    lo, hi = bounds.get("min"), bounds.get("max")
    if lo is not None and actual < lo:
        return lo
    if hi is not None and actual > hi:
        return hi
    return actual


def wanted_value(wanted: int | str | dict, actual: object) -> int | str | None:
    """What to write for `wanted` when the device holds `actual`: the value, or a range's nearest bound.

    None for a range when `actual` is unknown (after a scheduler switch the kernel sets the
    knob): decided once it can be read.
    """
    if not is_range(wanted):
        return wanted  # type: ignore[return-value]
    return nearest_in_range(wanted, actual)  # type: ignore[arg-type]


def wanted_value_in_sync(spec: Attribute, wanted: int | str | dict, actual: int | str | None) -> bool:
    """True when `actual` satisfies `wanted`: the kernel's own rounding of the value, or inside the range.

    A range is also satisfied by what the kernel stores when its nearest bound is written
    (a floor of 4097 KiB reads back as 4096 on 4 KiB pages), so a write is never repeated.
    """
    if not is_range(wanted):
        return kernel_equivalent(spec, wanted, actual)  # type: ignore[arg-type]
    target = nearest_in_range(wanted, actual)  # type: ignore[arg-type]
    return target is not None and (target == actual or kernel_equivalent(spec, target, actual))
