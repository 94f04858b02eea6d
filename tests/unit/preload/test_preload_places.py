"""Placing squashfs files by the image's inode table (tunectl.preload.places): the entries' offsets, the
order a replay then takes, the header's "placed" key and what `show` says about each file system's order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tunectl.explain import squashfs
from tunectl.explain.squashfs import SquashFile
from tunectl.preload import order, places
from tunectl.preload.listing import Entry, ListError, parse_header, placed_of, render
from tunectl.preload.show import show
from tunectl.preload.text import shown

SQ, EXT = "7:0", "8:0"


def entry(path: str, device: str, inode: int, size: int, physical: int | None = None, start: int = 0) -> Entry:
    return Entry(path, device, inode, size, 1, ((start, size - start),) if size else (), physical)


def test_squashfs_entries_take_the_image_offset_of_their_first_range():
    found = {
        10: SquashFile(10, 5000, 9000, (3000, 2000, 0), None),  # three blocks, the last a hole: no fragment
        11: SquashFile(11, 0, 100, (), 777),  # a fragment-only file
        12: SquashFile(12, 900, 50, (), None),  # listed with another size: not the image that is mounted
    }
    entries = [entry("/s/a", SQ, 10, 9000), entry("/s/b", SQ, 11, 100), entry("/s/c", SQ, 12, 60),
               entry("/s/d", SQ, 10, 9000, start=4096), entry("/e/x", EXT, 10, 9000), entry("/s/empty", SQ, 13, 0)]
    out, placed = places.placed_entries(entries, SQ, found, 4096)
    assert [e.physical for e in out] == [5000, 777, None, 8000, None, None]
    assert placed == 3
    assert [e.path for e in order.physical_order(out)][:3] == ["/s/b", "/s/a", "/s/d"]  # image front to back


def test_a_tail_past_the_blocks_is_in_the_fragment_block():
    f = SquashFile(1, 4096, 10000, (100, 200), 90000)
    assert [f.place(o, 4096) for o in (0, 4095, 4096, 8191, 8192, 9999)] == [4096, 4096, 4196, 4196, 90000, 90000]


def test_order_source_per_file_system():
    entries = [entry("/s/a", SQ, 1, 10, 5), entry("/e/a", EXT, 1, 10, 99), entry("/t/a", "0:40", 3, 10)]
    assert places.sources(entries, {SQ: "squashfs"}) == {
        "0:40": ("inode", 1), SQ: ("squashfs", 1), EXT: ("fiemap", 1)}


def test_the_header_says_which_devices_were_placed_and_is_checked():
    text = render([entry("/s/a", SQ, 1, 10, 5)], "now", placed={SQ: "squashfs"})
    header = parse_header(text.split("\n")[0], "l")
    assert placed_of(header, "l") == {SQ: "squashfs"}
    assert placed_of(parse_header(render([], "now").split("\n")[0], "l"), "l") == {}
    for bad in ({"7:0": "fiemap"}, {"sda": "squashfs"}, ["7:0"]):
        with pytest.raises(ListError, match="^l:1: placed"):
            placed_of({**header, "placed": bad}, "l")


def test_show_says_where_each_file_systems_order_comes_from(tmp_path: Path):
    entries = [entry(str(tmp_path / "a"), SQ, 1, 10, 5), entry(str(tmp_path / "b"), EXT, 2, 10)]
    text = render(entries, "now", placed={SQ: "squashfs"})
    header = json.loads(text.split("\n")[0])
    from tunectl.preload.listing import parse

    report = show(parse(text, "l"), "l", header)
    assert [o.to_json() for o in report.order] == [{"device": SQ, "source": "squashfs", "files": 1},
                                                    {"device": EXT, "source": "inode", "files": 1}]
    lines = shown(report)
    assert f"order on {SQ}: physical, from the squashfs image's inode table (front to back) (1 file)" in lines
    assert any(line.startswith(f"order on {EXT}: inode number") for line in lines)


@pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs squashfs-tools (mksquashfs)")
def test_read_places_from_an_image_and_a_device_shorter_than_its_superblock_says(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i}").write_bytes(os.urandom(100 * i))
    image = tmp_path / "img"
    subprocess.run(["mksquashfs", str(src), str(image), "-noappend", "-quiet", "-no-progress", "-processors", "1"],
                   check=True, capture_output=True)
    fd = os.open(image, os.O_RDONLY)
    try:
        block_size, found = places.read_places(fd)
    finally:
        os.close(fd)
    assert block_size == 128 << 10 and len(found) == 20
    with open(image, "r+b") as f:
        f.truncate(os.path.getsize(image) // 2)
    fd = os.open(image, os.O_RDONLY)
    try:
        with pytest.raises(squashfs.DamagedImage, match="the device holds"):
            places.read_places(fd)
    finally:
        os.close(fd)
