"""Shared helpers for the benchmarks: timing, medians, the tunectl command line."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tunectl_argv() -> list[str]:
    venv = REPO / ".venv" / "bin" / "tunectl"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "tunectl"]


def timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    return time.perf_counter() - start, proc


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
