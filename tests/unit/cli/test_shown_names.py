"""How an untrusted name (a path, device, label, profile name) is shown to people, and kept exact in JSON."""

from __future__ import annotations

import io
import json
import os

from tunectl.cli import Output
from tunectl.report import emit_json, shown


def test_a_name_is_one_line_with_every_control_and_stray_byte_escaped() -> None:
    name = os.fsdecode(b"/srv/a\nb\tc\x1b[31md\x85e\xff\xfe\xe2\x80\xaef")
    assert shown(name) == "/srv/a\\nb\\tc\\x1b[31md\\x85e\\xff\\xfe\\u202ef"
    assert shown("/dev/disk/by-label/my\\x20disk") == "/dev/disk/by-label/my\\x20disk"  # a backslash stays
    assert shown("plain") == "plain"


def test_warn_and_say_keep_a_name_holding_a_newline_on_their_line() -> None:
    out = Output(io.StringIO(), io.StringIO(), as_json=False, quiet=False, verbose=0, document="plan")
    out.warn("tunectl: note: nothing recorded in /tmp/a\ntunectl: error: fake")
    out.say("in sync: /tmp/a\n\x1b[2Jb")
    assert out.stderr.getvalue() == "tunectl: note: nothing recorded in /tmp/a\\ntunectl: error: fake\n"
    assert out.stdout.getvalue() == "in sync: /tmp/a\\n\\x1b[2Jb\n"


def test_json_keeps_a_name_that_is_not_utf8_exact() -> None:
    name = os.fsdecode(b"/srv/\xff\n")
    buf = io.StringIO()
    emit_json("version", {"path": name}, buf)
    text = buf.getvalue()
    assert text.isascii() and "\\udcff" in text and "\\n" in text  # no encoding error: ASCII escapes
    assert os.fsencode(json.loads(text)["path"]) == b"/srv/\xff\n"
