"""The findings: a table of rules, each naming the facts it reads and the kernels it holds for.

A rule is a pure function of a `Case` (the stack's facts, a cold read, a trace)
that returns a `Finding` (evidence and the exact change) or None. Rendering
never decides anything: `findings()` runs the table and ranks the results by
expected effect. Kernel facts the rules rely on:

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
from dataclasses import dataclass

from tunectl.devices.stack import BlockLayer
from tunectl.explain.model import PAGE_SIZE, Case

HIGH, MEDIUM, LOW = 3, 2, 1
EFFECT_NAMES = {HIGH: "high", MEDIUM: "medium", LOW: "low"}


@dataclass(frozen=True)
class Change:
    kind: str  # "profile" (a fragment), "command", "rebuild", "none"
    text: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    layer: str  # the layer it is about
    effect: int  # HIGH, MEDIUM, LOW: the expected effect of the change
    evidence: tuple[str, ...]
    change: Change

    def to_json(self) -> dict:
        return {"rule": self.rule, "title": self.title, "layer": self.layer, "effect": EFFECT_NAMES[self.effect],
                "evidence": list(self.evidence), "change": self.change.to_json()}


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    reads: tuple[str, ...]  # the facts it reads
    since: tuple[int, int] = (0, 0)  # the first kernel it holds for
    until: tuple[int, int] | None = None  # the first kernel it no longer holds for
    check: Callable[[Case], Finding | None] = lambda case: None

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


def _disk_io(case: Case) -> list[tuple[BlockLayer, object]]:
    if case.cold is None:
        return []
    return [(d, case.cold.of(d.name)) for d in case.stack.disks if case.cold.of(d.name) is not None]


def _small_unmerged(case: Case) -> list[str]:
    """Evidence that the disks got small requests that were not merged (empty when they did not)."""
    out = []
    for disk, io in _disk_io(case):
        if io.reads >= 32 and io.avg_request_kib <= 16 and io.merged_share < 0.05:
            out.append(f"{disk.name}: {io.reads} read requests of {io.avg_request_kib:.1f} KiB on average, "
                       f"{_pct(io.merged_share)} merged, during the cold read")
    return out


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
                evidence.append(f"{dm.name}: {io.reads} reads, {_pct(io.merged_share)} merged")
    undecided = [d for d in disks if d.facts and d.facts.queue.scheduler in (None, "none") and d.facts.queue.rotational]
    if undecided:
        change = Change("profile", "below:\n  scheduler: mq-deadline  # the disks under dm decide")
        effect = MEDIUM
    else:
        change = Change("none", f"nothing on {', '.join(d.name for d in dms)}: tune the disks below "
                                "(a profile's `below:` part)")
        effect = LOW
    return Finding("EX001", "dm has no scheduler: the disk below decides", dms[0].name, effect, tuple(evidence), change)


def small_unmerged(case: Case) -> Finding | None:
    evidence = _small_unmerged(case)
    if not evidence:
        return None
    causes = [r.id for r in RULES if r.id in ("EX003", "EX004") and r.check(case) is not None]
    change = Change("none", "raise the request size where it is made: " + (", ".join(causes) if causes else
                    "a larger read-ahead on the top device") + " below")
    return Finding("EX002", "the disk gets small requests and merges almost none", case.stack.disks[0].name, HIGH,
                   tuple(evidence), change)


def squashfs_block(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    sb = fs.facts.squashfs
    if sb.block_size >= 131072:
        return None
    comp = "xz" if sb.compressor == "gzip" else sb.compressor
    evidence = [f"{fs.label}: squashfs block size {_kib(sb.block_size)} ({sb.compressor}): every block is one "
                f"compressed read of at most {_kib(sb.block_size)}"] + _small_unmerged(case)
    return Finding("EX003", "squashfs blocks are small: many small compressed reads", fs.label, HIGH,
                   tuple(evidence), Change("rebuild", f"mksquashfs SOURCE IMAGE -b 128K -comp {comp}"))


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
    effect = MEDIUM
    if case.cold and (io := case.cold.of(loop.name)) is not None and io.reads:
        evidence.append(f"{loop.name}: {io.reads} requests of {io.avg_request_kib:.1f} KiB reach the backing file "
                        "one by one")
        if io.avg_request_kib <= 16:
            effect = HIGH
    evidence += _small_unmerged(case)
    return Finding("EX004", "the loop device reads its backing file with direct I/O", loop.name, effect,
                   tuple(evidence), Change("command", f"losetup --direct-io=off /dev/{loop.name}"))


def squashfs_compressor(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    sb = fs.facts.squashfs if fs and fs.facts else None
    if sb is None or sb.compressor != "gzip":
        return None
    return Finding("EX005", "squashfs uses gzip: xz stores the same data in fewer bytes to read", fs.label, LOW,
                   (f"{fs.label}: compressor gzip, block size {_kib(sb.block_size)}, image {sb.bytes_used} bytes",),
                   Change("rebuild", f"mksquashfs SOURCE IMAGE -b {_kib(max(sb.block_size, 131072)).replace(' KiB', 'K')} "
                                     "-comp xz"))


def squashfs_partial_cache(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    under = next((la for la in case.stack.blocks), None)
    if under is None or under.facts is None or under.facts.queue.logical_block_size in (None, PAGE_SIZE):
        return None
    change = (Change("command", f"losetup --sector-size {PAGE_SIZE} (when attaching /dev/{under.name})")
              if under.kind == "loop" else Change("none", f"a device with {PAGE_SIZE}-byte logical blocks under squashfs"))
    return Finding("EX006", "squashfs cannot cache partial compressed blocks on this device", under.name, LOW,
                   (f"{under.name}: logical block size {under.facts.queue.logical_block_size}, page size {PAGE_SIZE}: "
                    f"since 6.5 squashfs caches partial blocks only when they are equal (kernel {case.stack.release})",),
                   change)


def squashfs_no_readahead(case: Case) -> Finding | None:
    fs = case.stack.first("filesystem")
    if fs is None or fs.facts is None or fs.facts.squashfs is None:
        return None
    return Finding("EX007", "squashfs has no real read-ahead before 5.19", fs.label, MEDIUM,
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
        return Finding("EX008", "dm-crypt queues every read to a workqueue", dm.name, MEDIUM,
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
        return Finding("EX009", "dm-verity verifies in a workqueue", dm.name, LOW,
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
    return Finding("EX010", "a rotational disk without a scheduler", bad[0].name, MEDIUM,
                   tuple(f"{d.name}: rotational, scheduler none" for d in bad),
                   Change("profile", "scheduler: mq-deadline"))


def small_read_ahead(case: Case) -> Finding | None:
    top = next(iter(case.stack.blocks), None)
    ra = top.facts.queue.read_ahead_kb if top is not None and top.facts else None
    if ra is None or ra >= 128:
        return None
    return Finding("EX011", "read-ahead below the kernel's default", top.name, MEDIUM,
                   (f"{top.name}: read_ahead_kb {ra} (the kernel's default is 128)",),
                   Change("profile", "read_ahead_kb: 128"))


RULES: tuple[Rule, ...] = (
    Rule("EX001", "dm-no-scheduler", ("dm.subtype", "disk.scheduler", "disk.rotational", "cold.dm.merged"),
         check=dm_no_scheduler),
    Rule("EX002", "small-unmerged-requests", ("cold.disk.reads", "cold.disk.avg_request_kib", "cold.disk.merged"),
         check=small_unmerged),
    Rule("EX003", "squashfs-small-blocks", ("squashfs.block_size", "squashfs.compressor", "cold.disk"),
         check=squashfs_block),
    Rule("EX004", "loop-direct-io", ("loop.dio", "loop.backing_file", "loop.backing_read_ahead_kb", "cold.loop"),
         check=loop_direct_io),
    Rule("EX005", "squashfs-gzip", ("squashfs.compressor", "squashfs.block_size"), check=squashfs_compressor),
    Rule("EX006", "squashfs-partial-block-cache", ("squashfs", "logical_block_size of the device under it"),
         since=(6, 5), check=squashfs_partial_cache),
    Rule("EX007", "squashfs-no-readahead", ("squashfs", "kernel"), until=(5, 19), check=squashfs_no_readahead),
    Rule("EX008", "crypt-read-workqueue", ("crypt.flags", "disk.rotational"), since=(5, 9), check=crypt_workqueue),
    Rule("EX009", "verity-tasklet", ("verity.options", "verity.hash_algorithm"), since=(6, 0), check=verity_tasklet),
    Rule("EX010", "rotational-without-scheduler", ("disk.rotational", "disk.scheduler"), check=rotational_none),
    Rule("EX011", "small-read-ahead", ("top.read_ahead_kb",), check=small_read_ahead),
)


def findings(case: Case) -> list[Finding]:
    """Every rule that holds for the kernel and fires, highest expected effect first (then rule order)."""
    found = [f for r in RULES if r.holds_for(case.stack.kernel) and (f := r.check(case)) is not None]
    return sorted(found, key=lambda f: -f.effect)
