"""Rendering reports for people (tables) and machines (one JSON document)."""

from __future__ import annotations

import json
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


def emit_json(doc: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


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
