"""What a command hands to its output, without the rendering: the report contract and the progress line.

tunectl.report (tables, colour, JSON documents) re-exports `Report`; the two live here so that a boot-time replay,
which defines a report and makes a progress line (disabled under -q or a pipe) before its first read, does not pay
there for the report's tables and colour patterns (#30: every module costs a boot under emulation).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


def printable(text: str) -> bool:
    """Printable ASCII, newlines and tabs: nothing `tunectl.report.escape` would change. Asked before importing it
    (json, re and enum with it: about 7 ms of a boot-time replay's CPU, for lines that are almost always plain)."""
    return text.isascii() and text.replace("\n", "").replace("\t", "").isprintable()


class Report:
    """The one contract of a command's result: `Output.show(report)` prints it and returns its exit code.

    - `to_json()`: the body of the command's --json document (`Output.emit` adds format and version);
    - `exit_code`: a property, worked out from the report's own facts (never assigned after the fact);
    - `print_text(out)`: the text for people, through `out` (tables, sentences, warnings on stderr).
    """

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def exit_code(self) -> int:
        return 0

    def print_text(self, out: Any) -> None:
        raise NotImplementedError


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
