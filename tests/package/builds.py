"""Helpers of the package tests: running the release tools on a copy of this checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
# Debian's own tools, not a virtualenv's or pyenv's python3: what a Debian build machine has.
DEBIAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 600,
        ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode in ok, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def debian_env(tmp: Path, **extra: str) -> dict[str, str]:
    return dict({"PATH": DEBIAN_PATH, "HOME": str(tmp), "LC_ALL": "C.UTF-8"}, **extra)


def source_tree(dest: Path) -> Path:
    """This checkout's files (tracked and new, not ignored) copied to `dest`, as a release would see them."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO).stdout
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@dataclass
class Dists:
    sdist: Path
    wheel: Path


@dataclass
class Deb:
    deb: Path
    changes: Path


def data_pass(run_in: Callable[[str], subprocess.CompletedProcess], files: Path, inside: str) -> str:
    """What read the files in `tunectl preload replay -v` of three files written to `files` (`inside` in the
    shell `run_in` runs a script in), as the installed tunectl says: "compiled" or "Python"."""
    files.mkdir(parents=True)
    for n in range(3):
        (files / f"f{n}").write_bytes(bytes([n]) * 65536)
    done = run_in(f"tunectl preload collect {inside} -o {inside}.list && tunectl preload replay -v {inside}.list")
    assert re.search(r"3 files, 192 KiB in|sent 3 files \(192 KiB\)", done.stdout), done.stdout + done.stderr
    said = re.findall(r"^method on .*; data pass (\w+)$", done.stdout, re.M)
    assert len(set(said)) == 1, done.stdout
    return said[0]


def ansible_tool(name: str) -> str:
    """An ansible command beside this interpreter (scripts/bootstrap --test installs ansible-core there)."""
    found = Path(sys.executable).with_name(name)
    if not found.exists():
        pytest.skip(f"{name} not installed beside {sys.executable} (scripts/bootstrap --test installs it)")
    return str(found)
