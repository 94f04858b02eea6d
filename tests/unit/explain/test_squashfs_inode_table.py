"""The squashfs inode table reader (file_places) on images mksquashfs builds: every file's data is found where
the walk says (checked by decompressing it there), fragments, extended inodes, compressors the standard library
reads and those it cannot, and damaged images (a clear NotSquashfs, never another exception)."""

from __future__ import annotations

import lzma
import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from tunectl.explain import squashfs

pytestmark = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs squashfs-tools (mksquashfs)")

BLOCK = 4096


def _tree(src: Path) -> dict[str, bytes]:
    """Files of every size class (empty, fragment only, blocks + tail, whole blocks, a sparse one, hard links)."""
    rng = random.Random(7)
    files: dict[str, bytes] = {}
    for i in range(40):
        n = rng.choice([0, 5, 1000, BLOCK, 3 * BLOCK + 17, 9 * BLOCK])
        half = rng.randbytes(n // 2)
        files[f"d{i % 3}/f{i}"] = half + bytes([65 + i % 26]) * (n - len(half))
    files["sparse"] = b"\0" * (4 * BLOCK) + b"end of a sparse file"
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    os.link(src / "d0/f0", src / "hardlink")  # nlink 2: an extended file inode
    os.symlink("d1/f1", src / "link")
    big = src / "bigdir"  # enough entries for an extended directory inode with an index
    big.mkdir()
    for i in range(400):
        (big / f"entry-with-a-long-name-{i:04}").write_bytes(b"x%d" % i)
        files[f"bigdir/entry-with-a-long-name-{i:04}"] = b"x%d" % i
    return files


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path_factory.mktemp("sq") / "src"
    src.mkdir()
    return src, _tree(src)


def build(src: Path, out: Path, compressor: str, *extra: str) -> bytes:
    pseudo = ["-p", "dev c 644 0 0 1 3", "-p", "pipe i 644 0 0 f", "-p", "sock i 644 0 0 s", "-p", "xlink s 777 0 0 d0/f0"]
    subprocess.run(["mksquashfs", str(src), str(out), "-comp", compressor, "-b", str(BLOCK), "-noappend",
                    "-no-progress", "-quiet", "-processors", "1", *pseudo, *extra], check=True, capture_output=True)
    return out.read_bytes()


def _undo(compressor: str, data: bytes) -> bytes:
    """A data or fragment block decompressed (trailing bytes ignored), or as stored when it does not decompress."""
    try:
        if compressor == "gzip":
            return zlib.decompressobj().decompress(data)
        return lzma.LZMADecompressor(lzma.FORMAT_XZ if compressor == "xz" else lzma.FORMAT_ALONE).decompress(data)
    except (zlib.error, lzma.LZMAError, EOFError):
        return data


def _places(image: bytes) -> tuple[squashfs.Superblock, dict[int, squashfs.SquashFile]]:
    sb = squashfs.parse(image)
    return sb, squashfs.file_places(lambda offset, n: image[offset:offset + n], sb)


@pytest.mark.parametrize("compressor", ["gzip", "xz", "lzma"])
@pytest.mark.parametrize("extra", [(), ("-noI", "-noD", "-noF"), ("-xattrs",)])
def test_every_files_data_is_where_the_inode_table_says(tmp_path, tree, compressor, extra):
    src, files = tree
    if compressor == "lzma" and subprocess.run(["mksquashfs", str(src), str(tmp_path / "probe"), "-comp", "lzma",
                                                "-noappend", "-quiet"], capture_output=True).returncode:
        pytest.skip("this mksquashfs has no lzma")
    image = build(src, tmp_path / "img", compressor, *extra)
    sb, places = _places(image)
    assert len(places) == len(files)  # every regular file once (the hard link shares d0/f0's inode)
    for f in places.values():
        same_size = [d for d in files.values() if len(d) == f.file_size]
        if f.file_size == 0:
            assert f.blocks == () and f.fragment_block is None
            continue
        at = f.place(0, sb.block_size)
        if not f.blocks:  # fragment only: the file's bytes lie in its fragment block
            assert at == f.fragment_block
            assert any(d in _undo(compressor, image[at:at + 2 * sb.block_size]) for d in same_size)
            continue
        if f.blocks[0] == 0:  # a hole: nothing stored; the next block is where the data starts
            assert f.place(sb.block_size, sb.block_size) == f.start_block
            continue
        head = _undo(compressor, image[at:at + f.blocks[0]])
        assert any(d[:sb.block_size] == head for d in same_size)
        if f.fragment_block is not None:  # the tail lies in the fragment block, after the blocks
            tail_at = f.place(len(f.blocks) * sb.block_size, sb.block_size)
            assert tail_at == f.fragment_block
            tails = [d[len(f.blocks) * sb.block_size:] for d in same_size if d[:sb.block_size] == head]
            assert any(t in _undo(compressor, image[tail_at:tail_at + 2 * sb.block_size]) for t in tails)


def test_a_later_block_is_placed_after_the_stored_sizes_of_the_ones_before(tmp_path, tree):
    src, files = tree
    image = build(src, tmp_path / "img", "gzip")
    sb, places = _places(image)
    multi = [f for f in places.values() if len(f.blocks) >= 3]
    assert multi
    for f in multi:
        assert f.place(2 * BLOCK + 5, BLOCK) == f.start_block + f.blocks[0] + f.blocks[1]


@pytest.mark.parametrize("compressor", ["zstd", "lz4", "lzo"])
def test_compressors_the_standard_library_lacks_are_said_and_read_when_stored(tmp_path, tree, compressor):
    src, _ = tree
    sb = squashfs.parse(image := build(src, tmp_path / "img", compressor))
    with pytest.raises(squashfs.CannotDecompress, match=f"compressed with {compressor}"):
        squashfs.file_places(lambda offset, n: image[offset:offset + n], sb)
    stored = build(src, tmp_path / "stored", compressor, "-noI", "-noF")  # tables stored: read whatever the data
    assert len(_places(stored)[1]) == len(_places(build(src, tmp_path / "g", "gzip"))[1])


def test_a_short_image_is_refused_with_where_it_ends(tmp_path, tree):
    src, _ = tree
    image = build(src, tmp_path / "img", "gzip")
    sb = squashfs.parse(image)
    cut = image[:(sb.inode_table + sb.directory_table) // 2]
    with pytest.raises(squashfs.DamagedImage, match="inode table: the image ends"):
        squashfs.file_places(lambda offset, n: cut[offset:offset + n], sb)
    with pytest.raises(squashfs.NotSquashfs, match="a squashfs superblock has 96"):
        squashfs.parse(image[:50])


@pytest.mark.parametrize("extra", [(), ("-noI",)])
def test_damaged_tables_give_a_clear_error_never_another_exception(tmp_path, tree, extra):
    src, _ = tree
    image = build(src, tmp_path / "img", "gzip", *extra)
    sb = squashfs.parse(image)
    rng = random.Random(11)
    refused = 0
    for _ in range(300):
        damaged = bytearray(image)
        for _ in range(rng.choice([1, 4, 32])):
            damaged[rng.randrange(sb.inode_table, len(image))] = rng.randrange(256)
        data = bytes(damaged)
        try:
            squashfs.file_places(lambda offset, n, data=data: data[offset:offset + n], squashfs.parse(data))
        except squashfs.NotSquashfs as e:
            assert str(e)
            refused += 1
    assert refused > 30  # most damage is caught (some flips land in data blocks, which the walk never reads)


def test_superblock_tables_out_of_order_are_refused(tmp_path, tree):
    src, _ = tree
    image = bytearray(build(src, tmp_path / "img", "gzip"))
    image[64:72] = (10 ** 12).to_bytes(8, "little")  # inode_table_start past the image
    with pytest.raises(squashfs.DamagedImage, match="not in that order"):
        squashfs.file_places(lambda offset, n: bytes(image[offset:offset + n]), squashfs.parse(bytes(image)))


def test_a_fragment_table_placed_past_any_file_offset_is_damage_not_a_crash(tmp_path, tree):
    """pread refuses an offset of 2**63 or more with OverflowError: the place is checked against the image first."""
    src, _ = tree
    image = bytearray(build(src, tmp_path / "img", "gzip"))
    assert squashfs.parse(bytes(image)).fragments  # the tree has tails: the fragment table is read
    image[80:88] = (2 ** 63 + 5).to_bytes(8, "little")  # fragment_table_start
    path = tmp_path / "damaged"
    path.write_bytes(image)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(squashfs.DamagedImage, match="fragment table"):
            squashfs.file_places(lambda offset, n: os.pread(fd, n, offset), squashfs.parse(bytes(image)))
    finally:
        os.close(fd)


def _bombed(image: bytes, blocks: int) -> bytes:
    """The image with its inode table replaced by `blocks` gzip metadata blocks of 8 KiB of zeros (~25 bytes each)."""
    packed = zlib.compress(b"\0" * squashfs.METADATA_SIZE, 9)
    region = (len(packed).to_bytes(2, "little") + packed) * blocks
    forged = bytearray(image) + region + bytes(16)
    forged[64:72] = len(image).to_bytes(8, "little")  # inode_table_start
    forged[72:80] = (len(image) + len(region)).to_bytes(8, "little")  # directory_table_start
    forged[40:48] = len(forged).to_bytes(8, "little")  # bytes_used
    return bytes(forged)


def test_a_table_that_decompresses_past_the_limit_is_refused_while_reading_it(tmp_path, tree, monkeypatch):
    """A few MiB stored can undo to tens of GiB: the limit holds for the decompressed table, not only the stored one
    (here 64 KiB, so 40 stored blocks of 8 KiB each stop after the ninth)."""
    src, _ = tree
    image = _bombed(build(src, tmp_path / "img", "gzip"), 40)
    monkeypatch.setattr(squashfs, "MAX_TABLE", 64 << 10)
    reads = []

    def read(offset: int, n: int) -> bytes:
        reads.append(n)
        return image[offset:offset + n]

    with pytest.raises(squashfs.DamagedImage, match="inode table: more than 65536 bytes once decompressed"):
        squashfs.file_places(read, squashfs.parse(image))
    assert len(reads) == 2 * 9  # each block's header and body, up to the one that passed the limit


def test_counts_the_tables_cannot_hold_are_refused_before_reading_by_them(tmp_path, tree):
    """The fragment count sizes the fragment table's reading (a forged 2**32 - 1 would make billions of entries):
    a fragment block holds a tail of at least one file, and an inode takes at least 20 bytes of the table."""
    src, _ = tree
    image = bytearray(build(src, tmp_path / "img", "gzip"))
    sb = squashfs.parse(bytes(image))
    assert 0 < sb.fragments < sb.inodes
    more = bytearray(image)
    more[16:20] = (sb.inodes + 1).to_bytes(4, "little")  # fragments
    with pytest.raises(squashfs.DamagedImage, match=f"{sb.inodes + 1} fragment blocks for {sb.inodes} inodes"):
        squashfs.file_places(lambda offset, n: bytes(more[offset:offset + n]), squashfs.parse(bytes(more)))
    image[4:8] = (2 ** 32 - 1).to_bytes(4, "little")  # inodes
    with pytest.raises(squashfs.DamagedImage, match="cannot hold the 4294967295 inodes"):
        squashfs.file_places(lambda offset, n: bytes(image[offset:offset + n]), squashfs.parse(bytes(image)))
