"""`tunectl align`: which disks to read, parted and sysfs through their edges, the pure verdicts, one report."""

from __future__ import annotations

import os

from tunectl.align.table import ParseError, PartedDisk, parse_json, parse_machine
from tunectl.align.verdict import AlignReport, DiskResult, Topology, judge_disk
from tunectl.context import Context
from tunectl.devices.classes import OPT_IN_CLASSES
from tunectl.devices.discover import discover
from tunectl.devices.resolve import Resolver
from tunectl.errors import NotPermitted, TunectlError, UsageError
from tunectl.system.parted import JSON, Parted, PartedError
from tunectl.system.runner import CommandError
from tunectl.system.sysfs import Sysfs

PARALLEL = 8  # parted runs at once; each spends its time opening the device and probing


def _euid() -> int:
    return os.geteuid()


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


def check(ctx: Context, profile_ref: str | None, dev_refs: list[str] | None = None,
          parted: Parted | None = None, workers: int = PARALLEL) -> AlignReport:
    from tunectl.tuning.operations import load_profile_for

    profile = load_profile_for(ctx, profile_ref)
    boundary = profile.boundary_kib * 1024
    devices = discover(ctx.sysfs, ctx.udev, ())
    named = bool(dev_refs)
    only: dict[str, set[int] | None] = {}
    if dev_refs:
        resolver = Resolver(ctx, devices)
        for ref in dev_refs:
            # One name may stand for several disks (a mountpoint on LVM over two), or for a disk named before.
            node = resolver.node(ref)
            number = resolver.partition_number(node) if node else None
            for dev in resolver.devices_of([ref]):
                wanted = only.get(dev.name, set())
                if number is None:
                    only[dev.name] = None  # the whole disk: wins over any of its partitions
                elif wanted is not None:
                    only[dev.name] = wanted | {number}
        names = list(only)
    else:
        names = [d.name for d in devices if d.cls not in OPT_IN_CLASSES and d.size_bytes > 0]
    parted = parted or Parted(ctx.run)
    # device-mapper devices: parted cannot read them without CAP_SYS_ADMIN (tunectl/system/parted.py)
    mapped = {name for name in names if ctx.sysfs.exists(f"block/{name}/dm")}
    tables = _read_tables(parted, {name: ctx.roots.node(name) for name in names}, named, workers, mapped)
    disks: list[DiskResult] = []
    notes: list[str] = []
    for name in names:
        topo = read_topology(ctx.sysfs, name)
        found = tables[name]
        if isinstance(found, UsageError):  # not named: sysfs knows it, /dev does not
            notes.append(f"{name}: skipped: {found.message}")
            continue
        if isinstance(found, TunectlError):
            message = found.message
            if isinstance(found, NotPermitted) and _euid() == 0:
                message += " (off limits here even to root: a container's device rules, or a security module)"
            disks.append(DiskResult(name, None, topo, warnings=[message], named=named, unreadable=True))
            continue
        report = judge_disk(name, found, topo, boundary, only.get(name))
        report.named = named
        if named or report.table is not None:
            disks.append(report)
    denied = [t for t in tables.values() if isinstance(t, NotPermitted)]
    if denied and len(denied) == sum(not isinstance(t, UsageError) for t in tables.values()) and _euid() != 0:
        raise _needs_root(denied[0])  # nothing could be read, and not as root (exit 4)
    # As root and still refused, the disks are off limits here: each is listed as unreadable (exit 1, tunectl-align(8)).
    return AlignReport(profile.name, disks, list(profile.warnings), notes)


def _needs_root(first: NotPermitted) -> NotPermitted:
    """What a user who is not root was refused, said in their terms first; the tool's own words after."""
    return NotPermitted(f"align needs root: it opens each disk read-only through parted to read its partition "
                        f"table, and only root can start parted that way ({first.message})",
                        hint="run as root (sudo tunectl align ...); in a container, root also needs "
                             "CAP_SETUID, CAP_SETGID and CAP_SETPCAP",
                        where=first.where)


def _read_tables(parted: Parted, nodes: dict[str, str | None], named: bool, workers: int,
                 mapped: set[str] | None = None) -> dict[str, PartedDisk | None | TunectlError]:
    """parted on every disk, a few at once; an unreadable disk is its error, a missing node skipped unless named.

    `nodes`: disk -> its device node, None when the run has no dev root (a tree of another machine).
    `mapped`: the device-mapper devices among them.
    """
    names = list(nodes)

    def one(name: str) -> PartedDisk | None | TunectlError:
        try:
            node = nodes[name]
            if node is None:
                raise UsageError(f"no device node for {name}: the sysfs tree describes another machine",
                                 hint="set TUNECTL_DEV_ROOT to the device nodes of that machine, or use the real /sys")
            out = parted.print_table(node, mapped=name in (mapped or ()))
            if not out.has_table:
                return None
            return parse_json(out.text) if out.format == JSON else parse_machine(out.text)
        except (PartedError, ParseError, NotPermitted) as e:
            return e
        except UsageError as e:
            if named:
                raise
            return e
        except CommandError as e:  # parted hung or died on this disk: the others are still read
            return e

    if len(names) <= 1 or workers <= 1:
        found = {name: one(name) for name in names}
    else:
        from tunectl.system.interrupts import in_threads

        found = dict(zip(names, in_threads(one, names, workers)))
    failed = [t for t in found.values() if isinstance(t, CommandError)]
    if failed and len(failed) == len(found):
        raise failed[0]  # parted itself is missing or broken: not a verdict on any disk
    return found
