"""The positioned YAML reader: profile text -> plain data with the line and column of every key and value.

Every problem is a `Diagnostic` (``file:line:col: $.json.path: message``).
Pure: works on text; nothing here opens a file.
"""

from __future__ import annotations

import json
import re

from tunectl.record import asdict, field, fields, record

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

MAX_PROFILE_BYTES = 1 << 20  # profiles are a few KiB; refuse to parse megabytes of YAML
MAX_VALUES = 10_000  # mapping keys, list items and scalars, aliases counted each time they are used
MAX_DEPTH = 32

PathT = tuple  # JSON path as a tuple of keys / indices

_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_-]*$"  # compiled at first use (re keeps it): most runs never need it


@record(frozen=True)
class Diagnostic:
    """One problem (or warning) in a profile, at file:line:col and the path of the key it is about."""

    file: str
    line: int
    col: int
    path: str
    message: str
    severity: str = "error"

    def __post_init__(self) -> None:
        if not isinstance(self.path, str):  # a tuple path given by mistake still reads as a path
            object.__setattr__(self, "path", json_path(tuple(self.path) if isinstance(self.path, (list, tuple)) else ()))

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.file}:{self.line}:{self.col}: {self.path}: {prefix}{self.message}"

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "column": self.col, "path": self.path,
                "message": self.message, "severity": self.severity}


def json_path(path: PathT) -> str:
    """('classes', 'ssd', 'queue', '../x') -> ``$.classes.ssd.queue['../x']``.

    Total on any input: a part that is neither a key nor an index (a bug upstream)
    shows as ``[?]`` rather than turning a diagnostic into a crash.
    """
    out = "$"
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif not isinstance(part, str):
            out += "[?]"
        elif re.match(_IDENTIFIER, part):
            out += f".{part}"
        else:
            out += "[" + json.dumps(part, ensure_ascii=False).replace("'", "\\'")[1:-1].join("''") + "]"
    return out


def short(value: Any, limit: int = 60) -> str:
    """repr() for messages, cut to a readable length (a value can be a megabyte long)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int) and abs(value) >= 10**limit:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value) if isinstance(value, (str, int, float)) else repr(value)[: limit + 1]
    return text if len(text) <= limit else text[: limit - 4] + "...'"


_DIAGNOSTIC_FIELDS = frozenset(f.name for f in fields(Diagnostic))


@record
class Document:
    """One parsed YAML file: its data and where each value and key stands."""

    file: str
    data: Any
    value_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    key_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)
    sha256: str | None = None  # of the bytes the data was parsed from (tunectl.profile.library.check_file)

    def where(self, path: PathT, key: bool = False) -> tuple[int, int]:
        path = tuple(path)
        if key and path in self.key_pos:
            return self.key_pos[path]
        while path:
            if path in self.value_pos:
                return self.value_pos[path]
            if path in self.key_pos:
                return self.key_pos[path]
            path = path[:-1]
        return self.value_pos.get((), (1, 1))

    def diag(self, path: PathT, message: str, key: bool = False, severity: str = "error") -> Diagnostic:
        line, col = self.where(path, key)
        return Diagnostic(self.file, line, col, json_path(path), message, severity)

    def verdict(self) -> dict:
        """What the validation cache keeps of a text that passed: the checker's warnings, nothing it could tune.
        The data always comes from parsing the text (`library.check_file`)."""
        return {"warnings": [asdict(d) for d in self.warnings]}

    @staticmethod
    def warnings_of(file: str, verdict: dict) -> list[Diagnostic]:
        """The warnings a cached verdict holds (ValueError, KeyError or TypeError for an entry that is not one).

        Each must be a warning as `verdict` wrote it: whole-number line and column, text path and message.
        Anything else (an error, a list for a path, a line in words) would stop the run that sorts or prints it.
        """
        out = []
        for d in verdict["warnings"]:
            if not isinstance(d, dict) or set(d) != _DIAGNOSTIC_FIELDS or d["severity"] != "warning":
                raise ValueError("not a warning")
            if not all(type(d[k]) is int and d[k] > 0 for k in ("line", "col")) or not all(
                    isinstance(d[k], str) for k in ("path", "message")):
                raise ValueError("not a warning")
            out.append(Diagnostic(**dict(d, file=file)))
        return out


# ---------------------------------------------------------------------------
# YAML text -> Document
# ---------------------------------------------------------------------------

def line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def decode_profile(raw: bytes, file: str) -> tuple[str | None, list[Diagnostic]]:
    """File bytes -> text, or a diagnostic for oversize files and bad UTF-8 (yaml_events.parse_yaml finds NUL bytes)."""
    if len(raw) > MAX_PROFILE_BYTES:
        return None, [Diagnostic(file, 1, 1, "$", f"file is larger than {MAX_PROFILE_BYTES} bytes; "
                                 "a profile is a small YAML file")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = line_col(raw[: e.start].decode("utf-8", "replace"), e.start)
        return None, [Diagnostic(file, line, col, "$", f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded")]
    return text.removeprefix("\ufeff"), []
