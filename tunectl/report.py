"""Rendering reports for people (tables) and machines (one JSON document)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from functools import cache

# Report's home is tunectl.output, which a boot replay imports alone
from tunectl.output import Report, printable  # noqa: F401

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any, TextIO


class Column:
    """One column of a command's table, as lsblk's column table has it: what `-o` calls it, its header, the help
    `--columns` prints, how it is cut to fit the terminal, and whether it is shown without `-o` or `-v`.

    `cut`: "end" (the end replaced by "…"), "middle" (identities and paths: both ends kept), "first" (cut at the
    end, before any other column is: notes and sources), "never" (the verdicts, the device).
    """

    __slots__ = ("header", "help", "cut", "hidden")

    def __init__(self, header: str, help: str, cut: str = "end", hidden: bool = False) -> None:
        if cut not in ("end", "middle", "first", "never"):
            raise ValueError(f"column {header}: cut {cut!r}")
        self.header, self.help, self.cut, self.hidden = header, help, cut, hidden

    @property
    def name(self) -> str:
        return column_name(self.header)

    def __repr__(self) -> str:
        return f"Column({self.header!r})"


def fit_options(columns: Sequence[Column], verbose: bool = False) -> dict[str, Any]:
    """`table()`'s options from a column table: which columns to cut in the middle, never, first; which to hide."""
    return {"middle": [c.header for c in columns if c.cut == "middle"],
            "keep": [c.header for c in columns if c.cut == "never"],
            "cut_first": [c.header for c in columns if c.cut == "first"],
            "hide": [] if verbose else [c.header for c in columns if c.hidden]}


def column_name(header: str) -> str:
    """The name `-o` takes for a column: ``BEFORE -> AFTER`` -> ``before-after``, ``READ-AHEAD`` -> ``read-ahead``."""
    return re.sub(r"[^a-z0-9]+", "-", header.lower()).strip("-")


# lsblk's names for the columns tables here share with it
LSBLK_NAMES = {"name": "device", "kname": "device", "sched": "scheduler", "ra": "read-ahead", "type": "class",
               "rota": "rotational"}


def find_column(given: str, names: Sequence[str]) -> str | None:
    """The column `-o` means by `given`, in any case, by its name here or lsblk's (NAME, SCHED, RA); None: no such."""
    name = column_name(given)
    if name in names:
        return name
    alias = LSBLK_NAMES.get(name)
    return alias if alias in names else None


def cut(text: str, width: int, middle: bool = False) -> str:
    """`text` in `width` characters: the end (or, for an identity or a path, the middle) replaced by "…"."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if not middle:
        return text[:width - 1] + "…"
    head = (width - 1 + 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


PAINT = {"red": "\x1b[31m", "yellow": "\x1b[33m", "green": "\x1b[32m", "bold": "\x1b[1m"}


def painted(text: str, colour: str | None) -> str:
    """`text` in `colour` (a PAINT name) on a terminal; unchanged when colour is None."""
    return f"{PAINT[colour]}{text}\x1b[0m" if colour else text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int | None = None,
          middle: Iterable[str] = (), keep: Iterable[str] = (), only: Sequence[str] | None = None,
          hide: Iterable[str] = (), paint: bool = False,
          cut_first: Iterable[str] = (), style: str = "table", headings: bool = True) -> str:
    """Rows under headers, two spaces apart, every line at most `width` characters (None: cells whole).

    Too wide, the widest column that may shrink loses a character at a time, down to its header's
    width (or 6); cut cells end in "…", or hold it in the middle for the `middle` columns (identities,
    paths). `keep` columns are never cut. `only` picks columns by name (`column_name`), in its order;
    `hide` leaves columns out unless `only` names them. `paint`: a cell that carries a verdict (a
    `tunectl.status.Verdict`, or `Marked` text) is shown in the verdict's colour; colours do not count
    in the width. Control characters
    in cells are escaped. `cut_first` columns shrink to their floor before any other does (notes, sources).
    `style` "raw" (-r) or "pairs" (-P) prints every cell whole, as lsblk does; `headings` False (-n): no
    header line.
    """
    headers = list(headers)
    rows = list(rows)
    colours = [[getattr(getattr(c, "verdict", c), "colour", None) if paint else None for c in row] for row in rows]
    rows = [["-" if c is None else shown(str(c)) for c in row] for row in rows]
    if only is not None:
        picked = [[column_name(h) for h in headers].index(name) for name in only]
    else:
        hidden = set(hide)
        picked = [i for i, h in enumerate(headers) if h not in hidden]
    headers = [headers[i] for i in picked]
    rows = [[row[i] for i in picked] for row in rows]
    colours = [[row[i] for i in picked] for row in colours]
    if style != "table":
        return _machine_lines(headers, rows, style, headings)
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    if width is not None:
        fixed, floor = set(keep), [min(w, max(len(h), 6)) for h, w in zip(headers, widths)]
        first = set(cut_first)
        while sum(widths) + 2 * (len(widths) - 1) > width:
            movable = [i for i, h in enumerate(headers) if h not in fixed and widths[i] > floor[i]]
            if not movable:
                break
            movable = [i for i in movable if headers[i] in first] or movable
            widths[max(movable, key=lambda i: widths[i])] -= 1
    mid = set(middle)

    def line(cells: Sequence[str], row_colours: Sequence[str | None] = ()) -> str:
        parts = []
        for i, (h, c, w) in enumerate(zip(headers, cells, widths)):
            text = cut(c, w, h in mid)
            colour = row_colours[i] if row_colours else None
            padded = text.ljust(w)
            parts.append(painted(text, colour) + padded[len(text):] if colour else padded)
        out = "  ".join(parts).rstrip()
        return cut(out, width) if width is not None and len(_ANSI.sub("", out)) > width and "\x1b" not in out else out

    return "\n".join(([line(headers)] if headings else []) + [line(row, row_colours) for row, row_colours in zip(rows, colours)])


def _machine_lines(headers: list[str], rows: list[list[str]], style: str, headings: bool) -> str:
    """lsblk's -r (cells one space apart, blanks as \\x20) and -P (KEY="value" pairs, KEY the column name in capitals)."""
    if style == "pairs":
        keys = [column_name(h).upper().replace("-", "_") for h in headers]
        return "\n".join(" ".join(f'{k}="{c.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                                  for k, c in zip(keys, row)) for row in rows)
    lines = ([[column_name(h).upper() for h in headers]] if headings else []) + rows
    return "\n".join(" ".join(c.replace("\\", "\\x5c").replace(" ", "\\x20") or "-" for c in line) for line in lines)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")

def add_table_options(p: Any, columns: Sequence[Column]) -> None:
    """`-o COL,...`, `--columns`, and lsblk's `-n`, `-r`, `-P` for a command whose output is one table of `columns`."""
    names = [c.name for c in columns]
    p.add_argument("-o", "--output", dest="table_output", metavar="COL,...", type=lambda text: text.split(","),
                   help=f"the columns to show, in this order ({','.join(names)}; any case, and lsblk's NAME, SCHED, "
                        "RA where the column exists); --columns lists them")
    p.add_argument("--columns", action="store_true", dest="list_columns",
                   help="list the columns -o takes, each with what it shows, and exit")
    p.add_argument("-n", "--noheadings", action="store_true", dest="table_noheadings", help="no header line")
    style = p.add_mutually_exclusive_group()
    style.add_argument("-r", "--raw", action="store_const", const="raw", dest="table_style",
                       help="cells one space apart, whole, blanks as \\x20 (as lsblk -r)")
    style.add_argument("-P", "--pairs", action="store_const", const="pairs", dest="table_style",
                       help='one line of KEY="value" pairs per row (as lsblk -P)')
    p.set_defaults(table_columns=list(columns))


def column_lines(columns: Sequence[Column]) -> list[str]:
    """What `--columns` prints: a line per column, its `-o` name and what it shows (as `lsblk --list-columns`)."""
    width = max(len(c.name) for c in columns) + 2
    return [f"{c.name:<{width}}{c.help}" + ("  (not shown unless -o names it, or -v)" if c.hidden else "")
            for c in columns]


def unified_diff(old: str, new: str, fromfile: str, tofile: str) -> str:
    """`diff -u` of two texts, as patch(1) reads it ("\\ No newline at end of file" included); "" when equal."""
    import difflib

    if old == new:
        return ""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile, tofile)
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)


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
    items = [problems] if isinstance(problems, str) else list(problems)
    # An error is one line, and so is a diagnostic and a hint: a newline (a path may hold one) is shown as \n,
    # never breaks it, so no line can pass for another error or hint.
    lines = [shown(str(p)) if hasattr(p, "file") else f"tunectl: {label}: {shown(str(p))}" for p in items]
    return lines + ([f"hint: {shown(hint)}"] if hint else [])


@cache
def _control() -> re.Pattern:
    """C0/C1 controls, line separators, the bidi overrides and isolates (U+202E shows a line other than it holds)
    and lone surrogates (a name that is not UTF-8: unprintable, and no terminal should get half of one). Compiled
    at first use (~0.5 ms): most runs print only plain ASCII, which `escape` passes without it."""
    return re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def escape(text: str) -> str:
    """Control characters (from file names, journal values, udev properties) as \\xNN, never raw to a terminal.

    A newline stays: callers print several lines at once; a name holding one is
    escaped by `escape_field`.
    """
    if printable(text):
        return text  # printable ASCII, newlines and tabs: nothing the pattern matches
    return _control().sub(_escaped, text)


def _escaped(m: re.Match) -> str:
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (decoded with surrogateescape): the byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_keeping_colour(text: str, colour: bool) -> str:
    """`escape` for a printed line; with `colour`, the table's own colour codes (and only those) stay."""
    if not colour:
        return escape(text)
    return "".join(part if _OWN_COLOUR.fullmatch(part) else escape(part) for part in _OWN_COLOUR_SPLIT.split(text))


_OWN_COLOUR = re.compile("|".join(map(re.escape, [*PAINT.values(), "\x1b[0m"])))
_OWN_COLOUR_SPLIT = re.compile(f"({_OWN_COLOUR.pattern})")


def shown(text: str) -> str:
    """An untrusted name (a path, device, label, profile name) or one line holding it, for people: the one rendering.

    Every control character escaped as ls -b does for a newline and a tab (\\n, \\t), the others (ESC, other C0
    and C1, Unicode line separators and bidi controls) as \\xNN or \\uNNNN, each byte that is not UTF-8 as \\xNN
    (os.fsdecode's surrogates): the line stays one line and no escape sequence reaches the terminal. A backslash
    stays as it is (unlike ls -b: udev's own names hold \\x20); --json keeps the exact string."""
    return escape(text).replace("\n", "\\n").replace("\t", "\\t")


