#!/usr/bin/env python3
"""apply on 8 real loop devices: tunectl vs serial and parallel shell loops (root).

Run: .venv/bin/python benchmarks/apply_loop.py [--runs 7]
Every run starts from the same state (scheduler none, read-ahead 128 KiB); the
four contenders alternate inside each round so machine noise hits all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import median_ms, require_root, row, timed, tunectl_argv  # noqa: E402
from tests.loopdev import loop_devices  # noqa: E402

PROFILE = """\
name: bench-apply
classes:
  loop:
    scheduler: mq-deadline
    iosched: {read_expire: 150, write_expire: 1500}
    read_ahead_kb: 4096
"""


def reset(names: list[str]) -> None:
    for n in names:
        Path(f"/sys/block/{n}/queue/scheduler").write_text("none")
        Path(f"/sys/block/{n}/queue/read_ahead_kb").write_text("128")


def shell_script(names: list[str], parallel: bool) -> str:
    lines = []
    for n in names:
        q = f"/sys/block/{n}/queue"
        body = (f"echo mq-deadline > {q}/scheduler; echo 150 > {q}/iosched/read_expire; "
                f"echo 1500 > {q}/iosched/write_expire; echo 4096 > {q}/read_ahead_kb")
        lines.append(f"( {body} ) &" if parallel else body)
    return "\n".join(lines + (["wait"] if parallel else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--devices", type=int, default=8)
    args = ap.parse_args()
    require_root()
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        (tmpd / "p.yaml").write_text(PROFILE)
        env = dict(os.environ, TUNECTL_STATE_DIR=str(tmpd / "state"))
        with loop_devices(tmpd, [{"size_mb": 8}] * args.devices) as names:
            apply = tunectl_argv() + ["apply", "-p", str(tmpd / "p.yaml"), "--json", *names]
            serial, parallel = shell_script(names, False), shell_script(names, True)
            whole, phase, ser, par, noop, noop_writes = [], [], [], [], [], []
            for _ in range(args.runs):
                reset(names)
                t, proc = timed(apply, env)
                doc = json.loads(proc.stdout)
                assert doc["changed"] and proc.returncode == 0, proc.stdout + proc.stderr
                whole.append(t)
                phase.append(doc["write_phase_ms"] / 1000)
                t, proc = timed(apply, env)  # everything in place now: the no-op apply
                noop.append(t)
                noop_writes.append(json.loads(proc.stdout)["writes"])
                reset(names)
                ser.append(timed(["sh", "-c", serial])[0])
                reset(names)
                par.append(timed(["sh", "-c", parallel])[0])
            reset(names)
    w, p, s, pl, n = map(median_ms, (whole, phase, ser, par, noop))
    # Ratios pair by pair (same round, same noise), then their median: steadier than a ratio of medians.
    pair = statistics.median(a / b for a, b in zip(whole, ser))
    pair_phase = statistics.median(a / b for a, b in zip(phase, par))
    print(f"apply on {args.devices} loop devices: scheduler + 2 iosched knobs + read-ahead; median of {args.runs} runs")
    print(row("serial shell loop", s))
    print(row("parallel shell loop", pl))
    print(row("tunectl apply, whole process (vs serial)", w, s))
    print(row("tunectl write phase (vs parallel loop)", p, pl))
    print(row("tunectl no-op apply, whole process", n))
    print(f"  no-op apply sysfs writes: {max(noop_writes)}")
    print(f"  median of per-round ratios: whole/serial {pair:.2f}, write phase/parallel {pair_phase:.2f}")
    print(f"targets: whole/serial < 0.7 -> {'met' if pair < 0.7 else 'MISSED'}; "
          f"write phase/parallel < 1.5 -> {'met' if pair_phase < 1.5 else 'MISSED'}; "
          f"no-op < 150 ms with 0 writes -> {'met' if n < 150 and max(noop_writes) == 0 else 'MISSED'}")


if __name__ == "__main__":
    main()
