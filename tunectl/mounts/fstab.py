"""A lossless fstab model: parse, change one entry's options, render every other byte as it was.

Pure. The file is kept as bytes per line; an entry remembers the span of each
field, so a fix rewrites only the options field and keeps the columns of the
fields after it (spaces or tabs, as the line had them). Comments, blank lines,
``\\040`` escapes, entries without dump/pass and a missing final newline survive.
A line libmount would not parse is kept byte for byte and reported by number.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tunectl.mounts import options as opts
from tunectl.record import field, record
from tunectl.system.mountinfo import escape, unescape

__all__ = ["escape", "unescape"]  # the field escapes fstab shares with mountinfo

_FIELD = re.compile(rb"[^ \t]+")


@record
class Entry:
    lineno: int  # 1-based
    source: str  # unescaped
    target: str
    fstype: str
    options: list[str]  # unescaped tokens; [] when the field is missing
    spans: list[tuple[int, int]]  # byte spans of the fields in the line (without the newline)
    has_options: bool = True
    extra: list[str] = field(default_factory=list)  # fields past the 6th: libmount ignores them (fstab(5) has 6)

    @property
    def is_swap(self) -> bool:
        return self.fstype == "swap"

    @property
    def is_bind(self) -> bool:
        return any(t in ("bind", "rbind") for t in self.options)


@record
class Line:
    raw: bytes  # the line as read, with its newline (if any)
    entry: Entry | None = None
    problem: str | None = None  # why libmount would not parse it

    @property
    def body(self) -> bytes:
        return self.raw.rstrip(b"\n").rstrip(b"\r") if self.raw.endswith(b"\n") else self.raw

    @property
    def ending(self) -> bytes:
        return self.raw[len(self.body):]


@record
class Fstab:
    lines: list[Line] = field(default_factory=list)

    @property
    def entries(self) -> list[Entry]:
        return [ln.entry for ln in self.lines if ln.entry is not None]

    @property
    def problems(self) -> list[tuple[int, str]]:
        return [(i + 1, ln.problem) for i, ln in enumerate(self.lines) if ln.problem]

    def render(self) -> bytes:
        return b"".join(ln.raw for ln in self.lines)

    def with_options(self, changes: dict[int, list[str]]) -> Fstab:
        """A copy with the options of the entries at `changes` (line number -> tokens) rewritten."""
        lines = list(self.lines)
        for lineno, tokens in changes.items():
            line = lines[lineno - 1]
            if line.entry is None:
                raise ValueError(f"line {lineno} is not an fstab entry")
            raw = rewrite_options(line.body, line.entry, escape_options(tokens)) + line.ending
            lines[lineno - 1] = parse_line(raw, lineno)
        return Fstab(lines)


def escape_options(tokens: list[str]) -> bytes:
    return escape(opts.join(tokens)).encode("utf-8", "surrogateescape")


def _lines(data: bytes) -> Iterator[bytes]:
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            yield data[start:]
            return
        yield data[start:end + 1]
        start = end + 1


def parse(data: bytes) -> Fstab:
    return Fstab([parse_line(raw, i) for i, raw in enumerate(_lines(data), 1)])


def parse_line(raw: bytes, lineno: int) -> Line:
    line = Line(raw)
    body = line.body
    stripped = body.lstrip(b" \t")
    if not stripped or stripped.startswith(b"#"):
        return line
    spans = [(m.start(), m.end()) for m in _FIELD.finditer(body)]
    fields = [body[s:e] for s, e in spans]
    if len(fields) < 3:
        line.problem = "fewer than three fields (source, mountpoint, type)"
        return line
    text = [f.decode("utf-8", "surrogateescape") for f in fields[:4]]  # libmount takes any bytes
    for i, name in ((4, "dump"), (5, "pass")):
        if len(fields) > i and not fields[i].isdigit():
            line.problem = f"{name} field {fields[i].decode('utf-8', 'replace')!r} is not a number"
            return line
    line.entry = Entry(lineno, unescape(text[0]), unescape(text[1]), unescape(text[2]),
                       opts.split(unescape(text[3])) if len(text) > 3 else [], spans[:6], has_options=len(text) > 3,
                       extra=[unescape(f.decode("utf-8", "surrogateescape")) for f in fields[6:]])
    return line


def _column(text: bytes) -> int:
    col = 0
    for c in text:
        col = (col // 8 + 1) * 8 if c == 9 else col + 1
    return col


def rewrite_options(body: bytes, entry: Entry, new: bytes) -> bytes:
    """The line with its options field replaced, the next field kept at its column when it fits."""
    if not entry.has_options:
        s, e = entry.spans[2]
        gap = body[entry.spans[1][1]:s]
        sep = b"\t" if gap.startswith(b"\t") else b" "
        return body[:e] + sep + new + body[e:]
    s, e = entry.spans[3]
    if len(entry.spans) < 5:
        return body[:s] + new + body[e:]
    nxt = entry.spans[4][0]
    gap = body[e:nxt]
    target = _column(body[:nxt])
    head = body[:s] + new
    if len(gap) == 1:  # a single separator: the line was not column-aligned
        return head + gap + body[nxt:]
    if b"\t" in gap:
        fill = b""
        while _column(head + fill) < target:
            fill += b"\t"
        if _column(head + fill) != target or not fill:
            fill = b"\t"
    else:
        width = target - _column(head)
        fill = b" " * width if width >= 1 else b" "
    return head + fill + body[nxt:]
