#!/usr/bin/env python3
"""`tunectl align` on real loop devices with gpt tables (root): parted runs in parallel vs one at a time.

    sudo .venv/bin/python benchmarks/align_loop.py [--disks 8] [--runs 7]

Measured side by side in each round, medians reported:
  parted x N       `parted -j -s DEV unit s print` for each disk in turn (what a shell loop costs)
  check, serial    tunectl's check() in-process, parted one disk at a time
  check, parallel  the same with up to 8 parted processes at once (the default)
  tunectl align    the whole command as a process (start-up, discovery, parted, verdicts, JSON)
Only loop devices attached here to files in a temporary directory are touched; their
partitions are removed (partx -d) before they are detached. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import median_ms, require_root, row, timed, tunectl_argv  # noqa: E402
from tunectl.align.check import check  # noqa: E402
from tunectl.context import Context  # noqa: E402

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def sh(*argv: str, check_: bool = True) -> str:
    return subprocess.run(argv, check=check_, capture_output=True, text=True, env=ENV, timeout=60).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--disks", type=int, default=8)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    require_root()
    names: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i in range(args.disks):
                image = Path(tmp, f"d{i}.img")
                image.write_bytes(b"")
                os.truncate(image, 64 << 20)
                dev = sh("losetup", "-f", "--show", str(image)).strip()
                names.append((os.path.basename(dev), str(image)))
                sh("parted", "-s", dev, "mklabel", "gpt", "mkpart", "a", "1MiB", "9MiB", "mkpart", "b", "9MiB",
                   "17MiB", "mkpart", "c", "17MiB", "25MiB")
                sh("parted", "-s", "-a", "none", dev, "mkpart", "d", "51201s", "60000s")
            loops = [n for n, _ in names]
            Path(tmp, "state").mkdir()  # a host has /var/lib/tunectl: the profile validation cache works
            env = dict(os.environ, TUNECTL_STATE_DIR=str(Path(tmp, "state")))
            ctx = Context.create(state_dir=str(Path(tmp, "state")), env=env)
            figures: dict[str, list[float]] = {k: [] for k in ("parted", "serial", "parallel", "command")}
            for _ in range(args.runs):
                t = time.perf_counter()
                for n in loops:
                    sh("parted", "-j", "-s", f"/dev/{n}", "unit", "s", "print")
                figures["parted"].append(time.perf_counter() - t)
                for key, workers in (("serial", 1), ("parallel", 8)):
                    t = time.perf_counter()
                    report = check(ctx, None, loops, workers=workers)
                    figures[key].append(time.perf_counter() - t)
                    assert sum(len(d.partitions) for d in report.disks) == 4 * len(loops)
                elapsed, proc = timed(tunectl_argv() + ["align", *loops, "--json"], env)
                assert proc.returncode == 1, proc.stderr  # partition d is misaligned on purpose
                figures["command"].append(elapsed)
        finally:
            for name, image in names:
                with contextlib.suppress(OSError):
                    if Path(f"/sys/block/{name}/loop/backing_file").read_text().strip() == image:
                        sh("partx", "-d", f"/dev/{name}", check_=False)
                        sh("losetup", "-d", f"/dev/{name}", check_=False)
    base = median_ms(figures["parted"])
    print(f"tunectl align on {args.disks} loop disks x 4 gpt partitions, median of {args.runs} rounds "
          f"({os.cpu_count()} CPUs)")
    print(row(f"parted -j x {args.disks}, one after another", base))
    print(row("check(), parted one at a time", median_ms(figures["serial"]), base))
    print(row("check(), up to 8 parted at once", median_ms(figures["parallel"]), base))
    print(row("tunectl align DEV... --json (process)", median_ms(figures["command"]), base))


if __name__ == "__main__":
    main()
