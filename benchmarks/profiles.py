#!/usr/bin/env python3
"""Each shipped profile against the kernel's defaults on the model disks (tests/vm/diskmodel.py), with the workload
its description names: the table the README and tunectl-profile(5) show.

Run: .venv/bin/python benchmarks/profiles.py [--series 6.12] [--short]

One qemu boot (minutes; takes /tmp/tunectl-vm.lock) of the `profiles` guest group (tests/vm/guest/evidence.py)
on `model_machine()`: the 7200 rpm HDD model and the A1 SD card model. Each row is one run of the workload
on the profile's values and one on the kernel's (the values the disk booted with), in the same boot; the ratio
is profile / kernel, and "wins" says whether it went the way the metric should (MB/s up, latency down).
Timing is real time on a shared host: compare rows of one boot, not boots.
"""

from __future__ import annotations

import argparse
import fcntl
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.vm import machine  # noqa: E402

DISK = {"hdd": "HDD 7200 rpm model", "sd": "SD A1 model"}
WORKLOAD = {"seq": "cold sequential buffered read", "randmix": "random 4-16 KiB reads + a writer",
            "fgbg": "random 4 KiB reads + a sequential reader"}


def table(results: dict) -> list[dict]:
    """One row per profile run: its value, the kernel's in the same boot, the ratio and whether it wins."""
    runs = results.get("runs") or []
    kernel = {(r["disk"], r["workload"]): r for r in runs if r["profile"] == "kernel"}
    rows = []
    for r in runs:
        base = kernel.get((r["disk"], r["workload"]))
        if r["profile"] == "kernel" or base is None:
            continue
        ratio = r["value"] / base["value"] if base["value"] else float("nan")
        wins = ratio > 1 if r["better"] == "higher" else ratio < 1
        rows.append({"profile": r["profile"], "disk": r["disk"], "workload": r["workload"], "metric": r["metric"],
                     "kernel": base["value"], "value": r["value"], "ratio": ratio, "wins": wins,
                     "changed": [f"{s['attribute']}={s['after']}" for s in (r.get("applied") or {}).get("settings", [])]})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| profile | disk | workload | metric | kernel default | profile | ratio | changed |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['profile']} | {DISK[r['disk']]} | {WORKLOAD[r['workload']]} | {r['metric']} | "
                     f"{r['kernel']:.2f} | {r['value']:.2f} | {r['ratio']:.2f}{'' if r['wins'] else ' (no win)'} | "
                     f"{', '.join(r['changed']) or 'nothing'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", default="6.12", help="guest kernel series (default 6.12)")
    parser.add_argument("--short", action="store_true", help="the VM tier's seconds-long version")
    args = parser.parse_args()
    kernel = {k.series: k for k in machine.kernels()}[args.series]
    with tempfile.TemporaryDirectory(prefix="tunectl-profiles-") as tmp, open("/tmp/tunectl-vm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        boot = machine.boot(kernel, "profiles", machine.model_machine(), Path(tmp) / "images", Path(tmp) / "shared",
                            ("short",) if args.short else ())
    errors = boot.results.get("errors") or {}
    for step, text in errors.items():
        print(f"step {step} failed:\n{text}", file=sys.stderr)
    print(f"guest {boot.results.get('kernel')}, boot {boot.seconds:.0f} s")
    print(markdown(table(boot.results)))


if __name__ == "__main__":
    main()
