"""`tunectl align [DEV...] [-p PROFILE]`: arguments, the call into `check`, and the rendering."""

from __future__ import annotations

import argparse

from tunectl.errors import ExitCode

EXAMPLES = """\
examples:
  tunectl align                      # every disk with a partition table
  tunectl align /dev/sda /dev/nvme0n1
  tunectl align sdb2                 # one partition
  tunectl align -p ./raid.yaml --json | jq '.disks[].partitions[] | select(.aligned | not)'

A partition is aligned when its start, less the disk's alignment_offset, is a
multiple of the grain: the least common multiple of the profile's
alignment.boundary_kib (default 1 MiB), optimal_io_size (unless bogus, e.g. a USB
bridge's 33553920), minimum_io_size and the block sizes. PARTED shows what
`parted align-check optimal N` answers; a note says why when it differs.
exit: 0 all aligned, 1 a partition misaligned or a named disk without a table,
2 unknown device, 4 not permitted (parted needs root to open a disk)."""


COLUMNS = ["DISK", "PART", "START", "SIZE", "GRAIN", "ALIGNED", "OFF BY", "SUGGESTED START", "PARTED"]


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.report import add_table_options

    p.epilog = EXAMPLES
    add_table_options(p, COLUMNS)
    p.add_argument("-p", "--profile", help="profile whose alignment.boundary_kib to use (default: 'default')")
    p.add_argument("devices", nargs="*", metavar="DEV",
                   help="disk or partition: kernel name, /dev path or /dev/disk/by-id link "
                        "(default: every disk with a partition table; loop and zram only when named)")


def run(ctx, args, out) -> int:
    from tunectl.align.check import check

    report = check(ctx, args.profile, args.devices)
    for w in report.warnings:
        out.warn(str(w))
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
    code = ExitCode.OK if report.ok else ExitCode.DRIFT
    if out.json:
        out.emit(report.to_json())
    else:
        _render(report, out)
    return code


def _render(report, out) -> None:
    from tunectl.units import format_bytes

    rows, notes = [], []
    for disk in report.disks:
        for w in disk.warnings if not out.quiet else ():
            out.warn(f"tunectl: {disk.device}: {w}")
        if disk.table is None:
            rows.append([disk.device, "-", "-", "-", "-", "no table" if not disk.unreadable else "unreadable",
                         "-", "-", "-"])
            continue
        grain = format_bytes(disk.grain.bytes) if disk.grain else "-"
        for p in disk.partitions:
            label = f"{p.number}" + (f" ({p.name})" if p.name else "") + (f" {p.type}" if p.type != "primary" else "")
            rows.append([disk.device, label, f"{p.start_sector}s", format_bytes(p.size_sectors * disk.sector_size),
                grain, "yes" if p.aligned else "NO", format_bytes(p.off_by_bytes) if not p.aligned else "-",
                f"{p.suggested_start_sector}s" if p.suggested_start_sector is not None else "-",
                "yes" if p.parted_optimal else "no"])
            if p.note and (out.verbose or not p.aligned or p.aligned != p.parted_optimal):
                notes.append(f"{disk.device} {p.number}: {p.note}")
        if out.verbose and disk.grain:
            notes.append(f"{disk.device}: grain {format_bytes(disk.grain.bytes)} from {disk.grain.source}")
    out.heading(f"profile: {report.profile}")
    if rows:
        out.print(out.table(COLUMNS, rows, keep=("DISK", "ALIGNED")))
    else:
        out.print("no disk with a partition table")
    for note in notes:
        out.say(f"  {note}")
    bad = sum(not p.aligned for d in report.disks for p in d.partitions)
    total = sum(len(d.partitions) for d in report.disks)
    summary = [f"{bad} of {total} partition(s) misaligned"] if bad else []
    untabled = [d.device for d in report.disks if d.table is None and d.named and not d.unreadable]
    unreadable = [d.device for d in report.disks if d.unreadable]
    if untabled:
        summary.append(f"no partition table on {', '.join(untabled)}")
    if unreadable:
        summary.append(f"parted could not read {', '.join(unreadable)}")
    out.say("; ".join(summary) if summary else ("all aligned" if total else "no partitions to check"))
