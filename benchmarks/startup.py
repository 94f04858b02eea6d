#!/usr/bin/env python3
"""Start-up: `tunectl --version`, `status --all` and `verify` beside `python3 -c pass`, as ratios to it.

Run: .venv/bin/python benchmarks/startup.py [--runs 20] [--compare DIR]
Whole processes in the installed environment (byte code kept), the commands rotating inside each round;
medians of wall and CPU time (user + system: less sensitive than wall to a shared machine's other work), and
each as a ratio to `python3 -c pass` measured in the same rounds (the interpreter's start is the floor; a TCG
guest of the VM tier is ~40x slower at both, so the ratio is what carries over). The cases:
  new machine  no state directory yet: status and verify on the shipped default profile, whose verdict
               ships with it (tunectl/profile/shipped.py): jsonschema is never imported
  checked      a profile of the user's, checked once (the state directory's validation cache)
`--compare DIR`: the same commands with the tunectl package of the checkout at DIR (a before/after in one run).
Targets: --version within 15 ms of the bare interpreter, verify under 150 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import installed_env, rotated_medians, timed_cpu, tunectl_argv  # noqa: E402

USER_PROFILE = "name: mine\ndescription: a profile of the user's\nclasses:\n  rotational: {read_ahead_kb: 1024}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--compare", metavar="DIR", help="also time the commands with the tunectl checkout at DIR")
    args = ap.parse_args()
    tunectl = tunectl_argv()
    python = str(Path(tunectl[0]).with_name("python")) if "/.venv/" in tunectl[0] else sys.executable
    with tempfile.TemporaryDirectory(prefix="tunectl-startup-") as tmp:
        profile = Path(tmp, "mine.yaml")
        profile.write_text(USER_PROFILE)
        trees = {"": None, **({" [DIR]": os.path.abspath(args.compare)} if args.compare else {})}
        commands: dict[str, tuple[list[str], dict[str, str]]] = {"python -c pass": ([python, "-c", "pass"],
                                                                                      installed_env())}
        for suffix, tree in trees.items():
            extra = {"PYTHONPATH": tree} if tree else {}
            new = installed_env(TUNECTL_STATE_DIR=os.path.join(tmp, f"never{len(extra)}"), **extra)
            checked = installed_env(TUNECTL_STATE_DIR=os.path.join(tmp, f"state{len(extra)}"), **extra)
            os.makedirs(checked["TUNECTL_STATE_DIR"], mode=0o755)
            commands |= {
                f"tunectl --version{suffix}": ([*tunectl, "--version"], new),
                f"status --all, new machine{suffix}": ([*tunectl, "--json", "status", "--all"], new),
                f"verify, new machine{suffix}": ([*tunectl, "--json", "verify"], new),
                f"verify -p mine.yaml, checked{suffix}": ([*tunectl, "--json", "verify", "-p", str(profile)], checked),
            }
        for argv, env in commands.values():  # byte code written, the user's profile checked once: a later start
            timed_cpu(argv, env, ok=(0, 1))
        med = rotated_medians(commands, args.runs, ok=(0, 1))
        assert not os.path.exists(os.path.join(tmp, "never0")), "a read-only command created the state directory"
    base_wall, base_cpu = med["python -c pass"]
    print(f"start-up, medians of {args.runs} rounds, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          f"(interpreter: {python})" + (f"; DIR = {args.compare}" if args.compare else ""))
    for k, (wall, cpu) in med.items():
        print(f"  {k:<40} wall {wall:6.1f} ms  x{wall / base_wall:4.1f}   CPU {cpu:6.1f} ms  x{cpu / base_cpu:4.1f}")
    version, verify = med["tunectl --version"][0], med["verify -p mine.yaml, checked"][0]
    print(f"  --version over the interpreter: {version - base_wall:.1f} ms; target within 15 ms -> "
          f"{'met' if version - base_wall < 15 else 'MISSED'}")
    print(f"  verify (checked profile): {verify:.1f} ms; target under 150 ms -> {'met' if verify < 150 else 'MISSED'}")


if __name__ == "__main__":
    main()
