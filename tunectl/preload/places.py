"""Where files lie on file systems without FIEMAP: squashfs, placed by its image's inode table.

A squashfs file's data lies in the image at the `start_block` its inode records
(the tail of a small file in a shared fragment block). `collect` and `record`
read the inode table from the block device under the mount (root; opened
without following links and checked to be that device) and give each entry the
image byte offset of its first range as `physical`, so a replay reads the image
front to back. The list's header says which devices were placed this way
("placed": MAJ:MIN -> "squashfs"); `show` reports the order source per file
system. Where the table cannot be read (not root, lzo/lz4/zstd metadata, a
damaged image) the files keep inode-number order and a note says why.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence

from tunectl.preload.listing import Entry
from tunectl.system.sysfs import Sysfs
from tunectl.units import counted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.explain.squashfs import SquashFile

SQUASHFS = "squashfs"  # the header's "placed" value: physical offsets from the squashfs inode table
FIEMAP = "fiemap"
INODE = "inode"


def placed_entries(entries: Sequence[Entry], devnum: str, found: Mapping[int, SquashFile], block_size: int
                   ) -> tuple[list[Entry], int]:
    """`entries` with those on `devnum` given `physical` from the image's files (inode -> SquashFile; the size
    must match, or the image is not the one mounted); and how many were placed. Pure."""
    out: list[Entry] = []
    placed = 0
    for e in entries:
        f = found.get(e.inode) if e.device == devnum else None
        if f is not None and e.ranges and f.file_size == e.size:
            e = e._replace(physical=f.place(e.ranges[0][0], block_size))
            placed += 1
        out.append(e)
    return out, placed


def read_places(fd: int) -> tuple[int, dict]:
    """The image's block size and inode -> SquashFile, read from the open block device `fd`;
    NotSquashfs (or a subclass) says what is wrong with the image."""
    from tunectl.explain import squashfs

    sb = squashfs.parse(os.pread(fd, squashfs.SIZE, 0))
    size = os.lseek(fd, 0, os.SEEK_END)
    if sb.bytes_used > size:
        raise squashfs.DamagedImage(f"superblock: {sb.bytes_used} bytes used, the device holds {size}")
    return sb.block_size, squashfs.file_places(lambda offset, n: os.pread(fd, n, offset), sb)


def place(entries: list[Entry], sysfs: Sysfs, dev_root: str | None, proc_root: str | None
          ) -> tuple[list[Entry], dict[str, str], list[str]]:
    """Entries on squashfs placed by their image's inode table; the devices placed (MAJ:MIN -> SQUASHFS); notes."""
    from tunectl.explain.squashfs import NotSquashfs
    from tunectl.preload.metadata import filesystem_types, open_device, why_not_opened

    devices = {e.device for e in entries if e.physical is None}
    if not devices or dev_root is None:
        return entries, {}, []
    types = filesystem_types(devices, proc_root)
    placed: dict[str, str] = {}
    notes: list[str] = []
    for devnum in sorted(d for d in devices if types.get(d) == SQUASHFS):
        why = ""
        try:
            fd = open_device(sysfs, dev_root, devnum)
        except OSError as e:
            why = f"opening its block device {why_not_opened(e)}"
        else:
            try:
                block_size, found = read_places(fd)
            except NotSquashfs as e:
                why = str(e)
            except OSError as e:
                why = f"reading its image failed: {os.strerror(e.errno or errno.EIO)}"
            finally:
                os.close(fd)
        if why:
            notes.append(f"{devnum} (squashfs): files kept in inode-number order, not the image's: {why}")
            continue
        mine = sum(1 for e in entries if e.device == devnum and e.ranges)
        entries, count = placed_entries(entries, devnum, found, block_size)
        if count:
            placed[devnum] = SQUASHFS
        if count < mine:
            notes.append(f"{devnum} (squashfs): {mine - count} of {counted(mine, 'file')} not found in the image's inode "
                         "table (or of another size there): kept in inode-number order")
    return entries, placed, notes


def sources(entries: Sequence[Entry], placed: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    """MAJ:MIN -> (where the order comes from, files): SQUASHFS (the image's inode table), FIEMAP (the
    file system's extents) or INODE (nothing placed the files: inode-number order). Pure."""
    counts: dict[str, list[int]] = {}
    for e in entries:
        c = counts.setdefault(e.device, [0, 0])
        c[0] += 1
        c[1] += e.physical is not None
    return {dev: (placed.get(dev, FIEMAP) if known else INODE, files)
            for dev, (files, known) in sorted(counts.items())}
