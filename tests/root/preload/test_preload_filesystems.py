"""tunectl preload as root: fanotify record, FIEMAP order on a real ext4, squashfs without FIEMAP, a list
another user cannot read. Residency is checked with util-linux fincore right after the command."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.harness import run_process
from tests.preload_helpers import GOOD_HEADER, evict, make_files, replay_resident, tunectl
from tunectl.preload import order
from tunectl.preload.listing import parse

pytestmark = pytest.mark.root


def test_record_finds_the_files_a_command_opens(tmp_path: Path) -> None:
    a, b, c = make_files(tmp_path, {"a.txt": 10, "b.txt": 20000, "unread.txt": 5})
    lst = tmp_path / "rec.list"
    done = run_process("--json", "preload", "record", "-o", str(lst), "--", "sh", "-c", f"cat {a} {b}")
    assert done.code == 0, done.err
    assert done.doc["method"] == "fanotify"  # the command's output went to stderr
    paths = {e.path for e in parse(lst.read_text(), str(lst)).entries}
    assert {str(a), str(b)} <= paths and str(c) not in paths
    assert "/usr/bin/cat" in paths or "/bin/cat" in paths



# ---------------------------------------------------------------- real file systems on loop devices

def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def _filefrag_first_block(path: Path) -> int:
    """Physical block of logical block 0, from e2fsprogs' filefrag (an independent FIEMAP reader)."""
    for line in _run("filefrag", "-v", "-b4096", str(path)).splitlines():
        cols = [c.strip() for c in line.replace("..", ":").split(":")]
        if cols and cols[0] == "0":
            return int(cols[3])
    raise AssertionError(f"no extent for logical block 0 in filefrag output for {path}")


@pytest.fixture
def loop_mount(tmp_path: Path):
    """mount(image, fstype) -> mount point; every mount and loop device undone at the end."""
    mounted: list[tuple[Path, str]] = []

    def mount(image: Path, fstype: str) -> Path:
        dev = _run("losetup", "-f", "--show", str(image)).strip()
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        try:
            _run("mount", "-t", fstype, dev, str(point))
        except BaseException:
            subprocess.run(["losetup", "-d", dev], check=False)
            raise
        mounted.append((point, dev))
        return point

    try:
        yield mount
    finally:
        for point, dev in reversed(mounted):
            subprocess.run(["umount", str(point)], check=False, capture_output=True)
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)


def test_physical_order_on_ext4_follows_fiemap_not_names_or_inodes(tmp_path: Path, loop_mount) -> None:
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    _run("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    mnt = loop_mount(image, "ext4")
    names = ["a", "b", "c", "d"]
    for name in names:  # inodes in name order
        (mnt / name).touch()
    # Data written in reverse: blocks allocated d, c, b, a. ext4 gives small files blocks from a per-CPU
    # preallocation, so the writes stay on one CPU, or two files could land in two CPUs' areas.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        for name in reversed(names):
            with open(mnt / name, "wb") as f:
                f.write(os.urandom(64 << 10))
                f.flush()
                os.fsync(f.fileno())
    finally:
        os.sched_setaffinity(0, cpus)
    lst = tmp_path / "ext4.list"
    r = tunectl("preload", "collect", str(mnt), "-o", str(lst), "--json")
    assert r.code == 0 and r.doc["order"] == "physical", r.out + r.err
    entries = {Path(e.path).name: e for e in parse(lst.read_text(), str(lst)).entries if Path(e.path).name in names}
    for name, e in entries.items():
        assert e.physical == _filefrag_first_block(mnt / name) * 4096
        assert e.device == f"{os.major(os.stat(mnt).st_dev)}:{os.minor(os.stat(mnt).st_dev)}"
    listed = list(entries.values())
    assert [Path(listed[i].path).name for i in order.inode_indices(listed)] == names
    by_block = sorted(names, key=lambda n: _filefrag_first_block(mnt / n))  # the ground truth, from filefrag
    assert by_block == list(reversed(names)), "ext4 did not allocate in write order; the test needs it"
    assert [Path(e.path).name for e in order.physical_order(entries.values())] == by_block
    evict(*(mnt / n for n in names))
    r, resident = replay_resident(lst, *(mnt / n for n in names))
    assert r.code == 0 and r.doc["skipped"] == [] and r.doc["settled"], r.out
    assert all(v == 64 << 10 for v in resident.values()), resident


def test_squashfs_files_are_placed_by_the_images_inode_table(tmp_path: Path, loop_mount) -> None:
    """No FIEMAP on squashfs: collect reads the image's inode table from the loop device under the mount, and the
    list's order is the image's data order. mksquashfs -sort lays the data out in an order of our choosing,
    unlike both the names and the inode numbers; the list must follow it, and replay read it all."""
    src = tmp_path / "src"
    names = [f"d{i % 3}/f{i:02}" for i in range(24)]
    files = make_files(src, {n: 5000 + 9000 * (i % 5) for i, n in enumerate(names)} | {"tiny": 1})
    rank = list(range(24))
    random.Random(5).shuffle(rank)  # the data order we ask for: highest priority first in the image
    sort_file = tmp_path / "sort"
    sort_file.write_text("".join(f"{n} {1000 - rank[i]}\n" for i, n in enumerate(names)))
    image = tmp_path / "fs.squashfs"
    _run("mksquashfs", str(src), str(image), "-quiet", "-noappend", "-no-progress", "-b", "4096",
         "-sort", str(sort_file), "-processors", "1")
    mnt = loop_mount(image, "squashfs")
    lst = tmp_path / "sq.list"
    r = tunectl("preload", "collect", str(mnt), "-o", str(lst), "--json")
    assert r.code == 0, r.err
    assert r.doc["files"] == len(files) and r.doc["physical"] == len(files) and r.doc["order"] == "physical", r.doc
    entries = parse(lst.read_text(), str(lst)).entries
    listed = [str(Path(e.path).relative_to(mnt)) for e in entries]  # the list is written in replay order
    wanted = [names[i] for i in sorted(range(24), key=rank.__getitem__)]
    assert [n for n in listed if n != "tiny"] == wanted
    by_inode = [str(Path(entries[i].path).relative_to(mnt)) for i in order.inode_indices(entries)]
    assert by_inode != listed  # the test means something: inode order is not the image's order
    physical = [e.physical for e in entries]
    assert physical == sorted(physical)
    shown = tunectl("preload", "show", str(lst), "--json")
    assert shown.code == 0 and [o["source"] for o in shown.doc["order"]] == ["squashfs"], shown.out
    mounted = [mnt / p.relative_to(src) for p in files]
    r, resident = replay_resident(lst, *mounted)
    assert r.code == 0 and r.doc["order"] == "physical" and r.doc["files"] == len(files), r.out
    assert all(resident[str(p)] >= p.stat().st_size for p in mounted), resident


def test_squashfs_image_order_reads_far_less_of_the_loop_than_inode_order(tmp_path: Path) -> None:
    """The direction of benchmarks/preload_squashfs.py on a small case: a 300-file image laid out by a shuffled
    -sort, on a read-only direct-I/O loop marked rotational, cold before each run; a replay in the image's order
    (collect's list) and one in inode order (the list as collect wrote it before), each followed by reading every
    file. Counted from the loop's /sys/block stat, not the clock, so load cannot move it: the image's order asks
    the loop for well under half the reads and sectors, in every one of three paired runs (about 1/7 at 3000
    files in the benchmark)."""
    from benchmarks import preload_squashfs as bench  # a root-tier helper; the sdist's collection needs no import

    src = tmp_path / "src"
    image = tmp_path / "sorted.sqfs"
    bench.shuffled_sort(src, image, bench.make_tree(src, 300))
    with bench.Image(image, tmp_path / "mnt") as img:
        placed, by_inode, rows = bench.lists(img, image, tmp_path)
        assert [r[2] for r in rows] != sorted(r[2] for r in rows)  # the two orders differ, or this means nothing
        for _ in range(3):
            inode = bench.cold_run(img, bench.replay(by_inode))
            image_order = bench.cold_run(img, bench.replay(placed))
            seen = f"inode order {inode}, image order {image_order}"
            print(seen)
            assert inode["sectors"] > 0 and image_order["reads"][1] > 0, seen
            assert image_order["reads"][1] < 0.5 * inode["reads"][1], seen
            assert image_order["sectors"] < 0.5 * inode["sectors"], seen


def test_a_squashfs_image_python_cannot_read_keeps_inode_order_and_says_why(tmp_path: Path, loop_mount) -> None:
    src = tmp_path / "src"
    make_files(src, {"a": 5000, "b": 70000})
    image = tmp_path / "fs.squashfs"
    _run("mksquashfs", str(src), str(image), "-quiet", "-noappend", "-no-progress", "-comp", "zstd")
    mnt = loop_mount(image, "squashfs")
    lst = tmp_path / "sq.list"
    r = tunectl("preload", "collect", str(mnt), "-o", str(lst), "--json")
    assert r.code == 0 and r.doc["physical"] == 0 and r.doc["order"] == "inode", r.doc
    assert any("kept in inode-number order" in n and "zstd" in n for n in r.doc["notes"]), r.doc["notes"]
    shown = tunectl("preload", "show", str(lst), "--json")
    assert [o["source"] for o in shown.doc["order"]] == ["inode"]


def test_an_unreadable_list_is_not_permitted(tmp_path: Path) -> None:
    lst = tmp_path / "private.list"
    lst.write_text(GOOD_HEADER + "\n")
    lst.chmod(0o600)
    tmp_path.chmod(0o755)
    done = run_process("preload", "show", str(lst), prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
                       env={"PATH": os.environ["PATH"]})
    assert done.code == 4, done.err
    assert "cannot read the preload list: Permission denied" in done.err
