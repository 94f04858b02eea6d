"""`tunectl align [DEV...] [-p PROFILE]`: arguments, the call into `check`, and the rendering."""

from __future__ import annotations

import argparse

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
A device-mapper device (LVM, dm-crypt) is probed with blkid: parted cannot open
one read-only. See tunectl-align(8), STACKED DEVICES.
exit: 0 all aligned, 1 a partition misaligned or a named disk without a table,
2 unknown device, 4 not root (align needs root: it opens each disk read-only
through parted, run as an unprivileged reader that only root can start)."""


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.align.verdict import COLUMNS
    from tunectl.report import add_table_options

    p.epilog = EXAMPLES
    add_table_options(p, COLUMNS)
    p.add_argument("-p", "--profile", help="profile whose alignment.boundary_kib to use (default: 'default')")
    p.add_argument("devices", nargs="*", metavar="DEV",
                   help="disk or partition: kernel name, MAJ:MIN, /sys/block/NAME, /dev path or a link root owns "
                        "to a device node (/dev/disk/by-id/..., /dev/mapper/NAME) "
                        "(default: every disk with a partition table; loop and zram only when named)")


def run(ctx, args, out) -> int:
    from tunectl.align.check import check

    report = check(ctx, args.profile, args.devices)
    for w in report.warnings:
        out.warn(str(w))
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
    return out.show(report)
