"""CSV of every run, one row per device of the stack (what a spreadsheet or gnuplot wants)."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from tunectl.bench.results import Run

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.system.trust import PendingWrite

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


def prepare_output(path: str, option: str) -> PendingWrite:
    """An output the user named (--csv, --plot), made ready before the sweep: its directory opened, what stands
    at the path checked (a new file, or a regular one replaced whole; never written through a link another user
    owns) and the temp file created, so a path that cannot be written is refused before minutes of work."""
    import errno

    from tunectl.errors import NotPermitted, UsageError
    from tunectl.system import trust

    try:
        # sweep: the temp files of a bench SIGKILLed mid-sweep (`.FILE.` + 12 hex digits, the caller's own) go
        return trust.PendingWrite(Path(os.path.abspath(path)), 0o644, shared_dir=True, sweep=True)
    except trust.Untrusted as e:
        raise UsageError(f"{option}: cannot write {e.message}", hint=e.hint, where=path) from None
    except OSError as e:
        directory = os.path.dirname(os.path.abspath(path))
        if e.errno in (errno.ENOENT, errno.ENOTDIR) and not os.path.isdir(directory):
            raise UsageError(f"{option}: cannot write {path}: {directory} is not a writable directory",
                             hint="name a file in a directory that exists", where=path) from None
        cls = NotPermitted if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else UsageError
        raise cls(f"{option}: cannot write {path}: {e.strerror}", hint="name a file somewhere you can write",
                  where=path) from None


def fill_output(pending: PendingWrite, data: bytes) -> str | None:
    """Fill an output made ready by `prepare_output` and put it in place; the problem in words, or None."""
    from tunectl.system import trust

    try:
        pending.commit(data)
    except (trust.Untrusted, OSError) as e:
        return _problem(str(pending.path), e)
    return None


def write_output(path: str, data: bytes) -> str | None:
    """An output the user named, made ready and filled at once (a new file, or one replaced whole: never written
    through a link another user owns); the problem in words, or None."""
    from tunectl.system import trust

    try:
        pending = trust.PendingWrite(Path(os.path.abspath(path)), 0o644, shared_dir=True)
    except (trust.Untrusted, OSError) as e:
        return _problem(path, e)
    with pending:
        return fill_output(pending, data)


def _problem(path: str, e: Exception) -> str:
    from tunectl.system import trust

    if isinstance(e, trust.Untrusted):
        return f"cannot write {path}: {e.message}; {e.hint}"
    return f"cannot write {path}: {getattr(e, 'strerror', None) or e}"
