"""The findings: a table of rules, each naming the facts it reads and the kernels it holds for.

A rule is a pure function of a `Case` (the stack's facts, a cold read, a trace)
that returns a `Finding` (evidence, the exact change, and the change's expected
effect: a speedup of the cold read estimated from the facts it read, see
`tunectl.explain.effect`) or None. A rule may also name the `--try` variant
that isolates its change (`measure`): when --try ran, that measured speedup
replaces the estimate. Rendering never decides anything: `findings()` runs the
table and ranks the results by effect (measured before estimated on a tie, then
the table's order). Kernel facts the rules rely on:

- dm (verity, crypt, linear, striped) is bio-based: it has no scheduler and
  merges nothing; the scheduler of the disks below decides (all kernels).
- A loop device with direct I/O reads its backing file with the loop's own
  request sizes, past the backing filesystem's page cache and read-ahead.
  File-backed EROFS mounts went buffered by default in 6.13 because direct I/O
  was slower; the same holds for a loop under squashfs.
- squashfs reads a whole block per request; `squashfs: implement readahead`
  (5.19, 2022) made read-ahead read whole blocks. Partial compressed blocks
  are cached in the page cache of the device only from 6.5, and only when the
  device block size equals the page size.
- dm-crypt's read/write workqueue bypass (no_read_workqueue) exists from 5.9;
  dm-verity's try_verify_in_tasklet from 6.0.
"""

from __future__ import annotations

from collections.abc import Callable

from tunectl.bench.diskstat import StatDelta
from tunectl.devices.stack import BlockLayer
from tunectl.explain import effect as effects
from tunectl.explain.effect import Effect
from tunectl.explain.model import PAGE_SIZE, Case
from tunectl.explain.squashfs import PARTIAL_CACHE_SINCE, partial_cache_fits
from tunectl.record import record, replace
from tunectl.units import counted


@record(frozen=True)
class Change:
    kind: str  # "profile" (a fragment), "command", "rebuild", "none"
    text: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text}


@record(frozen=True)
class Finding:
    rule: str
    title: str
    layer: str  # the layer it is about
    effect: Effect  # the change's expected speedup of the cold read, estimated or measured
    evidence: tuple[str, ...]
    change: Change

    def to_json(self) -> dict:
        return {"rule": self.rule, "title": self.title, "layer": self.layer, "effect": self.effect.to_json(),
                "evidence": list(self.evidence), "change": self.change.to_json()}


@record(frozen=True)
class Rule:
    id: str
    name: str
    reads: tuple[str, ...]  # the facts it reads
    since: tuple[int, int] = (0, 0)  # the first kernel it holds for
    until: tuple[int, int] | None = None  # the first kernel it no longer holds for
    check: Callable[[Case], Finding | None] = lambda case: None
    # the --try measurement of the change alone, given the case and the estimate (None: not measured)
    measure: Callable[[Case, Effect], Effect | None] | None = None

    def holds_for(self, kernel: tuple[int, int]) -> bool:
        return self.since <= kernel and (self.until is None or kernel < self.until)

    def kernels(self) -> str:
        low = "any" if self.since == (0, 0) else f"{self.since[0]}.{self.since[1]}"
        return low + (f" until {self.until[0]}.{self.until[1]}" if self.until else " and later")

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "reads": list(self.reads), "kernels": self.kernels()}


def _kib(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n // 1048576} MiB" if n >= 1048576 and n % 1048576 == 0 else f"{n / 1024:g} KiB"


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _io(case: Case, name: str) -> StatDelta | None:
    return case.cold.of(name) if case.cold else None


def _disk_io(case: Case) -> list[tuple[BlockLayer, StatDelta]]:
    return [(d, io) for d in case.stack.disks if (io := _io(case, d.name)) is not None]


def _small_disks(case: Case) -> list[tuple[BlockLayer, StatDelta]]:
    """The disks that got small requests and merged almost none during the cold read."""
    return [(d, io) for d, io in _disk_io(case) if io.reads >= 32 and io.avg_request_kib <= 16
            and io.merged_share < 0.05]


def _small_unmerged(case: Case) -> list[str]:
    """Evidence that the disks got small requests that were not merged (empty when they did not)."""
    return [f"{disk.name}: {counted(io.reads, 'read request')} of {io.avg_request_kib:.1f} KiB on average, "
            f"{_pct(io.merged_share)} merged, during the cold read" for disk, io in _small_disks(case)]


def _request_cap(layer: BlockLayer, size: int) -> int:
    """`size` bytes, or the layer's max_sectors_kb when that is smaller (the block layer splits larger requests)."""
    ms = layer.facts.queue.max_sectors_kb if layer.facts else None
    return min(size, ms * 1024) if ms else size


def _below(case: Case, dm: BlockLayer) -> StatDelta | None:
    """The cold read of the device a dm device reads its data from (its table's first device)."""
    for t in dm.facts.dm_table if dm.facts else ():
        layer = next((la for la in case.stack.blocks if t.devices and la.device.devnum == t.devices[0]), None)
        if layer is not None:
            return _io(case, layer.name)
    return None


# --- the rules -------------------------------------------------------------

def dm_no_scheduler(case: Case) -> Finding | None:
    dms = [la for la in case.stack.all("dm")]
    if not dms:
        return None
    disks = case.stack.disks
    scheds = ", ".join(f"{d.name} ({d.facts.queue.scheduler or 'none'})" for d in disks if d.facts)
    evidence = [f"{dm.name} ({dm.subtype or 'dm'}) is bio-based: scheduler none, it merges nothing; "
                f"ordering and merging happen on {scheds}" for dm in dms]
    if case.cold:
        for dm in dms:
            io = case.cold.of(dm.name)
            if io is not None and io.reads:
                evidence.append(f"{dm.name}: {counted(io.reads, 'read')}, {_pct(io.merged_share)} merged")
    undecided = [d for d in disks if d.facts and d.facts.queue.scheduler in (None, "none") and d.facts.queue.rotational]
    if undecided:
        change = Change("profile", "below:\n  scheduler: mq-deadline  # the disks under dm decide")
        effect = effects.none(_ONE_READER)
    else:
        names = ", ".join(d.name for d in dms)
        change = Change("none", f"nothing on {names}: tune the disks below (a profile's `below:` part)")
        effect = effects.none(f"nothing changes on {names}: the effect lies in the findings about the layers below")
    return Finding("EX001", "dm has no scheduler: the disk below decides", dms[0].name, effect, tuple(evidence), change)


_ONE_READER = ("a cold read is one stream of requests, and a scheduler orders concurrent ones: it matters under "
               "several readers, which one cold read does not measure")


def small_unmerged(case: Case) -> Finding | None:
    small = _small_disks(case)
    if not small:
        return None
    disk, io = small[0]
    causes = [r.id for r in RULES if r.id in ("EX003", "EX004") and r.check(case) is not None]
    change = Change("none", "raise the request size where it is made: " + (", ".join(causes) if causes else
                    "a larger read-ahead on the top device"))  # the causes rank by their own effect
    effect = effects.fewer_requests(case, io, _request_cap(disk, 131072), None, float("inf"),
                                    f"{disk.name} getting requests of up to 128 KiB (the kernel's default read-ahead)")
    return Finding("EX002", "the disk gets small requests and merges almost none", disk.name, effect,
                   tuple(_small_unmerged(case)), change)


def squashfs_block(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    sb = fs.facts.squashfs
    if sb.block_size >= 131072:
        return None
    evidence = [f"{fs.label}: squashfs block size {_kib(sb.block_size)} ({sb.compressor}): every block is one "
                f"compressed read of at most {_kib(sb.block_size)}"] + _small_unmerged(case)
    top = next(iter(case.stack.blocks), None)
    io = _io(case, top.name) if top is not None else None
    effect = effects.fewer_requests(
        case, io, 131072, case.cold.bytes if case.cold else None, 131072 / sb.block_size,
        f"one compressed read per 128 KiB of the file instead of per {_kib(sb.block_size)}"
        + (f" on {top.name}" if top is not None else ""))
    return Finding("EX003", "squashfs blocks are small: many small compressed reads", fs.label, effect,
                   tuple(evidence), Change("rebuild", f"mksquashfs SOURCE IMAGE -b 128K -comp {sb.compressor}"))


def _bigger_blocks_alone(case: Case, estimate: Effect) -> Effect | None:
    base = effects.as_is(case.trials)
    if base is None or base.block_size >= 131072:
        return None
    other = effects.tried(case.trials, 131072, base.compressor, base.direct_io)
    return effects.measured(estimate, (base, other) if other else None,
                            f"{_kib(base.block_size).replace(' KiB', 'K')} -> 128K blocks alone")


def loop_direct_io(case: Case) -> Finding | None:
    loops = [la for la in case.stack.all("loop") if la.facts.loop and la.facts.loop.direct_io
             and la.facts.loop.backing_file]
    if not loops:
        return None
    loop = loops[0]
    facts = loop.facts.loop
    evidence = [f"{loop.name}: direct I/O on (loop/dio = 1), backing file {facts.backing_file}: its reads "
                f"bypass the page cache and read-ahead ({facts.backing_read_ahead_kb} KiB) of "
                f"{facts.backing_device or 'the backing filesystem'}"]
    if case.cold and (io := case.cold.of(loop.name)) is not None and io.reads:
        evidence.append(f"{loop.name}: {counted(io.reads, 'request')} of {io.avg_request_kib:.1f} KiB reach the backing file "
                        "one by one")
    evidence += _small_unmerged(case)
    ra_kb = facts.backing_read_ahead_kb  # None: not read (the kernel's default assumed); 0: no read-ahead
    ra = 131072 if ra_kb is None else max(ra_kb * 1024, PAGE_SIZE)
    disk = case.stack.disks[0]
    after = _request_cap(disk, ra)
    fs = case.stack.first("filesystem")
    asked = max(PAGE_SIZE, fs.facts.squashfs.block_size if fs and fs.facts and fs.facts.squashfs else PAGE_SIZE)
    effect = effects.fewer_requests(case, _io(case, disk.name), after, None, after / asked,
                                    f"the backing file read through the page cache, {_kib(ra)} read-ahead, "
                                    f"on {disk.name}")
    return Finding("EX004", "the loop device reads its backing file with direct I/O", loop.name, effect,
                   tuple(evidence), Change("command", f"losetup --direct-io=off /dev/{loop.name}"))


def _direct_io_off_alone(case: Case, estimate: Effect) -> Effect | None:
    base = effects.as_is(case.trials)
    if base is None or not base.direct_io:
        return None
    other = effects.tried(case.trials, base.block_size, base.compressor, False)
    return effects.measured(estimate, (base, other) if other else None, "direct I/O off alone")


def squashfs_compressor(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    sb = fs.facts.squashfs if fs and fs.facts else None
    if sb is None or sb.compressor != "gzip":
        return None
    block = _kib(sb.block_size).replace(" KiB", "K")
    effect = effects.none(f"the same {block} blocks are the same requests: xz reads fewer bytes in each and "
                          "decompresses them more slowly, neither of which the request count shows "
                          "(--try measures it)")
    return Finding("EX005", "squashfs uses gzip: xz stores the same data in fewer bytes to read", fs.label, effect,
                   (f"{fs.label}: compressor gzip, block size {_kib(sb.block_size)}, image {sb.bytes_used} bytes",),
                   Change("rebuild", f"mksquashfs SOURCE IMAGE -b {block} -comp xz"))


def _xz_alone(case: Case, estimate: Effect) -> Effect | None:
    """gzip against xz at the smallest block size --try built both at, direct I/O as the image's."""
    base = effects.as_is(case.trials)
    if base is None:
        return None
    for size in sorted({t.block_size for t in case.trials}):
        gzip = effects.tried(case.trials, size, "gzip", base.direct_io)
        xz = effects.tried(case.trials, size, "xz", base.direct_io)
        if gzip and xz:
            return effects.measured(estimate, (gzip, xz), f"gzip -> xz alone, at {_kib(size).replace(' KiB', 'K')} "
                                                          "blocks")
    return None


def squashfs_partial_cache(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    under = next((la for la in case.stack.blocks), None)
    if under is None or under.facts is None or under.facts.queue.logical_block_size is None or \
            partial_cache_fits(under.facts.queue.logical_block_size, PAGE_SIZE):
        return None
    change = (Change("command", f"losetup --sector-size {PAGE_SIZE} (when attaching /dev/{under.name})")
              if under.kind == "loop" else Change("none", f"a device with {PAGE_SIZE}-byte logical blocks under squashfs"))
    return Finding("EX006", "squashfs cannot cache partial compressed blocks on this device", under.name,
                   effects.none("how many device pages neighbouring compressed blocks share, and so how many are "
                                "read twice, is not among the facts read"),
                   (f"{under.name}: logical block size {under.facts.queue.logical_block_size}, page size {PAGE_SIZE}: "
                    f"since 6.5 squashfs caches partial blocks only when they are equal (kernel {case.stack.release})",),
                   change)


def squashfs_no_readahead(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    return Finding("EX007", "squashfs has no real read-ahead before 5.19", fs.label,
                   effects.none("the same blocks are read either way; read-ahead saves the CPU of a lookup and a "
                                "decompression per page, which the cold read does not separate"),
                   (f"kernel {case.stack.release}: squashfs reads page by page, a block decompressed per fault",),
                   Change("none", "a kernel 5.19 or later (squashfs: implement readahead, 2022)"))


def crypt_workqueue(case: Case) -> Finding | None:
    for dm in case.stack.all("dm"):
        t = dm.facts.target("crypt")
        if t is None or "no_read_workqueue" in t.facts.get("flags", []):
            continue
        rotational = all(d.facts and d.facts.queue.rotational for d in case.stack.disks)
        if rotational:
            continue
        effect = effects.layer_share(case, _io(case, dm.name), _below(case, dm),
                                     "no read workqueue removes the hop to kcryptd, not the decryption")
        return Finding("EX008", "dm-crypt queues every read to a workqueue", dm.name, effect,
                       (f"{dm.name}: crypt {t.facts['cipher']}, sector size {t.facts['sector_size']}, flags "
                        f"{' '.join(t.facts['flags']) or 'none'} on non-rotational disks",),
                       Change("command", f"cryptsetup refresh --perf-no_read_workqueue --perf-no_write_workqueue "
                                         f"--persistent {dm.name}"))
    return None


def verity_tasklet(case: Case) -> Finding | None:
    for dm in case.stack.all("dm"):
        t = dm.facts.target("verity")
        if t is None or "try_verify_in_tasklet" in t.facts.get("options", []):
            continue
        effect = effects.layer_share(case, _io(case, dm.name), _below(case, dm),
                                     "tasklets remove the hop to the verify workqueue, not the hashing")
        return Finding("EX009", "dm-verity verifies in a workqueue", dm.name, effect,
                       (f"{dm.name}: verity {t.facts['hash_algorithm']}, data/hash blocks "
                        f"{t.facts['data_block_size']}/{t.facts['hash_block_size']} bytes, options "
                        f"{' '.join(t.facts['options']) or 'none'}",),
                       Change("command", "veritysetup open --use-tasklets DATA NAME HASH ROOT_HASH"))
    return None


def rotational_none(case: Case) -> Finding | None:
    bad = [d for d in case.stack.disks if d.facts and d.facts.queue.rotational
           and d.facts.queue.scheduler in (None, "none")]
    if not bad or case.stack.all("dm"):  # EX001 says it for a stack under dm
        return None
    return Finding("EX010", "a rotational disk without a scheduler", bad[0].name, effects.none(_ONE_READER),
                   tuple(f"{d.name}: rotational, scheduler none" for d in bad),
                   Change("profile", "scheduler: mq-deadline"))


def small_read_ahead(case: Case) -> Finding | None:
    top = next(iter(case.stack.blocks), None)
    ra = top.facts.queue.read_ahead_kb if top is not None and top.facts else None
    if ra is None or ra >= 128:
        return None
    after = _request_cap(top, 131072)
    effect = effects.fewer_requests(case, _io(case, top.name), after, None, after / max(ra * 1024, PAGE_SIZE),
                                    f"{top.name} read ahead {_kib(after)} at a time instead of {ra} KiB")
    return Finding("EX011", "read-ahead below the kernel's default", top.name, effect,
                   (f"{top.name}: read_ahead_kb {ra} (the kernel's default is 128)",),
                   Change("profile", "read_ahead_kb: 128"))


RULES: tuple[Rule, ...] = (
    Rule("EX001", "dm-no-scheduler", ("dm.subtype", "disk.scheduler", "disk.rotational", "cold.dm.merged"),
         check=dm_no_scheduler),
    Rule("EX002", "small-unmerged-requests", ("cold.disk.reads", "cold.disk.avg_request_kib", "cold.disk.merged",
                                              "cold.disk.read_ms", "disk.max_sectors_kb"),
         check=small_unmerged),
    Rule("EX003", "squashfs-small-blocks", ("squashfs.block_size", "squashfs.compressor", "cold.top.reads",
                                            "cold.top.read_ms", "cold.bytes", "try"),
         check=squashfs_block, measure=_bigger_blocks_alone),
    Rule("EX004", "loop-direct-io", ("loop.dio", "loop.backing_file", "loop.backing_read_ahead_kb", "cold.loop",
                                     "cold.disk.reads", "cold.disk.read_ms", "disk.max_sectors_kb", "try"),
         check=loop_direct_io, measure=_direct_io_off_alone),
    Rule("EX005", "squashfs-gzip", ("squashfs.compressor", "squashfs.block_size", "try"), check=squashfs_compressor,
         measure=_xz_alone),
    Rule("EX006", "squashfs-partial-block-cache", ("squashfs", "logical_block_size of the device under it"),
         since=PARTIAL_CACHE_SINCE, check=squashfs_partial_cache),
    Rule("EX007", "squashfs-no-readahead", ("squashfs", "kernel"), until=(5, 19), check=squashfs_no_readahead),
    Rule("EX008", "crypt-read-workqueue", ("crypt.flags", "disk.rotational", "cold.dm.read_ms",
                                           "cold.below.read_ms"), since=(5, 9), check=crypt_workqueue),
    Rule("EX009", "verity-tasklet", ("verity.options", "verity.hash_algorithm", "cold.dm.read_ms",
                                     "cold.below.read_ms"), since=(6, 0), check=verity_tasklet),
    Rule("EX010", "rotational-without-scheduler", ("disk.rotational", "disk.scheduler"), check=rotational_none),
    Rule("EX011", "small-read-ahead", ("top.read_ahead_kb", "top.max_sectors_kb", "cold.top.reads",
                                       "cold.top.read_ms"), check=small_read_ahead),
)


def _settled(rule: Rule, case: Case, found: Finding) -> Finding:
    """The finding with its effect settled: the --try measurement of its change alone when there is one, else the
    estimate; the evidence ends in the arithmetic of both."""
    estimate = found.effect
    tried = rule.measure(case, estimate) if rule.measure is not None and case.trials else None
    return replace(found, effect=tried or estimate,
                               evidence=found.evidence + (estimate.why,) + ((tried.why,) if tried else ()))


def findings(case: Case) -> list[Finding]:
    """Every rule that holds for the kernel and fires, largest effect first (measured before estimated on a tie,
    then the table's order)."""
    found = [(i, _settled(r, case, f)) for i, r in enumerate(RULES)
             if r.holds_for(case.stack.kernel) and (f := r.check(case)) is not None]
    found.sort(key=lambda p: (-p[1].effect.value, p[1].effect.basis != effects.MEASURED, p[0]))
    return [f for _, f in found]

