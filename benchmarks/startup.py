#!/usr/bin/env python3
"""Start-up: `tunectl --version` and `tunectl verify --json` on this machine beside `python3 -c pass`.

Run: .venv/bin/python benchmarks/startup.py [--runs 20]
The commands alternate inside each round; medians are reported, with the
difference (what tunectl itself costs) and the ratio. Targets: --version within
15 ms of the bare interpreter, verify under 150 ms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import installed_env, median_ms, row, timed, tunectl_argv  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    python = tunectl_argv()[0] if tunectl_argv()[0].endswith("python") else sys.executable
    python = str(Path(tunectl_argv()[0]).with_name("python")) if "/.venv/" in tunectl_argv()[0] else python
    with tempfile.TemporaryDirectory() as tmp:
        env = installed_env(TUNECTL_STATE_DIR=tmp)
        verify = tunectl_argv() + ["verify", "--json"]
        timed(verify, env)  # first run fills the validation cache, as any later run on a host finds it
        version = tunectl_argv() + ["--version"]
        bare, ver, tun = [], [], []
        for _ in range(args.runs):
            bare.append(timed([python, "-c", "pass"], env)[0])
            ver.append(timed(version, env)[0])
            t, proc = timed(verify, env)
            assert proc.returncode in (0, 1), proc.stderr
            tun.append(t)
    b, v, t = median_ms(bare), median_ms(ver), median_ms(tun)
    print(f"start-up, median of {args.runs} runs (interpreter: {python})")
    print(row("python3 -c pass", b))
    print(row("tunectl --version", v, b))
    print(row("tunectl verify --json", t, b))
    print(f"  --version over the interpreter: {v - b:.1f} ms; target within 15 ms -> {'met' if v - b < 15 else 'MISSED'}")
    print(f"  verify's own cost: {t - b:.1f} ms; target: verify under 150 ms -> {'met' if t < 150 else 'MISSED'}")


if __name__ == "__main__":
    main()
