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


def test_escape_passes_plain_ascii_as_it_is_and_escapes_every_control_class() -> None:
    """`escape` returns printable ASCII (with newlines and tabs) untouched without its pattern; anything else goes
    through the pattern: C0, DEL, C1, a line separator, a bidi override and isolate, a byte that was not UTF-8."""
    from tunectl.report import escape

    plain = "".join(map(chr, range(0x20, 0x7F))) + "\n\t"
    assert escape(plain) == plain
    assert escape("a\x00b\x1bc\x7fd\x85e\u2028f\u202eg\u2066h\udcffi\u061cj\n\t") == \
        "a\\x00b\\x1bc\\x7fd\\x85e\\u2028f\\u202eg\\u2066h\\xffi\\u061cj\n\t"
    assert escape("zoé — ü") == "zoé — ü"  # printable text beyond ASCII is not a control character
