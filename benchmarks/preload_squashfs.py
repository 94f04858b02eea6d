#!/usr/bin/env python3
"""A squashfs image read cold after a preload in directory order, in inode order and in the image's own order.

Run as root: .venv/bin/python benchmarks/preload_squashfs.py [--files 3000] [--runs 3] [--backing DIR]

squashfs has no FIEMAP: before issue #30's squashfs item a replay read its files
in inode-number order; now `collect` reads the image's inode table and orders
them by where their data lies in the image. This builds a source-tree-like image
(gzip, 128 KiB blocks) of --files files with mksquashfs, twice: as mksquashfs lays
it out by default, and with a -sort file of shuffled priorities (an image laid
out for some other workload, so data order is neither name nor inode order).
Each is attached read-only to a direct-I/O loop device marked rotational, and
mounted. Per layout, interleaved, cold before each (umount, BLKFLSBUF on the
loop, mount: never the machine's caches):
  (c) WILLNEED in directory order, from a process of its own, then every file read in directory order
  (i) `tunectl preload replay` of the list in inode order (the list as collect wrote it before), then the reads
  (p) `tunectl preload replay` of the list collect writes now (the image's order), then the reads
Reported per method: the reads the loop device completed (all, and those done once it
had no requests in progress after the preload: field 9 of its stat, the replay's own
rule, the I/O scheduler's queue included) and the sectors it read (its /sys/block stat,
before and after), wall seconds (medians), and the order's
quality on the image: each file's stored data as [start, end) image bytes (from
the inode table), taken in the order the method issues them: the share of moves
that go forward and the total distance jumped between one file's data and the
next. This host's loops answer from page-cache speed: read the seconds as
noise-prone, the order figures and request counts as what a seeking disk would see.

On the sorted layout (c) and (i) read many times the image (384,530 sectors, 197 MB,
on a 13.3 MB image; (p) 42,270): real reads (the loop's own stat), not a miscount. The
counts fit squashfs's caching (not traced block by block): squashfs reads its
blocks with its own bios, not through the loop device's page cache, and keeps only
CONFIG_SQUASHFS_FRAGMENT_CACHE_SIZE (3 by default) decompressed fragment blocks:
small files share a fragment block, and files of one block taken far apart in the
order read that block from the device again for each. The image's order (p) takes
them one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, require_root, tunectl_argv  # noqa: E402
from benchmarks.preload_tree import read_all  # noqa: E402
from tests.loopdev import remount_cold  # noqa: E402
from tunectl.preload.replay import wait_until_drained  # noqa: E402
from tunectl.system.sysfs import Sysfs  # noqa: E402


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def make_tree(src: Path, files: int, seed: int = 30) -> list[str]:
    """A source tree: packages of modules, sizes log-normal (median about 5 KiB, a long tail)."""
    rng = random.Random(seed)
    dirs = [f"pkg{d // 10}/mod{d}" for d in range(max(1, files // 20))]
    names = []
    for i in range(files):
        rel = f"{rng.choice(dirs)}/f{i}.py"
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        size = min(int(rng.lognormvariate(8.5, 1.1)), 2 << 20)
        half = rng.randbytes(size // 2)  # half random, half text-like: gzip finds something to do
        (src / rel).write_bytes(half + b"x = 1\n" * ((size - len(half)) // 6))
        names.append(rel)
    return names


class Image:
    """A squashfs image on a read-only, direct-I/O, rotational loop device, mounted."""

    def __init__(self, image: Path, mnt: Path) -> None:
        self.image, self.mnt, self.dev = image, mnt, ""

    def __enter__(self) -> Image:
        self.dev = _run("losetup", "-f", "--show", "-r", "--direct-io=on", str(self.image)).strip()
        Path(f"/sys/block/{self.name}/queue/rotational").write_text("1")
        self.mnt.mkdir(exist_ok=True)
        _run("mount", "-t", "squashfs", "-o", "ro", self.dev, str(self.mnt))
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.mnt)], check=False, capture_output=True)
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], check=False, capture_output=True)

    @property
    def name(self) -> str:
        return os.path.basename(self.dev)

    def cold(self) -> None:
        remount_cold(self.dev, self.mnt, "-t", "squashfs", "-o", "ro")

    def stat(self) -> tuple[int, int]:
        """(reads completed, sectors read) of the loop device."""
        f = Path(f"/sys/block/{self.name}/stat").read_text().split()
        return int(f[0]), int(f[2])

    def settle(self) -> bool:
        """Until the loop device has no requests in progress (WILLNEED returns before its reads complete), by the
        replay's own rule (field 9 of its sysfs stat, the I/O scheduler's queue included), at most 10 s; False
        when it still had some then."""
        rdev = os.stat(self.dev).st_rdev
        return wait_until_drained(Sysfs("/sys"), [f"{os.major(rdev)}:{os.minor(rdev)}"], 10)

    def walk(self) -> list[str]:
        out = []
        for d, dirs, names in os.walk(self.mnt):
            dirs.sort()
            out += [os.path.join(d, n) for n in sorted(names)]
        return out


def extents(image: Path) -> dict[int, tuple[int, int]]:
    """inode -> [start, end) of the file's stored data in the image (blocks, else its fragment block)."""
    from tunectl.explain import squashfs

    fd = os.open(image, os.O_RDONLY)
    try:
        sb = squashfs.parse(os.pread(fd, squashfs.SIZE, 0))
        found = squashfs.file_places(lambda offset, n: os.pread(fd, n, offset), sb)
    finally:
        os.close(fd)
    return {ino: (f.place(0, sb.block_size), f.place(0, sb.block_size) + max(sum(f.blocks), 1))
            for ino, f in found.items() if f.file_size}


def quality(order: list[tuple[int, int]]) -> dict:
    """For data read in this order: the share of moves that do not go back (to the same block, as files sharing
    a fragment block do, or further on), and the bytes jumped between one file's data and the next."""
    moves = list(zip(order, order[1:]))
    back = sum(1 for (prev, _), (start, _) in moves if start < prev)
    jumped = sum(0 if start == prev else abs(start - end) for (prev, end), (start, _) in moves)
    return {"forward": 1 - back / len(moves) if moves else 1.0, "jumped_mb": jumped / 1e6}


def shuffled_sort(src: Path, image: Path, names: list[str], seed: int = 7) -> None:
    """mksquashfs of `src` into `image`, its data laid out by a -sort file of shuffled priorities (an image laid out
    for some other workload: data order is neither name nor inode order)."""
    rng = random.Random(seed)
    sort_file = image.with_suffix(".sort")
    sort_file.write_text("".join(f"{n} {rng.randrange(-30000, 30000)}\n" for n in names))
    mksquashfs(src, image, "-sort", str(sort_file))


def mksquashfs(src: Path, image: Path, *extra: str) -> None:
    _run("mksquashfs", str(src), str(image), "-noappend", "-quiet", "-no-progress", "-processors", "1", *extra)


def lists(img: Image, image: Path, tmp: Path) -> tuple[Path, Path, list[list]]:
    """`preload collect` of the mounted image: (the list in the image's order as collect writes it now, the same
    files in inode order without offsets as collect wrote it before, the list's entries)."""
    placed = tmp / f"{image.stem}.list"
    img.cold()
    subprocess.run([*tunectl_argv(), "preload", "collect", str(img.mnt), "-o", str(placed)], check=True,
                   capture_output=True, cwd=REPO)
    lines = placed.read_text().splitlines()
    head = json.loads(lines[0])
    assert head.get("placed"), f"collect did not place the squashfs files: {head}"
    rows = [json.loads(line) for line in lines[1:]]
    by_inode = tmp / f"{image.stem}-inode.list"
    head.pop("placed")
    by_inode.write_text("\n".join([json.dumps(head)] + [json.dumps(r[:6] + [None]) for r in
                                                         sorted(rows, key=lambda r: r[2])]) + "\n")
    return placed, by_inode, rows


def replay(lst: Path) -> Callable[[], object]:
    argv = [*tunectl_argv(), "preload", "replay", "-q", str(lst)]
    return lambda: subprocess.run(argv, check=True, capture_output=True, cwd=REPO)


def cold_run(img: Image, before: Callable[[], object]) -> dict:
    """From a cold image: `before` (a preload), then every file read in directory order. The loop device's
    reads (all, and those done by the time the preload's requests completed: `settle`), sectors read, wall seconds,
    and whether that wait ended before its timeout."""
    img.cold()
    reads0, sectors0 = img.stat()
    start = time.perf_counter()
    before()
    settled = img.settle()
    preload_reads = img.stat()[0] - reads0
    read_all(img.walk())
    seconds = time.perf_counter() - start
    reads1, sectors1 = img.stat()
    return {"s": seconds, "reads": (preload_reads, reads1 - reads0), "sectors": sectors1 - sectors0,
            "settled": settled}


def measure(img: Image, image: Path, runs: int, tmp: Path) -> dict:
    placed, by_inode, rows = lists(img, image, tmp)
    where = extents(image)
    walk = img.walk()
    ino = {p: os.stat(p).st_ino for p in walk}
    issued = {"c": [ino[p] for p in walk], "i": sorted(r[2] for r in rows), "p": [r[2] for r in rows]}
    naive = [sys.executable, str(REPO / "benchmarks" / "preload_tree.py"), "--willneed", str(img.mnt)]
    before = {"c": lambda: subprocess.run(naive, check=True), "i": replay(by_inode), "p": replay(placed)}
    got: dict[str, dict[str, list]] = {k: {"s": [], "reads": [], "sectors": [], "settled": []} for k in before}
    for r in range(runs):
        keys = list(before)[r % 3:] + list(before)[:r % 3]
        for k in keys:
            for what, value in cold_run(img, before[k]).items():
                got[k][what].append(value)
    return {"files": len(rows), "image_mb": image.stat().st_size / 1e6,
            "quality": {k: quality([where[i] for i in v if i in where]) for k, v in issued.items()},
            "runs": got, "median_s": {k: statistics.median(v["s"]) for k, v in got.items()}}


LABELS = {"c": "(c) WILLNEED in directory order", "i": "(i) replay, inode order (before)",
          "p": "(p) replay, the image's order (now)"}


def report(layout: str, res: dict) -> list[str]:
    lines = [f"{layout}: {res['files']} files, image {res['image_mb']:.1f} MB; {len(res['runs']['c']['s'])} cold runs"]
    for k, label in LABELS.items():
        q, g = res["quality"][k], res["runs"][k]
        reads = statistics.median(t for _, t in g["reads"])
        early = statistics.median(p for p, _ in g["reads"])
        lines.append(f"  {label:<38} forward {100 * q['forward']:5.1f}%  jumped {q['jumped_mb']:8.1f} MB  "
                     f"loop reads {reads:6.0f} ({early:.0f} by the preload)  sectors {statistics.median(g['sectors']):.0f}"
                     f"  {res['median_s'][k]:.3f} s"
                     + (f"  ({g['settled'].count(False)} waits reached 10 s)" if not all(g["settled"]) else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backing", default="/var/tmp", help="directory for the source tree and the images")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    require_root()
    with tempfile.TemporaryDirectory(dir=args.backing, prefix="preload-squashfs-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / "src"
        names = make_tree(src, args.files)
        results = {}
        for layout in ("default", "sorted"):
            image = tmp / f"{layout}.sqfs"
            if layout == "sorted":
                shuffled_sort(src, image, names)
            else:
                mksquashfs(src, image)
            with Image(image, tmp / f"mnt-{layout}") as img:
                results[layout] = measure(img, image, args.runs, tmp)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for layout, res in results.items():
        print("\n".join(report(layout, res)))


if __name__ == "__main__":
    main()
