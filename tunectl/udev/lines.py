"""udev's logical lines: a trailing backslash joins the next physical line (read by the lint and by owners).

Its own small module: the owners check reads every rules file on the machine with it, and needs nothing
else of the lint (whose dataclasses cost CPU time at every start).
"""

from __future__ import annotations


def logical_lines(text: str) -> list[tuple[int, str]]:
    """udev's lines: a trailing backslash joins the next one; the number is the first line's (lint and owners)."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(text.split("\n"), 1):
        if not buf:
            start = n
        if raw.endswith("\\"):
            buf += raw[:-1]
            continue
        out.append((start, buf + raw))
        buf = ""
    if buf:
        out.append((start, buf))
    return out
