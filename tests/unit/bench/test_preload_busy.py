"""benchmarks/preload.py --busy N: the load it runs beside itself (#30's c/d under load, the same on any machine).

Each spinner is pinned to one of the last CPUs this process may use, and none outlives the run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.preload import busy_cpus


def _children() -> set[int]:
    """This process's child processes (every thread's)."""
    out: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        out |= {int(p) for p in (task / "children").read_text().split()}
    return out


def _allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[1]
    raise AssertionError(f"no Cpus_allowed_list in /proc/{pid}/status")


def test_no_spinner_without_busy() -> None:
    before = _children()
    with busy_cpus(0) as cpus:
        assert cpus == [] and _children() == before


def test_spinner_pinned_to_the_last_cpu_and_stopped_after() -> None:
    before = _children()
    last = max(os.sched_getaffinity(0))
    with busy_cpus(1) as cpus:
        assert cpus == [last]
        (spinner,) = _children() - before
        deadline = time.monotonic() + 30  # its first statement pins it: until it has run that far
        while _allowed(spinner) != str(last):
            assert time.monotonic() < deadline, f"spinner {spinner} not pinned to CPU {last}: {_allowed(spinner)}"
            time.sleep(0.01)
    assert _children() == before
    assert not Path(f"/proc/{spinner}").exists()  # killed and waited for: no zombie either
