"""Shared helpers for the benchmarks: timing, medians, the tunectl command line, boots of the model disks' VM."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tests.vm import machine

REPO = Path(__file__).resolve().parent.parent
VM_LOCK = Path("/tmp/tunectl-vm.lock")  # one qemu guest at a time on this shared machine


def tunectl_argv() -> list[str]:
    venv = REPO / ".venv" / "bin" / "tunectl"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "tunectl"]


def timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    return time.perf_counter() - start, proc


def timed_cpu(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process (CPU: user + system of the child); an exit status not in `ok`
    ends the benchmark with its stderr."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def rotated_medians(commands: dict[str, tuple[list[str], dict[str, str]]], runs: int,
                    ok: tuple[int, ...] = (0,), before: dict[str, Callable[[], object]] | None = None,
                    ) -> dict[str, tuple[float, float]]:
    """Each command once a round for `runs` rounds, the order rotated each round: the median wall and CPU
    milliseconds of each (`timed_cpu`). `before`: what to do, untimed, just before a command (a rollback before
    an apply, so that each apply changes values)."""
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in commands}
    for r in range(runs):
        keys = list(commands)
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            if before and k in before:
                before[k]()
            wall, cpu = timed_cpu(*commands[k], ok=ok)
            times[k][0].append(wall)
            times[k][1].append(cpu)
    return {k: (statistics.median(w) * 1000, statistics.median(c) * 1000) for k, (w, c) in times.items()}


def installed_env(**extra: str) -> dict[str, str]:
    """This environment as an installed tunectl meets it: Python may keep its byte code (with
    PYTHONDONTWRITEBYTECODE set, every start compiles tunectl again and the figure measures the compiler)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | extra


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("this benchmark needs root (real loop devices)")


def row(label: str, ms: float, base: float | None = None) -> str:
    ratio = f"  ratio {ms / base:.2f}" if base else ""
    return f"  {label:<44} {ms:9.1f} ms{ratio}"


def tree_args(doc: str, default: int = 3000, startup: bool = False) -> argparse.Namespace:
    """The command line of a benchmark over a tree on the model HDD: --files N (the full size by default);
    `startup`: also --startup (where the replay's start-up goes in the guest, tests/vm/guest/replaystart.py)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=default, help=f"files in the tree (default {default})")
    if startup:
        ap.add_argument("--startup", action="store_true",
                        help="after the pair, split the replay's start-up in the guest (a few more minutes)")
    return ap.parse_args()


class ModelBoots:
    """Boots of one kernel series on `machine.model_machine()` (the model HDD and SD card served by nbdkit),
    all on the same disk images and shared directory, under the VM lock. Made by `model_boots()`."""

    def __init__(self, kernel: machine.Kernel, where: Path, lock: TextIO) -> None:
        self.kernel = kernel
        self.where = where  # images/ (the disks) and shared/ (results, request logs)
        self._lock = lock

    def boot(self, group: str, args: tuple[str, ...] = (), *, strict: bool = True) -> machine.Boot:
        """Boot guest group `group` (tests/vm/guest/<group>.py) with `args`; the lock is taken if it is not held.
        `strict`: a guest step that failed ends the benchmark with the guest's errors (else the caller reports)."""
        from tests.vm import machine

        fcntl.flock(self._lock, fcntl.LOCK_EX)
        boot = machine.boot(self.kernel, group, machine.model_machine(), self.where / "images",
                            self.where / "shared", args)
        if strict and boot.results.get("errors"):
            sys.exit(f"guest group {group} failed ({self.kernel.release}): {boot.results['errors']}")
        return boot

    def release(self) -> None:
        """Let the other engineers' guests run (while the caller reads the kept logs)."""
        fcntl.flock(self._lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def model_boots(name: str, series: str = "6.1", keep: Path | None = None,
                timeout: int | None = None) -> Iterator[ModelBoots]:
    """A session of boots on the model disks for benchmark `name`: images and logs in a temporary directory
    (or `keep`), removed on the way out; the VM lock from the first boot to the end (or `release()`). It takes the
    lock itself: never run a benchmark that calls it under `flock` of the same lock (it would wait on itself).
    `timeout`: seconds one boot may take when the default (machine.BOOT_TIMEOUT) is too short."""
    from tests.vm import machine

    kernel = {k.series: k for k in machine.kernels()}.get(series)
    if kernel is None:
        sys.exit(f"no {series} guest kernel in {machine.CACHE}: run scripts/bootstrap --test")
    if timeout:
        machine.BOOT_TIMEOUT = max(machine.BOOT_TIMEOUT, timeout)
    with tempfile.TemporaryDirectory(prefix=f"tunectl-{name}-") as tmp, open(VM_LOCK, "a") as lock:
        yield ModelBoots(kernel, keep or Path(tmp), lock)
