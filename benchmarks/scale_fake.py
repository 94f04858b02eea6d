#!/usr/bin/env python3
"""Scale: tunectl apply on 10,000 fake disks vs a bare Python loop writing the same files.

Run: .venv/bin/python benchmarks/scale_fake.py [--devices 10000] [--runs 5]
A fake tree has no scheduler switch cost: this measures tunectl's own work
(discovery, planning, journalling, read-back) per device. Both contenders are
whole processes and start from the same reset tree in each round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import median_ms, row, timed, tunectl_argv  # noqa: E402
from tests.fakesys import FakeTree  # noqa: E402

PROFILE = """\
name: scale
classes:
  ssd: {scheduler: mq-deadline, iosched: {read_expire: 150, write_expire: 1500}, read_ahead_kb: 4096}
"""
WRITES = (("scheduler", "mq-deadline"), ("iosched/read_expire", "150"), ("iosched/write_expire", "1500"),
          ("read_ahead_kb", "4096"))

BARE = """\
import os, sys
root = sys.argv[1]
writes = {writes!r}
for name in os.listdir(os.path.join(root, "block")):
    q = os.path.join(root, "block", name, "queue")
    for attr, value in writes:
        with open(os.path.join(q, attr), "w") as f:
            f.write(value)
"""


def reset(root: Path, names: list[str]) -> None:
    for n in names:
        q = root / "block" / n / "queue"
        (q / "scheduler").write_text("[none] mq-deadline kyber bfq\n")
        (q / "read_ahead_kb").write_text("128\n")
        (q / "iosched").mkdir(exist_ok=True)
        (q / "iosched" / "read_expire").write_text("500\n")
        (q / "iosched" / "write_expire").write_text("5000\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = FakeTree.create(tmp)
        names = tree.add_disks(args.devices, lean=True)
        (Path(tmp) / "p.yaml").write_text(PROFILE)
        env = dict(os.environ, TUNECTL_STATE_DIR=str(Path(tmp) / "state"), TUNECTL_SYSFS_ROOT=str(tree.root),
                   TUNECTL_UDEV_ROOT=str(tree.udev_root))
        apply = tunectl_argv() + ["apply", "-p", str(Path(tmp) / "p.yaml"), "--json", "-q"]
        bare = [sys.executable, "-c", BARE.format(writes=WRITES), str(tree.root)]
        tun, loop, noop = [], [], []
        for _ in range(args.runs):
            reset(tree.root, names)
            (Path(tmp) / "state" / "journal.json").unlink(missing_ok=True)
            t, proc = timed(apply, env)
            doc = json.loads(proc.stdout)
            assert proc.returncode == 0 and doc["writes"] == 4 * args.devices, (proc.returncode, doc.get("writes"))
            tun.append(t)
            noop.append(timed(apply, env)[0])
            reset(tree.root, names)
            loop.append(timed(bare)[0])
    t, b, n = median_ms(tun), median_ms(loop), median_ms(noop)
    print(f"{args.devices} fake disks, 4 writes each; median of {args.runs} runs")
    print(row("bare Python loop (whole process)", b))
    print(row("tunectl apply (whole process)", t, b))
    print(row("tunectl no-op apply (whole process)", n, b))
    print(f"target: tunectl within 3x of the bare loop -> {'met' if t / b <= 3 else 'MISSED'}")


if __name__ == "__main__":
    main()
