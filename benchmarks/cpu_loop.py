#!/usr/bin/env python3
"""CPU time of plan, a no-op apply and verify on 8 real loop devices: this checkout against an older build (root).

Run: .venv/bin/python benchmarks/cpu_loop.py [--base 8f316b0] [--runs 9]
The older build is `git archive BASE` unpacked in a temporary directory and run
by the same interpreter. Each round runs every command once with each build,
alternating which goes first, so machine noise hits both alike; the figure is
the CPU time of the process (user + sys, from wait4), medians over the rounds,
and the ratio this/base per command. Target: each below 0.95.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, require_root  # noqa: E402
from tests.loopdev import loop_devices  # noqa: E402

PROFILE = """\
name: bench-cpu
classes:
  loop:
    scheduler: mq-deadline
    iosched: {read_expire: 160, write_expire: 1500}
    read_ahead_kb: 4096
"""
TARGET = 0.95


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """user + sys of one child process, as the kernel accounted it."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {err}")
    return usage.ru_utime + usage.ru_stime


def unpack(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "tunectl"], check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="8f316b0", help="the older build to compare with (a git revision)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--devices", type=int, default=8)
    args = ap.parse_args()
    require_root()
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        (tmpd / "p.yaml").write_text(PROFILE)
        builds = {"this": REPO, "base": unpack(args.base, tmpd / "base")}
        with loop_devices(tmpd, [{"size_mb": 8}] * args.devices) as names:
            def argv(cmd: str) -> list[str]:
                tail = {"plan": ["plan", "-p", str(tmpd / "p.yaml")], "apply": ["apply", "-p", str(tmpd / "p.yaml")],
                        "verify": ["verify"]}[cmd]
                return [sys.executable, "-m", "tunectl", *tail, *names]

            def env(build: str) -> dict[str, str]:
                return dict(os.environ, PYTHONPATH=str(builds[build]), TUNECTL_STATE_DIR=str(tmpd / f"state-{build}"))

            for build in builds:  # in place, with a journal and a record: every later apply is a no-op
                cpu_seconds(argv("apply"), env(build))
            times: dict[tuple[str, str], list[float]] = {}
            for i in range(args.runs):
                for cmd in ("plan", "apply", "verify"):
                    for build in (("this", "base") if i % 2 == 0 else ("base", "this")):
                        times.setdefault((cmd, build), []).append(cpu_seconds(argv(cmd), env(build)))
    print(f"CPU time (user+sys) on {args.devices} loop devices, median of {args.runs} interleaved runs; "
          f"base = {args.base}")
    missed = []
    for cmd in ("plan", "apply", "verify"):
        this, base = (statistics.median(times[(cmd, b)]) * 1000 for b in ("this", "base"))
        ratio = this / base
        label = "no-op apply" if cmd == "apply" else cmd
        print(f"  {label:<12} this {this:7.1f} ms   base {base:7.1f} ms   ratio {ratio:.2f}")
        if ratio >= TARGET:
            missed.append(label)
    print(f"target: each ratio below {TARGET} -> " + ("met" if not missed else f"MISSED ({', '.join(missed)})"))


if __name__ == "__main__":
    main()
