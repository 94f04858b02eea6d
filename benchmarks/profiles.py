#!/usr/bin/env python3
"""Each shipped profile against the kernel's defaults on the model disks (tests/vm/diskmodel.py), with the workload
its description names, judged by the disk's account: the table the README and tunectl-profile(5) show.

Run: .venv/bin/python benchmarks/profiles.py [--series 6.12] [--short] [--keep DIR]
     .venv/bin/python benchmarks/profiles.py --from DIR   (the table again from a kept run, no boot; also while
                                                          it runs: the rows done so far)

One qemu boot (15-20 minutes on 2 shared cores; takes /tmp/tunectl-vm.lock) of the `profiles` guest group
(tests/vm/guest/evidence.py) on `model_machine()`: the 7200 rpm HDD model and the A1 SD card model. Each row is
three runs of the workload on the profile's values (applied once, rolled back after) and three on the kernel's
(the values the disk booted with), in the same boot; figures are medians of the three. `--short` is the VM tier's
plan: every shipped profile once, one run a row.

Two columns per figure:
- modelled: the requests each run sent to the model disk (its log), replayed through the model one at a time
  in the order the guest sent them, each 20 us after the previous completed (`diskmodel.replay_served`): what a
  real machine with this disk would take for the same requests. MB/s is the bytes the workload read over that
  time; for the sequential readers, read-ahead past the end of each reader's range is left out (the runs are
  short, 16 MiB a reader, next to an 8 MiB window: a long stream would use those bytes). Latency is the foreground process's: it
  sends its next request when its last one completes, and waits for whatever the guest's scheduler put
  before it (`diskmodel.foreground_latencies`); p99 over the run.
- guest: what fio or dd measured in the guest. Under TCG every request costs the emulated CPU 0.7-9 ms, so
  these figures are mostly the emulation's, not the disk's; they move from boot to boot.
What the model cannot show: time a request spent queued inside the guest beyond the order it was served in
(the replay keeps the guest's order and drops its gaps), nor a scheduler's effect that depends on requests
arriving faster than TCG lets the guest send them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import model_boots  # noqa: E402
from tests.vm import diskmodel, machine  # noqa: E402

DISK = {"hdd": "HDD 7200 rpm model", "sd": "SD A1 model"}
WORKLOAD = {"seq": "one sequential reader, 4 KiB reads", "streams": "4 sequential readers at once",
            "randmix": "random 4-16 KiB reads + a writer", "fgbg": "random 4 KiB reads + a sequential reader",
            "browser": "browser image stack, dd bs=4096"}
LOGS = {"hdd": ("mhdd", "hdd-7200"), "sd": ("msd", "sd-a1")}
EQUAL = 0.05  # medians within 5% are "equal" whatever the spreads


@dataclass(frozen=True)
class Row:
    """One profile's claim on one disk and workload: medians of its runs and of the kernel's runs in the same boot."""

    profile: str
    disk: str
    workload: str
    metric: str
    better: str  # "higher" or "lower"
    kernel: float  # modelled, median
    value: float  # modelled, median
    guest_kernel: float
    guest_value: float
    runs: int  # of the profile (the kernel's as many)
    spread: tuple[float, float]  # the profile's modelled runs, min and max
    kernel_spread: tuple[float, float]
    changed: tuple[str, ...]

    @property
    def ratio(self) -> float:
        return self.value / self.kernel if self.kernel else float("nan")

    @property
    def guest_ratio(self) -> float:
        return self.guest_value / self.guest_kernel if self.guest_kernel else float("nan")

    @property
    def verdict(self) -> str:
        """By the model: "better" or "worse" when every run of the profile is on one side of every run of the
        kernel's values and the medians differ by more than EQUAL; else "equal" (a p99 over seconds of QD1 reads
        moves ~20% from run to run)."""
        if abs(self.ratio - 1) <= EQUAL:
            return "equal"
        if self.spread[0] > self.kernel_spread[1]:
            return "better" if self.better == "higher" else "worse"
        if self.spread[1] < self.kernel_spread[0]:
            return "worse" if self.better == "higher" else "better"
        return "equal"


def modelled(boot: machine.Boot, run: dict) -> float:
    """The run's figure by the disk's account (see the module's docstring)."""
    log, model = LOGS[run["disk"]]
    step = f"{run['profile']}:{run['disk']}:{run['workload']}:{run['rep']}"
    reqs = machine.step_requests(boot, step, log)
    size = next(d.size_mib << 20 for d in machine.model_machine().disks if d.name == log)
    fg = run.get("fg")
    if fg is None:  # MB/s: the bytes the workload read over the time the disk took for the run's reads
        ranges = run.get("ranges") or [(0, size)]
        reads = [(r.op, r.offset, r.length) for r in reqs
                 if r.op == "r" and any(lo <= r.offset < lo + n for lo, n in ranges)]
        seconds = diskmodel.replay(model, size, reads)
        return run["bytes"] / seconds / 1e6 if seconds else float("nan")
    served = diskmodel.replay_served(model, size, [(r.op, r.offset, r.length) for r in reqs])
    mask = [r.op == fg["op"] and fg["lo"] <= r.offset < fg["hi"] for r in reqs]
    return diskmodel.percentile(diskmodel.foreground_latencies(served, mask), 99) * 1000


def table(boot: machine.Boot) -> list[Row]:
    """One row per (profile, disk, workload) the boot ran, against the kernel's runs of the same disk and workload."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for run in boot.results.get("runs") or []:
        groups.setdefault((run["profile"], run["disk"], run["workload"]), []).append(run)
    figures = {key: [modelled(boot, r) for r in runs] for key, runs in groups.items()}
    rows = []
    for (profile, disk, workload), runs in groups.items():
        base = groups.get(("kernel", disk, workload))
        if profile == "kernel" or not base:
            continue
        mine, theirs = figures[(profile, disk, workload)], figures[("kernel", disk, workload)]
        changed = dict.fromkeys(f"{s['attribute']}={s['after']}" for r in runs
                                for s in (r.get("applied") or {}).get("settings", []))
        rows.append(Row(profile, disk, workload, runs[0]["metric"], runs[0]["better"],
                        statistics.median(theirs), statistics.median(mine),
                        statistics.median(r["value"] for r in base), statistics.median(r["value"] for r in runs),
                        len(runs), (min(mine), max(mine)), (min(theirs), max(theirs)), tuple(changed)))
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| profile | disk | workload | metric | kernel default | profile | ratio | guest: kernel | guest: profile "
             "| guest ratio | runs | changed |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.profile} | {DISK[r.disk]} | {WORKLOAD[r.workload]} | {r.metric} | {r.kernel:.1f} | "
                     f"{r.value:.1f} | {r.ratio:.2f} ({r.verdict}) | {r.guest_kernel:.1f} | {r.guest_value:.1f} | "
                     f"{r.guest_ratio:.2f} | {r.runs} | {', '.join(r.changed) or 'nothing'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", default="6.12", help="guest kernel series (default 6.12)")
    parser.add_argument("--short", action="store_true", help="the VM tier's version (tests/vm/test_profiles.py)")
    parser.add_argument("--only", action="append", default=[], metavar="WORKLOAD", choices=sorted(WORKLOAD),
                        help="only the rows of this workload (repeatable): " + ", ".join(sorted(WORKLOAD)))
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the disk images, request logs and results in DIR (default: a temporary directory)")
    parser.add_argument("--from", dest="kept", type=Path, metavar="DIR", help="print the table of a run kept with --keep")
    args = parser.parse_args()
    if args.kept:
        shared = args.kept / "shared"
        results = json.loads((shared / "profiles.json").read_text())
        print(markdown(table(machine.Boot(None, "profiles", results, 0.0, "", shared))))  # type: ignore[arg-type]
        return
    # the full plan: 15-30 min of guest work under TCG
    with model_boots("profiles", args.series, keep=args.keep, timeout=3000) as vm:
        boot = vm.boot("profiles", (("short",) if args.short else ()) + tuple(f"only:{w}" for w in args.only),
                       strict=False)
        vm.release()
        for step, text in (boot.results.get("errors") or {}).items():
            print(f"step {step} failed:\n{text}", file=sys.stderr)
        rows = table(boot)
    print(f"guest {boot.results.get('kernel')}, boot {boot.seconds:.0f} s")
    print(markdown(rows))
    if args.keep:
        (args.keep / "rows.json").write_text(json.dumps([r.__dict__ for r in rows], indent=1))


if __name__ == "__main__":
    main()
