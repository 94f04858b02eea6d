"""Alignment arithmetic (pure): the grain, the verdict per partition, and libparted's own rule beside it.

tunectl's rule (SPEC §7): a partition is aligned when its start in bytes, less
the disk's alignment_offset, is a multiple of the grain, the least common
multiple of the profile boundary (default 1 MiB), a sane optimal_io_size,
minimum_io_size and the physical and logical block sizes.

libparted's rule (``parted align-check optimal N``, linux_get_optimum_alignment)
is computed too, so the report can say where and why the two differ.
The records (PartitionResult, DiskResult, AlignReport) are what `--json` prints; AlignReport.render the table.
"""

from __future__ import annotations

from math import gcd

from tunectl.align.table import PartedDisk
from tunectl.attributes import io_opt_sanity
from tunectl.errors import ExitCode
from tunectl.record import asdict, field, record
from tunectl.report import Column, Report
from tunectl.status import Marked, Verdict
from tunectl.units import format_bytes

MiB = 1024 * 1024
PED_DEFAULT_ALIGNMENT = MiB
COLUMNS = [  # align's column table: -o, --columns and the cuts
    Column("DISK", "the disk's kernel name", cut="never"),
    Column("PART", "the partition number, its name and type (logical, extended) when it has them"),
    Column("START", "the first sector, in logical sectors"),
    Column("SIZE", "the partition's size"),
    Column("GRAIN", "the boundary starts must fall on: lcm of the profile's boundary, io sizes and block sizes"),
    Column("ALIGNED", "yes, or NO when the start (less alignment_offset) is not a multiple of the grain", cut="never"),
    Column("OFF BY", "how far past the last boundary the start lies"),
    Column("SUGGESTED START", "the next aligned start sector"),
    Column("PARTED", "what `parted align-check optimal N` answers (yes, no)"),
]

@record(frozen=True)
class Topology:
    """A whole disk's I/O limits as sysfs shows them (bytes)."""

    logical_block_size: int = 512
    physical_block_size: int = 512
    minimum_io_size: int = 512
    optimal_io_size: int = 0
    alignment_offset: int = 0  # -1: the kernel says the device cannot be aligned

    def to_json(self) -> dict:
        return asdict(self)


@record(frozen=True)
class Grain:
    bytes: int
    source: str  # which limit(s) it came from: "boundary_kib", "optimal_io_size", "lcm(boundary_kib, ...)"
    offset: int  # alignment_offset in bytes, reduced modulo the grain
    warnings: tuple[str, ...] = ()


@record(frozen=True)
class PartedRule:
    """What libparted's optimum alignment demands: start % grain == offset (in logical sectors)."""

    grain_sectors: int
    offset_sectors: int
    why: str

    def accepts(self, start_sector: int) -> bool:
        return start_sector % self.grain_sectors == self.offset_sectors

    @property
    def text(self) -> str:
        return f"start % {self.grain_sectors}s == {self.offset_sectors}s"


def _lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def optimal_io_problem(topo: Topology) -> str | None:
    """Why optimal_io_size cannot be trusted (None when it can, or is 0)."""
    opt = topo.optimal_io_size
    problem = io_opt_sanity(opt, topo.physical_block_size, topo.logical_block_size)
    if problem is None:
        return None
    if problem[0] == "bogus":
        return (f"optimal_io_size {opt} is 0xffff blocks, the maximum transfer some USB bridges report "
                "instead of a real optimal size; ignored, as util-linux does")
    return f"optimal_io_size {opt} is not a multiple of {problem[1]} {problem[2]}; ignored, as util-linux does"


def choose_grain(topo: Topology, boundary: int) -> Grain:
    """The grain partition starts must be multiples of, and where it came from.

    `boundary` is the profile's alignment.boundary_kib in bytes. Candidates in
    order of precedence for naming the source; the grain is their least common
    multiple, so it honours every one of them.
    """
    warnings = []
    candidates = [("boundary_kib", boundary)]
    problem = optimal_io_problem(topo)
    if problem:
        warnings.append(problem)
    elif topo.optimal_io_size > 0:
        candidates.append(("optimal_io_size", topo.optimal_io_size))
    lbs = topo.logical_block_size if topo.logical_block_size > 0 else 512
    if topo.minimum_io_size > 0 and topo.minimum_io_size % lbs == 0:
        candidates.append(("minimum_io_size", topo.minimum_io_size))
    elif topo.minimum_io_size > 0:
        warnings.append(f"minimum_io_size {topo.minimum_io_size} is not a multiple of the logical block size "
                        f"{lbs}; ignored")
    if topo.physical_block_size > 0:
        candidates.append(("physical_block_size", topo.physical_block_size))
    candidates.append(("logical_block_size", lbs))
    grain = 1
    for _, size in candidates:
        grain = _lcm(grain, size)
    equal = [name for name, size in candidates if size == grain]
    if equal:
        source = equal[0]
    else:
        # Name only the limits that are not divisors of another one.
        needed = [name for name, size in candidates
                  if not any(other != size and other % size == 0 for _, other in candidates)]
        source = f"lcm({', '.join(dict.fromkeys(needed))})"
    offset = topo.alignment_offset
    if offset < 0:
        warnings.append("alignment_offset is -1: the kernel says this disk's partitions cannot all be aligned; "
                        "judged as if it were 0")
        offset = 0
    elif offset % lbs:
        warnings.append(f"alignment_offset {offset} is not a multiple of the logical block size {lbs}; "
                        "judged as if it were 0")
        offset = 0
    return Grain(grain, source, offset % grain, tuple(warnings))


def parted_rule(topo: Topology) -> PartedRule:
    """libparted's optimum alignment for this topology (linux_get_optimum_alignment, parted 3.x).

    1 MiB when neither io size is set, or each one set divides 1 MiB; otherwise
    optimal_io_size, or the minimum alignment (minimum_io_size, else the physical
    sector) when optimal_io_size is 0. No sanity check of optimal_io_size.
    The offset is alignment_offset in sectors, reduced modulo the grain.
    """
    lbs = topo.logical_block_size if topo.logical_block_size > 0 else 512
    opt, low = max(topo.optimal_io_size, 0), max(topo.minimum_io_size, 0)

    def divides(x: int) -> bool:
        return x > 0 and PED_DEFAULT_ALIGNMENT % x == 0

    if (not opt and not low) or (divides(opt) and divides(low)) or (not low and divides(opt)) \
            or (not opt and divides(low)):
        grain, why = PED_DEFAULT_ALIGNMENT, "1 MiB (every I/O size set divides 1 MiB)"
    elif not opt:
        grain = low or topo.physical_block_size
        why = f"minimum_io_size {format_bytes(grain)} (it does not divide 1 MiB and optimal_io_size is 0)"
    else:
        grain, why = opt, f"optimal_io_size {opt} ({format_bytes(opt)}; it does not divide 1 MiB)"
    sectors = max(grain // lbs, 1)  # C integer division, as libparted does
    offset = max(topo.alignment_offset, 0) // lbs
    return PartedRule(sectors, offset % sectors, why)


@record
class PartitionResult:
    number: int
    name: str | None
    type: str
    start_sector: int
    size_sectors: int
    start_bytes: int
    aligned: bool
    off_by_bytes: int
    suggested_start_sector: int | None
    parted_optimal: bool
    note: str = ""

    def to_json(self) -> dict:
        return {"number": self.number, "name": self.name, "start_sector": self.start_sector,
                "size_sectors": self.size_sectors, "start_bytes": self.start_bytes, "aligned": self.aligned,
                "off_by_bytes": self.off_by_bytes, "suggested_start_sector": self.suggested_start_sector,
                "parted_optimal": self.parted_optimal, "note": self.note}


def judge(number: int, start_sector: int, size_sectors: int, sector_size: int, topo: Topology, grain: Grain,
          parted: PartedRule, name: str | None = None, kind: str = "primary") -> PartitionResult:
    """The verdict on one partition, libparted's verdict beside it, and a note saying why they differ."""
    start = start_sector * sector_size
    off = (start - grain.offset) % grain.bytes
    aligned = off == 0
    suggested = None
    if not aligned:
        suggested = -(-(start + grain.bytes - off) // sector_size)
    parted_ok = parted.accepts(start_sector)
    notes = []
    if kind == "extended":
        notes.append("extended partition: a container for the logical ones")
    if not aligned:
        phys = max(topo.physical_block_size, sector_size)
        phys_off = (start - grain.offset) % phys
        if phys_off:
            notes.append(f"{format_bytes(off)} past a {format_bytes(grain.bytes)} boundary and not on a "
                         f"{phys}-byte physical block: writes straddle physical blocks (read-modify-write)")
        else:
            notes.append(f"{format_bytes(off)} past a {format_bytes(grain.bytes)} boundary; on a {phys}-byte "
                         "physical block, but not on the grain")
    if aligned and not parted_ok:
        notes.append(f"looser than parted: parted wants {parted.text}, its grain being {parted.why}")
    elif not aligned and parted_ok:
        notes.append(f"stricter than parted: parted checks only {parted.text} ({parted.why}); "
                     f"tunectl's grain {format_bytes(grain.bytes)} is {grain.source}")
    return PartitionResult(number, name, kind, start_sector, size_sectors, start, aligned, off, suggested,
                           parted_ok, "; ".join(notes))


@record
class DiskResult:
    """One disk's part of `align`'s report (as PartitionResult is a partition's): no command prints it alone, so it
    is not a Report; AlignReport's verdict and exit code are worked out from each disk's `ok`."""

    device: str
    table: str | None
    topology: Topology
    grain: Grain | None = None
    partitions: list[PartitionResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    named: bool = False
    sector_size: int = 512  # parted's sector: what start_sector and size_sectors count
    unreadable: bool = False  # parted failed: nothing could be judged

    @property
    def ok(self) -> bool:
        if self.unreadable or (self.named and self.table is None):
            return False
        return all(p.aligned for p in self.partitions)

    def to_json(self) -> dict:
        return {"device": self.device, "table": self.table, "topology": self.topology.to_json(),
                "grain_bytes": self.grain.bytes if self.grain else None,
                "grain_source": self.grain.source if self.grain else None,
                "warnings": list(self.warnings), "partitions": [p.to_json() for p in self.partitions]}


@record
class AlignReport(Report):
    profile: str
    disks: list[DiskResult]
    warnings: list = field(default_factory=list)  # the profile's
    notes: list[str] = field(default_factory=list)  # disks left out, and why

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.disks)

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.ok else ExitCode.DRIFT

    def to_json(self) -> dict:
        return {"ok": self.ok, "profile": self.profile, "disks": [d.to_json() for d in self.disks]}

    def print_text(self, out) -> None:
        """A row per partition (a disk without a table: one row saying so), the notes, then one summary line."""
        rows, notes = [], []
        for disk in self.disks:
            for w in disk.warnings if not out.quiet else ():
                out.warn(f"tunectl: {disk.device}: {w}")
            if disk.table is None:
                said = Marked("no table", Verdict.DRIFT) if not disk.unreadable else Marked("unreadable", Verdict.FAILED)
                rows.append([disk.device, "-", "-", "-", "-", said, "-", "-", "-"])
                continue
            grain = format_bytes(disk.grain.bytes) if disk.grain else "-"
            for p in disk.partitions:
                label = f"{p.number}" + (f" ({p.name})" if p.name else "") + (f" {p.type}" if p.type != "primary" else "")
                aligned = Marked("yes", Verdict.IN_SYNC) if p.aligned else Marked("NO", Verdict.MISALIGNED)
                rows.append([disk.device, label, f"{p.start_sector}s", format_bytes(p.size_sectors * disk.sector_size),
                    grain, aligned, format_bytes(p.off_by_bytes) if not p.aligned else "-",
                    f"{p.suggested_start_sector}s" if p.suggested_start_sector is not None else "-",
                    "yes" if p.parted_optimal else "no"])
                if p.note and (out.verbose or not p.aligned or p.aligned != p.parted_optimal):
                    notes.append(f"{disk.device} {p.number}: {p.note}")
            if out.verbose and disk.grain:
                notes.append(f"{disk.device}: grain {format_bytes(disk.grain.bytes)} from {disk.grain.source}")
        out.heading(f"profile: {self.profile}")
        if rows:
            out.print(out.table(COLUMNS, rows))
        else:
            out.print("no disk with a partition table")
        for note in notes:
            out.say(f"  {note}")
        bad = sum(not p.aligned for d in self.disks for p in d.partitions)
        total = sum(len(d.partitions) for d in self.disks)
        summary = [f"{bad} of {total} partition(s) misaligned"] if bad else []
        untabled = [d.device for d in self.disks if d.table is None and d.named and not d.unreadable]
        unreadable = [d.device for d in self.disks if d.unreadable]
        if untabled:
            summary.append(f"no partition table on {', '.join(untabled)}")
        if unreadable:
            summary.append(f"parted could not read {', '.join(unreadable)}")
        out.say("; ".join(summary) if summary else ("all aligned" if total else "no partitions to check"))


def judge_disk(name: str, disk: PartedDisk | None, topo: Topology, boundary: int,
               only: set[int] | None = None) -> DiskResult:
    """One disk's report from parted's table (None: no table) and its topology; `only` limits the partitions."""
    report = DiskResult(name, None, topo)
    if disk is None or not disk.has_table:
        if disk is not None and disk.label == "loop":
            report.warnings.append("no partition table: a filesystem on the whole disk (parted label 'loop')")
        else:
            report.warnings.append("no partition table")
        return report
    report.table = disk.label
    grain = choose_grain(topo, boundary)
    report.grain = grain
    report.warnings.extend(grain.warnings)
    sector = disk.logical_sector_size or topo.logical_block_size
    report.sector_size = sector
    if disk.logical_sector_size and disk.logical_sector_size != topo.logical_block_size:
        report.warnings.append(f"parted's sector size {disk.logical_sector_size} differs from sysfs "
                               f"logical_block_size {topo.logical_block_size}; sectors are parted's")
    rule = parted_rule(Topology(sector, topo.physical_block_size, topo.minimum_io_size, topo.optimal_io_size,
                                topo.alignment_offset))
    for part in disk.partitions:
        if only is not None and part.number not in only:
            continue
        report.partitions.append(judge(part.number, part.start, part.size, sector, topo, grain, rule,
                                       name=part.name, kind=part.type))
    return report
