"""The squashfs 4.0 superblock and inode table (fs/squashfs/squashfs_fs.h).

The superblock is 96 little-endian bytes at offset 0 of the image. `file_places`
walks the inode table to say where each regular file's data lies in the image
(squashfs has no FIEMAP): its first data block (`start_block`), its blocks'
stored sizes, and the block holding its tail fragment. Pure: the caller reads
the bytes (from the image file, or the block device under the mount) through a
`read(offset, length) -> bytes` it passes in.
"""

from __future__ import annotations

import struct
from collections import namedtuple

from tunectl.record import record
from tunectl.units import counted

MAGIC = 0x73717368  # "hsqs" read little-endian
SIZE = 96
_LAYOUT = struct.Struct("<IIIIIHHHHHHQQQQQQQQ")

# "squashfs: cache partial compressed blocks" (6.5): the device pages a compressed block shares with its neighbours
# stay in a page cache of the superblock's own, when the device block size (the larger of 1 KiB and the device's
# logical block size) is the page size. Nothing reaches it from outside (fadvise, BLKFLSBUF): only an unmount or
# vm.drop_caches empties it.
PARTIAL_CACHE_SINCE = (6, 5)


def partial_cache_fits(logical_block_size: int, page_size: int = 4096) -> bool:
    """Whether a device with this logical block size lets squashfs (6.5 on) keep partial compressed blocks."""
    return max(1024, logical_block_size) == page_size


def caches_partial_blocks(kernel: tuple[int, int], logical_block_size: int | None, page_size: int = 4096) -> bool:
    """Whether squashfs on this kernel, on a device with this logical block size, keeps partial compressed blocks."""
    return kernel >= PARTIAL_CACHE_SINCE and logical_block_size is not None and \
        partial_cache_fits(logical_block_size, page_size)


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


@record(frozen=True)
class Superblock:
    block_size: int  # bytes of one data block (4 KiB .. 1 MiB)
    compressor: str
    flags: tuple[str, ...]
    inodes: int
    fragments: int
    bytes_used: int
    version: str
    # where the tables start (bytes into the image); explain does not show them
    root_inode: int = 0
    inode_table: int = 0
    directory_table: int = 0
    fragment_table: int = 0

    def to_json(self) -> dict:
        return {"block_size": self.block_size, "compressor": self.compressor, "flags": list(self.flags),
                "inodes": self.inodes, "fragments": self.fragments, "bytes_used": self.bytes_used,
                "version": self.version}


def parse(data: bytes) -> Superblock:
    """The superblock at the start of `data`; NotSquashfs says what is wrong with anything else."""
    if len(data) < SIZE:
        raise NotSquashfs(f"{len(data)} bytes, a squashfs superblock has {SIZE}")
    (magic, inodes, _mkfs_time, block_size, fragments, compression, block_log, flags, _ids, major, minor,
     root, bytes_used, _ids_at, _xattrs_at, inode_table, directory_table, fragment_table,
     _lookup_at) = _LAYOUT.unpack_from(data)
    if magic != MAGIC:
        raise NotSquashfs(f"magic {magic:#010x}, squashfs has {MAGIC:#010x}")
    if major != 4:
        raise NotSquashfs(f"squashfs version {major}.{minor}; the kernel reads 4.0 only")
    if block_size != 1 << block_log or not 4096 <= block_size <= 1 << 20:
        raise NotSquashfs(f"block size {block_size} does not match block_log {block_log} (4 KiB..1 MiB)")
    return Superblock(block_size, COMPRESSORS.get(compression, f"unknown({compression})"),
                      tuple(name for bit, name in FLAGS if flags & bit), inodes, fragments, bytes_used,
                      f"{major}.{minor}", root, inode_table, directory_table, fragment_table)


# ---------------------------------------------------------------- the inode table: where each file's data lies

METADATA_SIZE = 8192  # a metadata block holds at most this much, stored or compressed
_STORED = 1 << 15  # a metadata block's 2-byte header: set = stored uncompressed; the rest is its length
_BLOCK_STORED = 1 << 24  # a data block's size word: set = stored uncompressed
INVALID_FRAGMENT = 0xFFFFFFFF
MAX_TABLE = 256 << 20  # an inode table larger than this, stored or decompressed, is not read (~four million files)
_BASE = struct.Struct("<HHHHII")  # inode_type, mode, uid, guid, mtime, inode_number
_REG = struct.Struct("<IIII")  # start_block, fragment, offset, file_size
_LREG = struct.Struct("<QQQIIII")  # start_block, file_size, sparse, nlink, fragment, offset, xattr
_LDIR = struct.Struct("<IIIIHHI")  # nlink, file_size, start_block, parent, i_count, offset, xattr
_FIXED = {1: 16, 4: 8, 5: 8, 6: 4, 7: 4, 11: 12, 12: 12, 13: 8, 14: 8}  # bytes after the base, by type
_SMALLEST_INODE = 20  # the base and a fifo's or socket's nlink
# 1 dir, 4/5 block/char device, 6/7 fifo/socket, 11/12 their extended forms (+xattr), 13/14 extended fifo/socket;
# 2 file, 9 extended file, 3/10 symlink (+target, 10: +xattr), 8 extended dir (+index) vary.


class DamagedImage(NotSquashfs):
    """The image's tables cannot be read as squashfs: the text says which table and at which byte."""


class CannotDecompress(NotSquashfs):
    """A metadata block is compressed with something this Python cannot undo (lzo, lz4, zstd before 3.14)."""


class SquashFile(namedtuple("SquashFile", "inode start_block file_size blocks fragment_block")):
    """A regular file's data in the image. start_block: byte offset of its first data block; blocks: each
    block's stored size (0: a hole); fragment_block: byte offset of the fragment block holding its tail,
    or None."""

    __slots__ = ()

    def place(self, offset: int, block_size: int) -> int:
        """The image byte offset where the data at file `offset` is stored (a block's start, or the fragment's)."""
        index = offset // block_size
        if index < len(self.blocks) or self.fragment_block is None:
            return self.start_block + sum(self.blocks[:index])
        return self.fragment_block


def _decompressor(compressor: str):
    """bytes -> at most METADATA_SIZE bytes, for the compressors the standard library reads; None for the rest."""
    import lzma
    import zlib

    def limited(make):
        def undo(data: bytes) -> bytes:
            d = make()
            try:
                out = d.decompress(data, METADATA_SIZE + 1)
            except (zlib.error, lzma.LZMAError) as e:
                raise ValueError(str(e)) from None
            if len(out) > METADATA_SIZE or not d.eof:
                raise ValueError("not one whole block")
            return out
        return undo

    return {"gzip": limited(zlib.decompressobj),
            "xz": limited(lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ)),
            "lzma": limited(lambda: lzma.LZMADecompressor(lzma.FORMAT_ALONE))}.get(compressor)


def _block(read, pos: int, end: int, undo, compressor: str, table: str) -> tuple[bytes, int]:
    """The metadata block stored at `pos` (ending by `end`), undone; and where the next one starts."""
    head = read(pos, 2)
    if len(head) < 2:
        raise DamagedImage(f"{table}: the image ends at byte {pos}, inside the table")
    (word,) = struct.unpack("<H", head)
    length = word & ~_STORED
    if not 0 < length <= METADATA_SIZE or pos + 2 + length > end:
        raise DamagedImage(f"{table}: metadata block at byte {pos} claims {length} bytes")
    data = read(pos + 2, length)
    if len(data) < length:
        raise DamagedImage(f"{table}: the image ends inside the metadata block at byte {pos}")
    if not word & _STORED:
        if undo is None:
            raise CannotDecompress(f"{table}: metadata compressed with {compressor}, which Python's standard "
                                   "library cannot decompress")
        try:
            data = undo(data)
        except (ValueError, EOFError) as e:
            raise DamagedImage(f"{table}: metadata block at byte {pos} does not decompress ({compressor}): "
                               f"{e}") from None
    return data, pos + 2 + length


def metadata_blocks(read, start: int, end: int, compressor: str, table: str) -> bytes:
    """The metadata blocks stored from `start` up to `end`, undone and joined: at most MAX_TABLE bytes.

    A block of 8 KiB of zeros compresses to ~25 bytes, so a table's stored size does not bound what it
    undoes to: without the limit, a forged table of a few MiB would fill the memory.
    """
    undo = _decompressor(compressor)
    out = bytearray()
    pos = start
    while pos < end:
        data, pos = _block(read, pos, end, undo, compressor, table)
        out += data
        if len(out) > MAX_TABLE:
            raise DamagedImage(f"{table}: more than {MAX_TABLE} bytes once decompressed (by byte {pos}), more "
                               "than is read")
    return bytes(out)


def fragment_blocks(read, sb: Superblock) -> list[int]:
    """Byte offsets of the fragment blocks, by fragment index (the fragment table's entries)."""
    if not sb.fragments or sb.fragment_table in (0, 0xFFFFFFFFFFFFFFFF):
        return []
    if sb.fragments > sb.inodes:  # a fragment block holds the tail of at least one file
        raise DamagedImage(f"superblock: {counted(sb.fragments, 'fragment block')} for {counted(sb.inodes, 'inode')}")
    count = (sb.fragments + 511) // 512  # 512 entries of 16 bytes per metadata block, their places in an index
    if not 0 < sb.fragment_table <= sb.bytes_used - 8 * count:  # pread would refuse a place past 2**63
        raise DamagedImage(f"fragment table: its index at byte {sb.fragment_table} lies outside the image "
                           f"({sb.bytes_used} bytes)")
    index = read(sb.fragment_table, 8 * count)
    if len(index) < 8 * count:
        raise DamagedImage(f"fragment table: the image ends at byte {sb.fragment_table + len(index)}, in its index")
    undo = _decompressor(sb.compressor)
    out: list[int] = []
    for at in struct.unpack(f"<{count}Q", index):
        if at >= sb.bytes_used:
            raise DamagedImage(f"fragment table: a block at byte {at}, past the image's {sb.bytes_used} bytes")
        data, _ = _block(read, at, sb.bytes_used, undo, sb.compressor, "fragment table")
        out.extend(start for start, _size, _unused in struct.iter_unpack("<QII", data[:len(data) // 16 * 16]))
    return out[:sb.fragments]


def file_places(read, sb: Superblock) -> dict[int, SquashFile]:
    """Inode number -> SquashFile for every regular file of the image (the number statx reports on the mount).

    DamagedImage names the table and byte where the image stops making sense; CannotDecompress when its
    metadata uses a compressor the standard library lacks.
    """
    if not 0 < sb.inode_table < sb.directory_table <= sb.bytes_used:
        raise DamagedImage(f"superblock: inode table at byte {sb.inode_table}, directory table at "
                           f"{sb.directory_table}, image {sb.bytes_used} bytes: not in that order")
    if sb.directory_table - sb.inode_table > MAX_TABLE:
        raise DamagedImage(f"inode table: {sb.directory_table - sb.inode_table} bytes, more than {MAX_TABLE} read")
    table = metadata_blocks(read, sb.inode_table, sb.directory_table, sb.compressor, "inode table")
    if sb.inodes * _SMALLEST_INODE > len(table):  # before the fragment table, whose size follows the count
        raise DamagedImage(f"inode table: {len(table)} bytes cannot hold the {sb.inodes} inodes the superblock says")
    fragments = fragment_blocks(read, sb)
    files: dict[int, SquashFile] = {}
    pos = seen = 0
    log = sb.block_size.bit_length() - 1
    try:
        while pos < len(table):
            kind, _mode, _uid, _gid, _mtime, number = _BASE.unpack_from(table, pos)
            at = pos + _BASE.size
            if kind in (2, 9):
                if kind == 2:
                    start, frag, _off, size = _REG.unpack_from(table, at)
                    at += _REG.size
                else:
                    start, size, _sparse, _nlink, frag, _off, _xattr = _LREG.unpack_from(table, at)
                    at += _LREG.size
                count = (size + sb.block_size - 1) >> log if frag == INVALID_FRAGMENT else size >> log
                if at + 4 * count > len(table):
                    raise struct.error("block list")
                blocks = tuple(w & ~_BLOCK_STORED for w in struct.unpack_from(f"<{count}I", table, at))
                at += 4 * count
                if frag != INVALID_FRAGMENT and frag >= len(fragments):
                    raise DamagedImage(f"inode table: inode {number} names fragment {frag}; the image has "
                                       f"{len(fragments)}")
                files[number] = SquashFile(number, start, size, blocks,
                                           None if frag == INVALID_FRAGMENT else fragments[frag])
            elif kind in (3, 10):
                _nlink, target = struct.unpack_from("<II", table, at)
                at += 8 + target + (4 if kind == 10 else 0)
            elif kind == 8:
                *_, entries, _off, _xattr = _LDIR.unpack_from(table, at)
                at += _LDIR.size
                for _ in range(entries):  # index entries: index, start_block, size, then size + 1 name bytes
                    at += 12 + struct.unpack_from("<III", table, at)[2] + 1
            elif kind in _FIXED:
                at += _FIXED[kind]
            else:
                raise DamagedImage(f"inode table: inode type {kind} at table byte {pos}; squashfs has 1..14")
            if at > len(table):
                raise struct.error("past the end")
            pos = at
            seen += 1
    except struct.error:
        raise DamagedImage(f"inode table: the table ends inside the inode at table byte {pos}") from None
    if seen != sb.inodes:
        raise DamagedImage(f"inode table: {counted(seen, 'inode')}, the superblock says {sb.inodes}")
    return files
