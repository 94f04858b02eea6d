"""`tunectl align`: which disks to read, parted and sysfs through their edges, the pure verdicts, one report."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tunectl.align.table import ParseError, PartedDisk, parse_json, parse_machine
from tunectl.align.verdict import Grain, PartitionResult, Topology, choose_grain, judge, parted_rule
from tunectl.context import Context
from tunectl.errors import NotPermitted, TunectlError, UsageError
from tunectl.system.parted import JSON, Parted, PartedError
from tunectl.system.sysfs import Sysfs

OPT_IN = ("loop", "zram")  # only when named, as everywhere in tunectl
PARALLEL = 8  # parted runs at once; each spends its time opening the device and probing


@dataclass
class DiskReport:
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


@dataclass
class AlignReport:
    profile: str
    disks: list[DiskReport]
    warnings: list = field(default_factory=list)  # the profile's
    notes: list[str] = field(default_factory=list)  # disks left out, and why

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.disks)

    def to_json(self) -> dict:
        return {"ok": self.ok, "profile": self.profile, "disks": [d.to_json() for d in self.disks]}


def read_topology(sysfs: Sysfs, name: str) -> Topology:
    def num(rel: str, default: int) -> int:
        text = sysfs.read_or(f"block/{name}/{rel}")
        try:
            return int(text) if text is not None else default
        except ValueError:
            return default

    lbs = num("queue/logical_block_size", 512)
    return Topology(lbs, num("queue/physical_block_size", lbs), num("queue/minimum_io_size", lbs),
                    num("queue/optimal_io_size", 0), num("alignment_offset", 0))


def judge_disk(name: str, disk: PartedDisk | None, topo: Topology, boundary: int, boundary_source: str,
               only: set[int] | None = None) -> DiskReport:
    """Pure: one disk's report from parted's table (None: no table) and its topology."""
    report = DiskReport(name, None, topo)
    if disk is None or not disk.has_table:
        if disk is not None and disk.label == "loop":
            report.warnings.append("no partition table: a filesystem on the whole disk (parted label 'loop')")
        else:
            report.warnings.append("no partition table")
        return report
    report.table = disk.label
    grain = choose_grain(topo, boundary, boundary_source)
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


def _partition_filter(ctx: Context, ref: str) -> int | None:
    """The partition number when `ref` names a partition (sda2, /dev/sda2, a link to one)."""
    name = ref[len("/dev/"):] if ref.startswith("/dev/") else ref
    if "/" in name and ref.startswith("/dev/") and str(ctx.sysfs.root) == "/sys" and os.path.exists(ref):
        name = os.path.basename(os.path.realpath(ref))
    if "/" in name or not ctx.sysfs.exists(f"class/block/{name}/partition"):
        return None
    text = ctx.sysfs.read_or(f"class/block/{name}/partition")
    return int(text) if text and text.strip().isdigit() else None


def check(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
          parted: Parted | None = None) -> AlignReport:
    from tunectl.tuning.discover import discover
    from tunectl.tuning.operations import _load, resolve_names

    profile = _load(ctx, profile_ref)
    explicit = "boundary_kib" in (profile.data.get("alignment") or {})
    boundary = profile.boundary_kib * 1024
    source = "boundary_kib" if explicit else "boundary_kib (default 1 MiB)"
    devices = discover(ctx.sysfs, ctx.udev, ())
    named = bool(dev_refs)
    only: dict[str, set[int] | None] = {}
    if dev_refs:
        for ref, name in zip(dev_refs, resolve_names(ctx, devices, dev_refs)):
            number = _partition_filter(ctx, ref)
            if number is None or (name in only and only[name] is None):
                only[name] = None
            else:
                only.setdefault(name, set()).add(number)  # type: ignore[union-attr]
        names = list(only)
    else:
        names = [d.name for d in devices if d.cls not in OPT_IN and d.size_bytes > 0]
    parted = parted or Parted()
    tables = _read_tables(parted, names, named)
    disks: list[DiskReport] = []
    notes: list[str] = []
    for name in names:
        topo = read_topology(ctx.sysfs, name)
        found = tables[name]
        if isinstance(found, UsageError):  # not named: sysfs knows it, /dev does not
            notes.append(f"{name}: skipped: {found.message}")
            continue
        if isinstance(found, TunectlError):
            disks.append(DiskReport(name, None, topo, warnings=[found.message], named=named, unreadable=True))
            continue
        report = judge_disk(name, found, topo, boundary, source, only.get(name))
        report.named = named
        if named or report.table is not None:
            disks.append(report)
    denied = [t for t in tables.values() if isinstance(t, NotPermitted)]
    if denied and len(denied) == sum(not isinstance(t, UsageError) for t in tables.values()):
        raise denied[0]  # nothing could be read: not a verdict, a permission problem
    return AlignReport(profile.name, disks, list(profile.warnings), notes)


def _read_tables(parted: Parted, names: list[str], named: bool) -> dict[str, PartedDisk | None | TunectlError]:
    """parted on every disk, a few at once; an unreadable disk is its error, a missing node skipped unless named."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> PartedDisk | None | TunectlError:
        try:
            out = parted.print_table(f"/dev/{name}")
            if not out.has_table:
                return None
            return parse_json(out.text) if out.format == JSON else parse_machine(out.text)
        except (PartedError, ParseError, NotPermitted) as e:
            return e
        except UsageError as e:
            if named:
                raise
            return e

    if len(names) <= 1:
        return {name: one(name) for name in names}
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(names))) as pool:
        return dict(zip(names, pool.map(one, names)))
