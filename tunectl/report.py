"""Rendering reports for people (tables) and machines (one JSON document)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def emit_json(name: str, doc: dict[str, Any], out: TextIO | None = None, one_line: bool = False) -> None:
    """`doc` as the document `tunectl-<name>` (format and version first): indented, or one line (JSON lines)."""
    from tunectl.schema import envelope

    out = out or sys.stdout
    body = envelope(name, doc)
    out.write((json.dumps(body, default=str, separators=(",", ":")) if one_line
               else json.dumps(body, indent=2, sort_keys=False, default=str)) + "\n")


def error_document(code: str, message: str, hint: str | None = None, where: str | None = None,
                   exit_code: int = 2, diagnostics: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The one shape of every failure under --json (usage, profile, device, state, permission, bug)."""
    return {"ok": False, "error": {"code": code, "message": message, "hint": hint, "where": where,
                                   "exit_code": int(exit_code), "diagnostics": list(diagnostics)}}


def error_lines(problems: str | Sequence[Any], hint: str | None = None, label: str = "error") -> list[str]:
    """The one text form of an error: ``tunectl: error: what``, then ``hint: what to do``.

    `problems` is a message, or a profile's diagnostics: one that has a place
    (``file:line:col: $.path: message``) keeps it at the start of its line, where
    editors and compilers put it.
    """
    items = problems.split("\n") if isinstance(problems, str) else list(problems)
    lines = [escape(str(p)) if hasattr(p, "file") else f"tunectl: {label}: {escape(str(p))}" for p in items]
    return lines + ([f"hint: {escape(hint)}"] if hint else [])

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def escape(text: str) -> str:
    """Control characters (from file names, journal values, udev properties) as \\xNN, never raw to a terminal.

    A newline stays: callers print several lines at once; a name holding one is
    escaped by `escape_field`.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def escape_field(text: str) -> str:
    """One table cell or name: every control character escaped, a newline and a tab too."""
    return escape(text).replace("\n", "\\n").replace("\t", "\\t")


class Progress:
    """One self-rewriting line on a terminal: ``label [#####.....] 5/10  12 s left``.

    Disabled (every call a no-op) when output is not a terminal, or under --json or -q.
    """

    WIDTH = 30

    def __init__(self, stream: TextIO, total: int, label: str, enabled: bool = True) -> None:
        import time

        self.stream, self.total, self.label, self.enabled = stream, max(total, 0), label, enabled
        self.done = 0
        self._clock = time.monotonic
        self._started = self._clock()

    def advance(self, n: int = 1, detail: str = "") -> None:
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        if not self.enabled:
            return
        filled = self.WIDTH * self.done // self.total if self.total else 0
        elapsed = self._clock() - self._started
        left = ""
        if self.total and 0 < self.done < self.total:
            left = f"  {elapsed / self.done * (self.total - self.done):.0f} s left"
        line = f"\r{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total}{left}"
        self.stream.write(f"{line} {detail}"[:200].ljust(80) if detail else line.ljust(80))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
