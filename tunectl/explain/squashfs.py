"""The squashfs 4.0 superblock: block size, compressor and flags (fs/squashfs/squashfs_fs.h).

96 little-endian bytes at offset 0 of the image. Pure: the caller reads the
bytes (from the image file, or the block device under the mount).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = 0x73717368  # "hsqs" read little-endian
SIZE = 96
_LAYOUT = struct.Struct("<IIIIIHHHHHHQQQQQQQQ")

# squashfs_fs.h: ZLIB_COMPRESSION 1 .. ZSTD_COMPRESSION 6; mksquashfs calls zlib "gzip".
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}

# squashfs_fs.h's SQUASHFS_*; bit 2 (CHECK) is obsolete since 4.0.
FLAGS = (
    (0x0001, "uncompressed-inodes"),
    (0x0002, "uncompressed-data"),
    (0x0008, "uncompressed-fragments"),
    (0x0010, "no-fragments"),
    (0x0020, "always-fragments"),
    (0x0040, "duplicates"),
    (0x0080, "exportable"),
    (0x0100, "uncompressed-xattrs"),
    (0x0200, "no-xattrs"),
    (0x0400, "compressor-options"),
    (0x0800, "uncompressed-ids"),
)


class NotSquashfs(ValueError):
    """The bytes are not a squashfs 4.x superblock (wrong magic, version or size)."""


@dataclass(frozen=True)
class Superblock:
    block_size: int  # bytes of one data block (4 KiB .. 1 MiB)
    compressor: str
    flags: tuple[str, ...]
    inodes: int
    fragments: int
    bytes_used: int
    version: str

    def to_json(self) -> dict:
        return {"block_size": self.block_size, "compressor": self.compressor, "flags": list(self.flags),
                "inodes": self.inodes, "fragments": self.fragments, "bytes_used": self.bytes_used,
                "version": self.version}


def parse(data: bytes) -> Superblock:
    """The superblock at the start of `data`; NotSquashfs says what is wrong with anything else."""
    if len(data) < SIZE:
        raise NotSquashfs(f"{len(data)} bytes, a squashfs superblock has {SIZE}")
    (magic, inodes, _mkfs_time, block_size, fragments, compression, block_log, flags, _ids, major, minor,
     _root, bytes_used, *_tables) = _LAYOUT.unpack_from(data)
    if magic != MAGIC:
        raise NotSquashfs(f"magic {magic:#010x}, squashfs has {MAGIC:#010x}")
    if major != 4:
        raise NotSquashfs(f"squashfs version {major}.{minor}; the kernel reads 4.0 only")
    if block_size != 1 << block_log or not 4096 <= block_size <= 1 << 20:
        raise NotSquashfs(f"block size {block_size} does not match block_log {block_log} (4 KiB..1 MiB)")
    return Superblock(block_size, COMPRESSORS.get(compression, f"unknown({compression})"),
                      tuple(name for bit, name in FLAGS if flags & bit), inodes, fragments, bytes_used,
                      f"{major}.{minor}")
