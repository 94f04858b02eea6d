"""benchmarks/preload.py --busy N: the load it runs beside itself (#30's c/d under load, the same on any machine).

Each spinner is pinned to one of the last CPUs this process may use, and none outlives the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
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


def _state(pid: int) -> str:
    """The one-letter state of `pid` ("" once it is gone): a spinner reparented to an init that does not reap is
    left a zombie ("Z"), which no longer spins."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_spinners_end_with_a_benchmark_killed_outright() -> None:
    """SIGKILL (or SIGTERM: no handler, so no `finally`) of the benchmark runs no cleanup: its spinners took a CPU
    each, at 100%, until someone found them."""
    runner = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\n"
                               "from pathlib import Path\n"
                               "from benchmarks.preload import busy_cpus\n"
                               "with busy_cpus(1):\n"
                               "    kids = [p for t in Path('/proc/self/task').iterdir()\n"
                               "            for p in (t / 'children').read_text().split()]\n"
                               "    print(' '.join(kids), flush=True)\n"
                               "    time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3])
    spinners: list[int] = []
    try:
        assert runner.stdout is not None
        spinners = [int(p) for p in runner.stdout.readline().split()]
        assert len(spinners) == 1, spinners
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 30
        while _state(spinners[0]) not in ("", "Z"):
            assert time.monotonic() < deadline, f"spinner {spinners[0]} outlived its benchmark"
            time.sleep(0.01)
    finally:
        runner.kill()
        runner.wait()
        for pid in spinners:  # the test must not leave one behind when the code under test does
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
