"""CSV of every run, one row per device of the stack (what a spreadsheet or gnuplot wants)."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from tunectl.bench.results import Run

CSV_FIELDS = ("order", "scheduler", "read_ahead_kb", "run", "bytes", "seconds", "mb_s", "device", "reads",
              "reads_merged", "merged_share", "avg_request_kib", "read_await_ms", "time_in_queue_ms",
              "random_iops", "random_mean_latency_us")


def runs_csv(runs: list[Run]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in sorted(runs, key=lambda r: r.order):
        rnd = r.random
        for s in r.stats:
            w.writerow([r.order, r.point.scheduler or "", r.point.read_ahead_kb, r.point.run, r.bytes_read,
                        f"{r.seconds:.6f}", f"{r.mb_s:.2f}", s.device, s.reads, s.reads_merged,
                        f"{s.merged_share:.4f}", f"{s.avg_request_kib:.1f}", f"{s.read_await_ms:.3f}",
                        s.time_in_queue_ms, f"{rnd.iops:.1f}" if rnd else "",
                        f"{rnd.mean_latency_us:.1f}" if rnd else ""])
    return buf.getvalue()


def write_output(path: str, data: bytes) -> str | None:
    """Write an output the user named (a new file, or one replaced whole: never written through a link);
    the problem in words, or None."""
    from tunectl.system import trust

    try:
        trust.atomic_write(Path(os.path.abspath(path)), data, 0o644, shared_dir=True)
    except trust.Untrusted as e:
        return f"cannot write {path}: {e.message}; {e.hint}"
    except OSError as e:
        return f"cannot write {path}: {e.strerror}"
    return None
