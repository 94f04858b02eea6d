"""The completion scripts the packages ship (scripts/completions), run by bash: every command, action and option."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.completion_helpers import bash_probe, check_bash, check_zsh, zsh_probe
from tests.harness import REPO

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with its python3-shtab: what debian/rules runs


def generated(shell: str, tmp_path: Path) -> Path:
    has_shtab = subprocess.run([SYSTEM_PYTHON, "-c", "import shtab"], capture_output=True).returncode == 0
    if not has_shtab:
        pytest.skip("python3-shtab is not installed (scripts/bootstrap installs it)")
    done = subprocess.run([SYSTEM_PYTHON, str(REPO / "scripts" / "completions"), shell], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)
    path = tmp_path / f"tunectl.{shell}"
    path.write_text(done.stdout)
    return path


def test_bash_completes_every_command_action_and_option(tmp_path: Path) -> None:
    script = generated("bash", tmp_path)
    done = subprocess.run(["bash", "-c", bash_probe(str(script))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert check_bash(done.stdout) == [], check_bash(done.stdout)
    # the probe can fail: shtab's own script (1.5.5) offers the first choice only
    raw = tmp_path / "raw.bash"
    raw.write_text(subprocess.run([SYSTEM_PYTHON, "-m", "shtab", "--shell=bash", "tunectl.cli.build_parser"],
                                  capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO))).stdout)
    raw_out = subprocess.run(["bash", "-c", bash_probe(str(raw))], capture_output=True, text=True).stdout
    if "current_action_choices_var=\"${current_action}_choices\"" in raw.read_text():
        assert any("'tunectl pl'" in p for p in check_bash(raw_out)), raw_out[:500]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh not installed (the package tier runs it in the clean root)")
def test_zsh_completes_every_command_action_and_option(tmp_path: Path) -> None:
    script = generated("zsh", tmp_path)
    done = subprocess.run(["zsh", "-f", "-c", zsh_probe(str(script))], capture_output=True, text=True)
    assert check_zsh(done.stdout) == [], done.stdout + done.stderr
