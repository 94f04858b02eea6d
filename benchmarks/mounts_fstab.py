#!/usr/bin/env python3
"""Scale: `tunectl mounts check --fstab` on a large synthetic fstab, an old tree against a new one, side by side.

Run: .venv/bin/python benchmarks/mounts_fstab.py --old /tmp/old-tree --new . [--lines 2000 20000] [--runs 5]
(`git worktree add /tmp/old-tree REV` makes the old tree; compile both first: `python -m compileall -q DIR/tunectl`,
and run with PYTHONDONTWRITEBYTECODE unset.) The fstab names no device this machine has: a quarter each UUID=,
LABEL=, PARTUUID= and /dev/disk/by-uuid/ links, so each line costs the full lookup (udev, by-* links, blkid).
The runs alternate old and new; the table gives medians and new/old. Uses its own state dir; reads the live mounts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import median_ms, timed, tunectl_argv  # noqa: E402

SOURCES = ("UUID=0000-{i:05d}", "LABEL=bench{i}", "/dev/disk/by-uuid/bench-{i}", "PARTUUID=bench-{i}")


def write_fstab(path: Path, lines: int) -> None:
    path.write_text("".join(f"{SOURCES[i % 4].format(i=i)} /mnt/bench{i} ext4 defaults,nofail 0 2\n"
                            for i in range(lines)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, type=Path, help="the tree to compare against (a checkout)")
    ap.add_argument("--new", default=Path(__file__).resolve().parent.parent, type=Path)
    ap.add_argument("--lines", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunectl-bench-fstab-") as tmp:
        print(f"{'lines':>7}  {'old ms':>9}  {'new ms':>9}  new/old")
        for lines in args.lines:
            fstab = Path(tmp) / f"fstab{lines}"
            write_fstab(fstab, lines)
            times: dict[str, list[float]] = {"old": [], "new": []}
            outputs: dict[str, str] = {}
            for _ in range(args.runs):
                for which, tree in (("old", args.old), ("new", args.new)):
                    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "TUNECTL_STATE_DIR": f"{tmp}/state"}
                    env.pop("PYTHONDONTWRITEBYTECODE", None)
                    took, done = timed([*tunectl_argv(), "mounts", "check", "--fstab", str(fstab)], env=env)
                    times[which].append(took)
                    outputs[which] = done.stdout
            same = "same output" if outputs["old"] == outputs["new"] else "OUTPUT DIFFERS"
            old, new = median_ms(times["old"]), median_ms(times["new"])
            print(f"{lines:>7}  {old:>9.0f}  {new:>9.0f}  {new / old:.3f}  ({same})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
