"""What the repository tracks: nothing of one machine. A worktree's `ln -s /work/main/.venv .venv` was committed twice
(the ignore rule then matched a directory only): the fast-forward onto main replaced main's virtual environment with a
link to itself, and every worktree that shared it stopped. The landing line runs this file before it fast-forwards."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.harness import REPO


def _tracked(*args: str) -> str:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist or a package build)")
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def test_no_virtual_environment_and_no_link_out_of_the_tree_is_tracked() -> None:
    venvs = _tracked("ls-files", "--", ".venv", ".venv-collection").split()
    assert venvs == [], f"{venvs} tracked: `git rm --cached {' '.join(venvs)}` and commit (never the local venv)"
    links = [line.split("\t", 1)[1] for line in _tracked("ls-files", "-s").splitlines() if line.startswith("120000 ")]
    outside = [f"{link} -> {(REPO / link).readlink()}" for link in links
               if (REPO / link).is_symlink() and str((REPO / link).readlink()).startswith("/")]
    assert outside == [], f"links to absolute paths tracked (a machine's own paths): {outside}"
