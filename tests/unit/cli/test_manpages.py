"""The man pages: clean under man --warnings and mandoc -Tlint at 80 columns; tunectl(8) names every command
and every --json format."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.harness import REPO
from tunectl import schema
from tunectl.cli import COMMANDS

PAGES = sorted((REPO / "man").glob("tunectl*.[58]"))


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db is not installed")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_man_renders_without_warnings_in_80_columns(page) -> None:
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "", "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", str(page)], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    wide = [line for line in done.stdout.splitlines() if len(line) > 80]  # examples too: no wrap in a terminal
    assert not wide, wide


@pytest.mark.skipif(shutil.which("mandoc") is None, reason="mandoc is not installed (apt: mandoc)")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_mandoc_lint_is_clean(page) -> None:
    done = subprocess.run(["mandoc", "-Tlint", "-Wwarning", str(page)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def _section(text: str, name: str) -> str:
    return text.split(f"\n.SH {name}\n", 1)[1].split("\n.SH ", 1)[0]


def test_tunectl_8_documents_every_command_with_its_format() -> None:
    page = (REPO / "man" / "tunectl.8").read_text()
    commands = _section(page, "COMMANDS")
    tags = re.findall(r"^\.TP\n\.B (\S+)", commands, re.M)
    assert set(tags) == set(COMMANDS), set(COMMANDS) ^ set(tags)
    plain = commands.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    json_section = _section(page, "JSON OUTPUT").replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    for name in schema.VERSIONS:
        if name not in ("version", "error"):
            short = name.split("-", 1)[1] if "-" in name else name
            assert f"tunectl-{name}" in plain or re.search(rf"(?<![\w-])-{re.escape(short)}\b", plain), name
        assert f"tunectl-{name}" in json_section or f"-{name}" in json_section, name


def test_every_page_is_installed() -> None:
    setup = (REPO / "setup.cfg").read_text()
    for page in PAGES:
        assert f"man/{page.name}" in setup, page.name
