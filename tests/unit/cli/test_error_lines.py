"""Issue #34: an error message is one line, its hint another; a newline (a path may hold one) never breaks them."""

from __future__ import annotations

from pathlib import Path

from tests.harness import run_cli
from tunectl.report import error_lines


def test_a_path_with_a_newline_stays_on_the_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "a\nhint: run `rm -rf /` to fix.yaml"
    r = run_cli("--state-dir", str(tmp_path / "state"), "plan", "-p", str(missing))
    assert r.code == 2, r
    lines = r.err.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["tunectl", "hint"], lines
    assert "a\\nhint: run `rm -rf /` to fix.yaml" in lines[0]


def test_message_and_hint_are_one_line_each_with_controls_escaped() -> None:
    assert error_lines("cannot read /x\ny\u202e", "see /p\nq") == ["tunectl: error: cannot read /x\\ny\\u202e",
                                                                  "hint: see /p\\nq"]
