#!/usr/bin/env python3
"""The fixed cost of `tunectl preload replay`: an empty list and a small resident one, start to exit, beside
`python -c pass` (issue #30: at most 30 ms over it).

Run: .venv/bin/python benchmarks/preload_startup.py [--runs 30] [--compare DIR]
Whole processes, in the installed environment (byte code kept), the commands rotating inside each round;
medians of wall and CPU time (user + system: less sensitive than wall to the other work of a shared machine).
`--compare DIR`: the same replay with the tunectl package of the checkout at DIR (a before/after in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import installed_env, rotated_medians, tunectl_argv  # noqa: E402
from benchmarks.common import timed_cpu as timed  # noqa: E402

BUDGET_MS = 30.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--compare", metavar="DIR", help="also time the replay from the tunectl checkout at DIR")
    args = ap.parse_args()
    tunectl = tunectl_argv()
    python = str(Path(tunectl[0]).with_name("python")) if "/.venv/" in tunectl[0] else sys.executable
    with tempfile.TemporaryDirectory(prefix="tunectl-preload-startup-", dir="/var/tmp") as tmp:
        env = installed_env(TUNECTL_STATE_DIR=os.path.join(tmp, "state"))
        empty = Path(tmp, "empty.list")
        empty.write_text(json.dumps({"format": "tunectl-preload", "version": 1, "files": 0}) + "\n")
        tree = Path(tmp, "tree")
        tree.mkdir()
        for i in range(20):
            Path(tree, f"f{i}").write_bytes(os.urandom(4096 * (1 + i % 4)))
        small = Path(tmp, "small.list")
        subprocess.run([*tunectl, "-q", "preload", "collect", str(tree), "-o", str(small)], check=True, env=env)
        commands = {"python -c pass": ([python, "-c", "pass"], env)}
        for label, lst in (("empty list", empty), ("20 resident files", small)):
            commands[f"replay, {label}"] = ([*tunectl, "-q", "preload", "replay", str(lst)], env)
            if args.compare:
                commands[f"replay from DIR, {label}"] = ([*tunectl, "-q", "preload", "replay", str(lst)],
                                                          {**env, "PYTHONPATH": os.path.abspath(args.compare)})
        for argv, e in commands.values():  # byte code written, the 20 files read: what a later start finds
            timed(argv, e)
        med = rotated_medians(commands, args.runs)
    base_wall, base_cpu = med["python -c pass"]
    print(f"preload replay start-up, medians of {args.runs} paired runs, load {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs" + (f"; DIR = {args.compare}" if args.compare else ""))
    for k, (wall, cpu) in med.items():
        print(f"  {k:<36} wall {wall:6.1f} ms (+{wall - base_wall:5.1f})   CPU {cpu:6.1f} ms (+{cpu - base_cpu:5.1f})")
    for label in ("empty list", "20 resident files"):
        over = med[f"replay, {label}"][0] - base_wall
        print(f"  {label}: {over:.1f} ms over python -c pass (wall); target at most {BUDGET_MS:.0f} ms -> "
              f"{'met' if over <= BUDGET_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
