"""The squashfs superblock parser on images mksquashfs builds: every compressor it offers, 4 KiB..1 MiB blocks."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tunectl.explain import squashfs

pytestmark = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs squashfs-tools (mksquashfs)")

BLOCK_SIZES = [4096 << i for i in range(9)]  # 4 KiB .. 1 MiB


def offered_compressors() -> list[str]:
    """The compressors this mksquashfs was built with (its help lists them, one per line)."""
    help_text = subprocess.run(["mksquashfs", "-help"], capture_output=True, text=True).stdout
    help_text += subprocess.run(["mksquashfs"], capture_output=True, text=True).stderr
    listed = help_text.split("Compressors available", 1)[1].split("\n-", 1)[0]
    return sorted({m for m in re.findall(r"^\s+([a-z0-9]+)(?: \(default\))?\s*$", listed, re.M)})


def build(tmp, compressor: str, block: int, *extra: str) -> bytes:
    src = tmp / "src"
    if not src.exists():
        src.mkdir()
        (src / "binary").write_bytes(bytes(range(256)) * 700 + b"tail")
        (src / "small").write_text("a small file\n")
    image = tmp / f"{compressor}-{block}.sqfs"
    subprocess.run(["mksquashfs", str(src), str(image), "-comp", compressor, "-b", str(block), "-noappend",
                    "-no-progress", "-quiet", "-processors", "1", *extra], check=True, capture_output=True)
    return image.read_bytes()


def test_debian_offers_the_compressors_the_kernel_reads():
    assert {"gzip", "lzo", "lz4", "xz", "zstd"} <= set(offered_compressors())


@pytest.mark.parametrize("compressor", offered_compressors())
def test_every_block_size_and_compressor(tmp_path, compressor):
    for block in BLOCK_SIZES:
        sb = squashfs.parse(build(tmp_path, compressor, block))
        assert (sb.block_size, sb.compressor) == (block, compressor)
        assert sb.version == "4.0"
        assert sb.inodes == 3  # the directory and its two files
        assert sb.bytes_used > 0


def test_flags(tmp_path):
    plain = squashfs.parse(build(tmp_path, "gzip", 131072))
    assert "duplicates" in plain.flags and "exportable" in plain.flags
    assert "uncompressed-data" not in plain.flags
    bare = squashfs.parse(build(tmp_path, "xz", 65536, "-noD", "-no-fragments", "-no-exports", "-no-xattrs"))
    assert {"uncompressed-data", "no-fragments", "no-xattrs"} <= set(bare.flags)
    assert "exportable" not in bare.flags
    assert bare.fragments == 0


def test_refuses_what_is_not_squashfs(tmp_path):
    image = build(tmp_path, "gzip", 4096)
    with pytest.raises(squashfs.NotSquashfs, match="magic"):
        squashfs.parse(b"\0" * 96)
    with pytest.raises(squashfs.NotSquashfs, match="96"):
        squashfs.parse(image[:40])
    broken = bytearray(image)
    broken[22] = 11  # block_log that does not match the block size
    with pytest.raises(squashfs.NotSquashfs, match="block size"):
        squashfs.parse(bytes(broken))
