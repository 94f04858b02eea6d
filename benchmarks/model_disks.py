#!/usr/bin/env python3
"""The model disks' serving cost, and the full calibration sweep in a guest.

Run: .venv/bin/python benchmarks/model_disks.py [--runs 5] [--sweep]

Without --sweep (host only, seconds): the nbdkit python plugin (tests/vm/nbdmodel.py)
against nbdkit's own C `file` plugin on the same image, QD1 reads from this process
(tests/vm/nbdclient.py), medians per request; and the model's own time for the same
reads. The plugin's added cost per request is plugin - file - model (medians); the
ratio (plugin - model) / model says how much the serving path stretches a request.

--sweep (one qemu boot of the 6.1 guest, minutes; takes /tmp/tunectl-vm.lock): the
`models` guest group with `tunectl bench --runs 3 --size 40M` (the partition holds 44 MiB) over read_ahead_kb 4..8192
on the HDD's inner zone; prints per point the guest's median MB/s, the model's MB/s for
the requests the guest sent (replayed with 20 us host cost per request) and the
published SATA sweep, with the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import model_boots  # noqa: E402
from tests.vm import diskmodel, machine  # noqa: E402
from tests.vm.nbdclient import NbdClient  # noqa: E402

SIZES = (4096, 65536, 1 << 20)


def serve(plugin: list[str], sock: Path) -> subprocess.Popen:
    pidfile = sock.with_suffix(".pid")
    pidfile.unlink(missing_ok=True)
    sock.unlink(missing_ok=True)
    proc = subprocess.Popen(["nbdkit", "--foreground", "--exit-with-parent", "-P", str(pidfile), "--unix", str(sock),
                             *plugin], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not pidfile.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"nbdkit {plugin[0]} did not start")
        time.sleep(0.05)
    return proc


def per_request(sock: Path, size: int, n: int) -> float:
    """Median seconds of one QD1 read of `size` bytes, sequential from 0 (the model: cache hits and streaming)."""
    client = NbdClient(str(sock))
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.read(i * size, size)
        times.append(time.perf_counter() - start)
    client.close()
    return statistics.median(times)


def serving_cost(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tunectl-models-") as tmp:
        image = Path(tmp) / "disk.img"
        with open(image, "wb") as f:
            f.truncate(1 << 30)
        print("QD1 sequential reads, medians of", runs, "runs (us per request)")
        print(f"  {'size':>8} {'file (C)':>10} {'python+model':>13} {'model alone':>12} {'added':>8} {'ratio':>6}")
        for size in SIZES:
            n = max(64, (32 << 20) // size // 4)
            file_t, plug_t, model_t = [], [], []
            for _ in range(runs):
                proc = serve(["file", f"file={image}"], Path(tmp) / "f.sock")
                file_t.append(per_request(Path(tmp) / "f.sock", size, n))
                proc.terminate()
                proc.wait()
                proc = serve(["python", str(machine.REPO / "tests" / "vm" / "nbdmodel.py"), f"file={image}",
                              "model=hdd-7200", f"log={tmp}/log"], Path(tmp) / "p.sock")
                plug_t.append(per_request(Path(tmp) / "p.sock", size, n))
                proc.terminate()
                proc.wait()
                reqs = machine.requests(Path(tmp) / "log")
                model_t.append(statistics.median(r.done - r.start for r in reqs))
                os.unlink(Path(tmp) / "log")
            f_us, p_us, m_us = (statistics.median(t) * 1e6 for t in (file_t, plug_t, model_t))
            print(f"  {size // 1024:>6}Ki {f_us:>10.0f} {p_us:>13.0f} {m_us:>12.0f} {p_us - f_us - m_us:>8.0f}"
                  f" {(p_us - m_us) / m_us:>6.2f}")


PUBLISHED = {4: 39.6, 8: 64.2, 16: 88.7, 32: 89.3, 64: 90.4, 128: 90.5, 512: 90.2, 2048: 90.6, 8192: 90.0}


def sweep() -> None:
    with model_boots("models") as vm:
        boot = vm.boot("models", ("sweep",))
        doc = boot.results["hdd_bench"]["doc"]
        start = boot.results["bench_partition"]["start"]
        marks = boot.results["marks"]["hdd_bench"]
        reads = [r for r in machine.requests(boot.shared / "mhdd.requests", marks["before"]["mhdd"],
                                             marks["after"]["mhdd"]) if r.op == "r" and r.offset >= start]
        runs: list[list[machine.Request]] = []
        for r in reads:
            if r.offset == start or not runs:
                runs.append([])
            runs[-1].append(r)
        runs = [run for run in runs if sum(r.length for r in run) >= doc["runs"][0]["bytes"]]
        model: dict[int, list[float]] = {}
        for done, reqs in zip(sorted(doc["runs"], key=lambda r: r["order"]), runs):
            seconds = diskmodel.replay("hdd-7200", 1 << 30, [(r.op, r.offset, r.length) for r in reqs])
            model.setdefault(done["read_ahead_kb"], []).append(sum(r.length for r in reqs) / seconds / diskmodel.MB)
        print(f"bench sweep, inner zone, {doc['points'][0]['runs']} runs per point (boot {boot.seconds:.0f} s)")
        print(f"  {'read_ahead_kb':>13} {'guest MB/s':>10} {'model MB/s':>10} {'published':>9} {'model/pub':>9}")
        for point in sorted(doc["points"], key=lambda p: p["read_ahead_kb"]):
            ra = point["read_ahead_kb"]
            m = statistics.median(model.get(ra, [float("nan")]))
            print(f"  {ra:>13} {point['mb_s']:>10.1f} {m:>10.1f} {PUBLISHED[ra]:>9.1f} {m / PUBLISHED[ra]:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sweep", action="store_true", help="boot the 6.1 guest for the full bench sweep")
    args = parser.parse_args()
    if args.sweep:
        sweep()
    else:
        serving_cost(args.runs)


if __name__ == "__main__":
    main()
