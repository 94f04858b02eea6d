#!/usr/bin/env python3
"""CPU time of plan, a no-op apply and verify on 8 real loop devices, and of status and --version: this
checkout against older builds (root).

Run: .venv/bin/python benchmarks/cpu_loop.py [--base 8f316b0] [--also REV] [--runs 9]
An older build is `git archive REV` unpacked in a temporary directory and run by
the same interpreter. Each round runs every command once with each build, in an
order that rotates from round to round, so machine noise hits all alike; the
figure is the CPU time of the process (user + sys, from wait4), medians over the
rounds, and the ratio this/older per command. Every build is byte-compiled first
and runs with PYTHONDONTWRITEBYTECODE unset, as an installed tunectl does (a tree
compiled at every start costs twice the CPU and says nothing about tunectl).
Targets: plan, no-op apply and verify each below 0.95 of --base; status and
--version no slower than any older build (ratio at most 1.00, within the noise
of the run: the medians of two identical builds differ by up to ~3% here).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, installed_env, require_root  # noqa: E402
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
NOISE = 1.03  # status and --version: "no slower" is a ratio within the noise of a run
COMMANDS = ("plan", "apply", "verify", "status", "version")
LABELS = {"apply": "no-op apply", "version": "--version"}


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


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="8f316b0", help="the older build to compare with (a git revision)")
    ap.add_argument("--also", action="append", default=[], metavar="REV",
                    help="another older build, measured in the same rounds (e.g. the start of a change)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--devices", type=int, default=8)
    args = ap.parse_args()
    require_root()
    olders = [args.base] + [rev for rev in args.also if rev != args.base]
    start_load = load()
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        (tmpd / "p.yaml").write_text(PROFILE)
        builds = {"this": REPO} | {rev: unpack(rev, tmpd / f"build-{i}") for i, rev in enumerate(olders)}
        for path in builds.values():
            compileall.compile_dir(path / "tunectl", quiet=1)
        with loop_devices(tmpd, [{"size_mb": 8}] * args.devices) as names:
            def argv(cmd: str) -> list[str]:
                tail = {"plan": ["plan", "-p", str(tmpd / "p.yaml"), *names],
                        "apply": ["apply", "-p", str(tmpd / "p.yaml"), *names],
                        "verify": ["verify", *names], "status": ["status"], "version": ["--version"]}[cmd]
                return [sys.executable, "-m", "tunectl", *tail]

            def env(build: str) -> dict[str, str]:
                return installed_env(PYTHONPATH=str(builds[build]),
                                     TUNECTL_STATE_DIR=str(tmpd / f"state-{list(builds).index(build)}"))

            for build in builds:  # in place, with a journal and a record: every later apply is a no-op
                cpu_seconds(argv("apply"), env(build))
            times: dict[tuple[str, str], list[float]] = {}
            order = list(builds)
            for i in range(args.runs):
                turn = order[i % len(order):] + order[:i % len(order)]
                for cmd in COMMANDS:
                    for build in (turn if i % 2 == 0 else turn[::-1]):
                        times.setdefault((cmd, build), []).append(cpu_seconds(argv(cmd), env(build)))
    print(f"CPU time (user+sys) on {args.devices} loop devices, median of {args.runs} interleaved runs; "
          f"load average {start_load} at the start, {load()} at the end")
    missed = []
    for cmd in COMMANDS:
        this = statistics.median(times[(cmd, "this")]) * 1000
        cells = []
        for rev in olders:
            old = statistics.median(times[(cmd, rev)]) * 1000
            ratio = this / old
            cells.append(f"{rev} {old:7.1f} ms  ratio {ratio:.2f}")
            if (cmd in ("plan", "apply", "verify") and rev == args.base and ratio >= TARGET) or \
                    (cmd in ("status", "version") and ratio > NOISE):
                missed.append(f"{LABELS.get(cmd, cmd)} vs {rev}")
        print(f"  {LABELS.get(cmd, cmd):<12} this {this:7.1f} ms   " + "   ".join(cells))
    print(f"targets: plan, no-op apply, verify below {TARGET} of {args.base}; status and --version no slower "
          f"(ratio <= {NOISE}) -> " + ("met" if not missed else f"MISSED ({', '.join(missed)})"))


if __name__ == "__main__":
    main()
