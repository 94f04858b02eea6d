"""Profiles: find, parse (with positions), validate, resolve ``extends:``, normalise.

Everything here works on text; reading files is limited to `read_profile_bytes`
and the search path, so the checker is usable on strings in tests.

Every problem is a `Diagnostic` (``file:line:col: $.json.path: message``);
the rules come from the JSON Schema in ``tunectl/schema/profile.schema.json``
plus the few checks a schema cannot express (knobs of the chosen scheduler,
sizes with units, checks across an ``extends:`` chain).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Union

from tunectl.attributes import LEGACY_SCHEDULERS, SCHEDULERS, schedulers_with_knob
from tunectl.errors import ProfileError
from tunectl.units import SIZE_PATTERN, parse_bytes, parse_kib

SCHEMA_PATH = Path(__file__).parent / "schema" / "profile.schema.json"
DEFAULT_PROFILE = "default"
MAX_PROFILE_BYTES = 1 << 20  # profiles are a few KiB; refuse to parse megabytes of YAML
MAX_VALUES = 10_000  # mapping keys, list items and scalars, aliases counted each time they are used
MAX_DEPTH = 32
MAX_DIAGNOSTICS = 100

PathT = tuple  # JSON path as a tuple of keys / indices
ProfileRef = Union[str, Path]  # a name on the search path, or a file (a Path is always a file)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    col: int
    path: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.file}:{self.line}:{self.col}: {self.path}: {prefix}{self.message}"

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "column": self.col, "path": self.path,
                "message": self.message, "severity": self.severity}


def json_path(path: PathT) -> str:
    """('classes', 'ssd', 'queue', '../x') -> ``$.classes.ssd.queue['../x']``."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += "[" + json.dumps(part, ensure_ascii=False).replace("'", "\\'")[1:-1].join("''") + "]"
    return out


def _short(value: Any, limit: int = 60) -> str:
    """repr() for messages, cut to a readable length (a value can be a megabyte long)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int) and abs(value) >= 10**limit:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value) if isinstance(value, (str, int, float)) else repr(value)[: limit + 1]
    return text if len(text) <= limit else text[: limit - 4] + "...'"


@dataclass
class Document:
    """One parsed YAML file: its data and where each value and key stands."""

    file: str
    data: Any
    value_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    key_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)

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

    def to_cache(self) -> dict:
        return {"file": self.file, "data": self.data, "warnings": [dataclasses.asdict(d) for d in self.warnings],
                "value_pos": [[list(p), *lc] for p, lc in self.value_pos.items()],
                "key_pos": [[list(p), *lc] for p, lc in self.key_pos.items()]}

    @classmethod
    def from_cache(cls, file: str, entry: dict) -> Document:
        return cls(file, entry["data"],
                   {tuple(p): (line, col) for p, line, col in entry["value_pos"]},
                   {tuple(p): (line, col) for p, line, col in entry["key_pos"]},
                   [Diagnostic(**dict(d, file=file)) for d in entry["warnings"]])


# ---------------------------------------------------------------------------
# YAML text -> Document
# ---------------------------------------------------------------------------

def _line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def decode_profile(raw: bytes, file: str) -> tuple[str | None, list[Diagnostic]]:
    """File bytes -> text, or a diagnostic for oversize files and bad UTF-8 (parse_yaml finds NUL bytes)."""
    if len(raw) > MAX_PROFILE_BYTES:
        return None, [Diagnostic(file, 1, 1, "$", f"file is larger than {MAX_PROFILE_BYTES} bytes; "
                                 "a profile is a small YAML file")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _line_col(raw[: e.start].decode("utf-8", "replace"), e.start)
        return None, [Diagnostic(file, line, col, "$", f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded")]
    return text.removeprefix("\ufeff"), []


def parse_yaml(text: str, file: str) -> tuple[Document, list[Diagnostic]]:
    """YAML text -> Document; syntax errors, duplicate keys and oversize input become diagnostics.

    `doc.data` is None when nothing usable was read (syntax error, a limit
    exceeded, an empty file); otherwise it holds what was read, and the
    diagnostics are problems that still leave the rest worth checking.

    Built from the parser's event stream rather than yaml.compose: libyaml's
    composer recurses per nesting level and crashes the interpreter on deeply
    nested input, and a composed node graph expands aliases without limit.
    """
    import yaml
    import yaml.reader

    doc = Document(file, None)
    if len(text) > MAX_PROFILE_BYTES:
        return doc, [Diagnostic(file, 1, 1, "$", f"file is larger than {MAX_PROFILE_BYTES} bytes; "
                                "a profile is a small YAML file")]
    bad = re.search("\0", text) or yaml.reader.Reader.NON_PRINTABLE.search(text)
    if bad:
        line, col = _line_col(text, bad.start())
        what = "NUL byte: a profile is YAML text, not binary data" if bad.group() == "\0" else \
            f"YAML does not allow the control character U+{ord(bad.group()):04X} here"
        return doc, [Diagnostic(file, line, col, "$", what)]
    builder = _Builder(doc)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        for event in yaml.parse(text, Loader=loader):
            if builder.feed(event):
                break
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        context = ""
        if e.context and e.context_mark and mark and (e.context_mark.line, e.context_mark.column) != (mark.line, mark.column):
            context = f" ({e.context} started at line {e.context_mark.line + 1}, column {e.context_mark.column + 1})"
        problem = (e.problem or str(e)).strip()
        return doc, [*builder.diags, Diagnostic(file, line, col, "$", f"YAML syntax: {problem}{context}")]
    except (yaml.YAMLError, UnicodeError) as e:
        return doc, [*builder.diags, Diagnostic(file, 1, 1, "$", f"YAML error: {e}")]
    if builder.stopped:
        return doc, builder.diags
    if builder.root is None and not builder.diags:
        return doc, [Diagnostic(file, 1, 1, "$", "the profile is empty (nothing but comments or white space)")]
    doc.data = builder.root
    return doc, builder.diags


_TAG = "tag:yaml.org,2002:"
_MAP_TAGS = (None, "!", _TAG + "map")
_SEQ_TAGS = (None, "!", _TAG + "seq")


@dataclass
class _Frame:
    value: Any  # dict or list being filled; None when the content is thrown away
    path: PathT
    anchor: str | None
    start_count: int
    is_map: bool
    keep: bool
    expect_key: bool = True
    key: str | None = None
    skip_value: bool = False  # a duplicate or unusable key: its value is read and thrown away
    items: int = 0
    is_key: bool = False  # a mapping or list used as a key (an error): not attached as a value


class _Builder:
    """YAML events -> plain Python data with the position of every key and value."""

    def __init__(self, doc: Document) -> None:
        import yaml.resolver

        self.doc = doc
        self.diags: list[Diagnostic] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.count = 0
        self.documents = 0
        self.root: Any = None
        self.stopped = False
        self.resolver = yaml.resolver.Resolver()

    def _error(self, pos: tuple[int, int], path: PathT, message: str) -> None:
        self.diags.append(Diagnostic(self.doc.file, pos[0], pos[1], json_path(path), message))

    def _stop(self, pos: tuple[int, int], path: PathT, message: str) -> bool:
        self._error(pos, path, message)
        self.stopped = True
        return True

    def feed(self, event: Any) -> bool:
        """Take one event; True when parsing should stop (limits exceeded)."""
        import yaml

        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                return self._stop(_pos(event), (), "a profile is one YAML document; a second one starts here")
            return False
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = self.stack.pop()
            if frame.anchor is not None:
                self.open_anchors.discard(frame.anchor)
                self.anchors[frame.anchor] = (frame.value, self.count - frame.start_count)
            if not frame.is_key:
                self._attach(frame.value)
            return False
        if isinstance(event, yaml.NodeEvent):
            return self._node(event)
        return False

    def _node(self, event: Any) -> bool:
        import yaml

        pos = _pos(event)
        parent = self.stack[-1] if self.stack else None
        self.count += 1
        if self.count > MAX_VALUES:
            return self._stop(pos, parent.path if parent else (),
                              f"more than {MAX_VALUES} values (aliases count each time they are used); "
                              "a profile is much smaller")
        if parent is not None and parent.is_map and parent.expect_key:
            return self._key(event, parent, pos)
        if parent is None:
            path, keep = (), True
        elif parent.is_map:
            path, keep = parent.path + (parent.key,), parent.keep and not parent.skip_value
        else:
            path, keep = parent.path + (parent.items,), parent.keep
        if keep:
            self.doc.value_pos[path] = pos
        if isinstance(event, yaml.AliasEvent):
            value = self._alias(event, path, pos)
            self._attach(value if keep else None)
            return self.stopped
        if isinstance(event, yaml.ScalarEvent):
            value = self._scalar(event, path, pos)
            if event.anchor is not None:
                self.anchors[event.anchor] = (value, 1)
            self._attach(value if keep else None)
            return False
        is_map = isinstance(event, yaml.MappingStartEvent)
        if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            self._error(pos, path, f"YAML tag {event.tag} is not supported in a profile")
        if len(self.stack) >= MAX_DEPTH:
            return self._stop(pos, path, f"nested more than {MAX_DEPTH} levels deep; a profile is much flatter")
        container: Any = ({} if is_map else []) if keep else None
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Frame(container, path, event.anchor, self.count, is_map, keep))
        return False

    def _key(self, event: Any, parent: _Frame, pos: tuple[int, int]) -> bool:
        import yaml

        parent.expect_key = False
        parent.skip_value = True
        if not isinstance(event, yaml.ScalarEvent):
            self._error(pos, parent.path, "mapping keys must be plain names, not lists, mappings or aliases")
            if not isinstance(event, yaml.AliasEvent):
                if len(self.stack) >= MAX_DEPTH:
                    return self._stop(pos, parent.path, f"nested more than {MAX_DEPTH} levels deep")
                self.stack.append(_Frame(None, parent.path, None, self.count,
                                         isinstance(event, yaml.MappingStartEvent), keep=False, is_key=True))
            return False
        key = event.value
        if event.implicit[0] and event.tag is None and key == "<<":
            self._error(pos, parent.path, "YAML merge keys (<<) are not supported; use extends: or an alias")
            return False
        if not parent.keep:
            return False
        first = self.doc.key_pos.get(parent.path + (key,))
        if first is not None:
            self._error(pos, parent.path + (key,), f"duplicate key {key!r} (first at line {first[0]}); "
                        "YAML would silently keep only the last one")
            return False
        parent.key = key
        parent.skip_value = False
        self.doc.key_pos[parent.path + (key,)] = pos
        return False

    def _attach(self, value: Any) -> None:
        if not self.stack:
            self.root = value
            return
        parent = self.stack[-1]
        if parent.is_map:
            if parent.keep and not parent.skip_value:
                parent.value[parent.key] = value
            parent.expect_key = True
            parent.skip_value = False
        else:
            if parent.keep:
                parent.value.append(value)
            parent.items += 1

    def _alias(self, event: Any, path: PathT, pos: tuple[int, int]) -> Any:
        name = event.anchor
        if name in self.open_anchors:
            self._error(pos, path, f"alias *{name} refers to a node that contains it")
            return None
        if name not in self.anchors:
            self._error(pos, path, f"alias *{name} has no anchor &{name} before it")
            return None
        value, size = self.anchors[name]
        self.count += size
        if self.count > MAX_VALUES:
            self._stop(pos, path, f"more than {MAX_VALUES} values (aliases count each time they are used); "
                       "a profile is much smaller")
            return None
        return copy.deepcopy(value)

    def _scalar(self, event: Any, path: PathT, pos: tuple[int, int]) -> Any:
        """Scalars as YAML 1.2 reads them: only true/false are booleans; yes/no/on/off and dates stay strings."""
        import yaml.nodes

        text, tag = event.value, event.tag
        if tag is None and event.implicit[0]:
            tag = self.resolver.resolve(yaml.nodes.ScalarNode, text, (True, False))
        elif tag in (None, "!"):
            tag = _TAG + "str"
        kind = tag[len(_TAG):] if tag.startswith(_TAG) else None
        try:
            if kind == "null":
                return None
            if kind == "bool":
                if text.lower() in ("true", "false"):
                    return text.lower() == "true"
                if event.tag is not None:
                    raise ValueError(text)
                return text
            if kind == "int":
                return text if ":" in text else _yaml_int(text)
            if kind == "float":
                return text if ":" in text else _yaml_float(text)
            if kind in ("str", "timestamp", "value", "merge"):
                return text
        except ValueError:
            self._error(pos, path, f"{_short(text)} is not a valid YAML {kind}")
            return None
        self._error(pos, path, f"YAML tag {tag} is not supported in a profile")
        return None


def _pos(event: Any) -> tuple[int, int]:
    return event.start_mark.line + 1, event.start_mark.column + 1


def _yaml_int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    if digits.startswith("0b"):
        return sign * int(digits[2:], 2)
    return sign * int(digits, 10)  # 0755 is 755, as in YAML 1.2; ValueError past 4300 digits


def _yaml_float(text: str) -> float:
    lowered = text.replace("_", "").lower()
    if lowered.lstrip("+-") == ".inf":
        return float("-inf") if lowered.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    return float(lowered)


# ---------------------------------------------------------------------------
# Schema checks
# ---------------------------------------------------------------------------

@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=64)
def _ecma_regex(pattern: str) -> re.Pattern:
    """A JSON Schema pattern (ECMA-262) as a Python regex: ``$`` is the end of the string only.

    Python's ``$`` also matches before a final newline, so ``^[^\\n]*$`` would
    accept "noatime\\n" and let a newline into a udev rule or fstab line.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                if pattern[i:i + 1] == "]":
                    out.append("]")
                    i += 1
                continue
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return re.compile("".join(out))


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema
    from jsonschema import validators
    from jsonschema.exceptions import ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: dict) -> Any:
        if isinstance(instance, str) and not _ecma_regex(patrn).search(instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    base = jsonschema.Draft202012Validator
    # JSON Schema counts 150.0 as an integer; sysfs does not.
    types = base.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool))
    strict = validators.extend(base, validators={"pattern": pattern}, type_checker=types)
    return strict(load_schema())


def _suggest(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(_type_name(v) for v in value)
    return {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string",
            "boolean": "true/false", "number": "a number", "null": "null"}.get(value, str(value))


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "nothing (null)"
    kind = {dict: "a mapping", list: "a list", int: "an integer", str: "a string", float: "a number"}.get(
        type(value), type(value).__name__)
    return kind if isinstance(value, (dict, list)) else f"{kind} ({_short(value)})"


def _range(schema: dict) -> str:
    unit = f" {schema['x-unit']}" if schema.get("x-unit") else ""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        return f"allowed {lo} to {hi}{unit}"
    return f"must be at least {lo}{unit}" if lo is not None else f"must be at most {hi}{unit}"


def _describe(error: Any, doc: Document) -> list[Diagnostic]:
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind = error.validator
    value = error.instance
    if "propertyNames" in error.schema_path:
        title = schema.get("title", "key")
        return [doc.diag(path + (value,), f"{title} name {_short(value)} is not allowed: {schema.get('description', '')}",
                         key=True)]
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        names = schema.get("propertyNames", {})
        title = names.get("title", "key")
        out = []
        for key in sorted(set(value) - set(allowed), key=str):
            if "pattern" in names and not _ecma_regex(names["pattern"]).search(key):
                continue  # reported by propertyNames
            hint = _suggest(key, allowed)
            msg = f"unknown {title} {key!r}{hint}" if hint else f"unknown {title} {key!r}; expected one of: {', '.join(allowed)}"
            out.append(doc.diag(path + (key,), msg, key=True))
        return out
    if kind == "enum":
        choices = [str(c) for c in error.validator_value]
        title = schema.get("title")
        if not isinstance(value, str):
            return [doc.diag(path, f"expected one of: {', '.join(choices)}; got {_type_of(value)}")]
        hint = _suggest(value, choices)
        if title:
            return [doc.diag(path, f"unknown {title} {_short(value)}{hint or '; expected one of: ' + ', '.join(choices)}")]
        return [doc.diag(path, f"{_short(value)} is not one of: {', '.join(choices)}{hint}")]
    if kind in ("anyOf", "oneOf") and error.context:
        return _describe_any_of(error, doc, path, schema)
    if kind == "type":
        expected = _type_name(error.validator_value)
        if error.validator_value == "integer" and schema.get("x-unit"):
            expected = f"an integer number of {schema['x-unit']}"
        return [doc.diag(path, f"expected {expected}, got {_type_of(value)}")]
    if kind in ("minimum", "maximum"):
        return [doc.diag(path, f"{_short(value)} is out of range: {_range(schema)}")]
    if kind == "pattern":
        title = schema.get("title")
        if title:
            return [doc.diag(path, f"{_short(value)} is not a valid {title}: {schema.get('description', '')}".rstrip(": "))]
        return [doc.diag(path, f"{_short(value)} has characters or a form not allowed here")]
    if kind == "required":
        missing = [k for k in error.validator_value if isinstance(value, dict) and k not in value]
        return [doc.diag(path, f"missing required key {missing[0] if missing else error.validator_value[0]!r}")]
    if kind == "minProperties":
        return [doc.diag(path, "must not be empty: give at least one key")]
    if kind == "minItems":
        return [doc.diag(path, "must not be an empty list")]
    if kind == "uniqueItems":
        return [doc.diag(path, "list items must not repeat")]
    if kind == "maxLength":
        return [doc.diag(path, f"too long: at most {error.validator_value} characters")]
    if kind == "minLength":
        return [doc.diag(path, "must not be empty")]
    return [doc.diag(path, error.message)]


def _describe_any_of(error: Any, doc: Document, path: PathT, schema: dict) -> list[Diagnostic]:
    """Report the branch that fits the value best (as check-jsonschema does)."""

    def fits_type(e: Any) -> bool:
        if e.validator == "type":
            return False
        return not (e.validator == "enum" and not isinstance(e.instance, str) and len(e.absolute_path) == len(path))

    fitting = [e for e in error.context if fits_type(e)]
    if fitting:
        best = max(fitting, key=lambda e: len(e.absolute_path))
        return _describe(best, doc)
    kinds = []
    for e in error.context:
        title = e.schema.get("title") if isinstance(e.schema, dict) else None
        name = _type_name(e.validator_value) if e.validator == "type" else f"a {title} name" if title else "a name"
        if name not in kinds:
            kinds.append(name)
    desc = f" ({schema['description']})" if schema.get("description") else ""
    return [doc.diag(path, f"expected {' or '.join(kinds)}{desc}, got {_type_of(error.instance)}")]


def check_document(doc: Document) -> list[Diagnostic]:
    """Schema and semantic checks of one parsed file (before merging)."""
    if not isinstance(doc.data, dict):
        return [doc.diag((), f"a profile is a mapping of keys (name:, classes:, ...), got {_type_of(doc.data)}")]
    diags: list[Diagnostic] = []
    for error in _validator().iter_errors(doc.data):
        diags.extend(_describe(error, doc))
    for path, settings in _settings_blocks(doc.data):
        diags.extend(_check_settings(doc, path, settings))
    for path, match in _match_blocks(doc.data):
        diags.extend(_check_match(doc, path, match))
    return _limit(diags)


def _limit(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Sorted by position within each file (files in the order met), without repeats, at most MAX_DIAGNOSTICS."""
    files = {d.file: i for i, d in reversed(list(enumerate(diags)))}
    out = sorted(set(diags), key=lambda d: (files[d.file], d.line, d.col, d.path, d.message))
    if len(out) > MAX_DIAGNOSTICS:
        cut = out[MAX_DIAGNOSTICS]
        out = out[:MAX_DIAGNOSTICS] + [dataclasses.replace(
            cut, message=f"{len(out) - MAX_DIAGNOSTICS} more problems not shown", severity="error")]
    return out


def _settings_blocks(data: dict) -> Any:
    classes = data.get("classes")
    if isinstance(classes, dict):
        for name, settings in classes.items():
            if isinstance(settings, dict):
                yield ("classes", name), settings
                if isinstance(settings.get("below"), dict):
                    yield ("classes", name, "below"), settings["below"]
    devices = data.get("devices")
    if isinstance(devices, list):
        for i, entry in enumerate(devices):
            if isinstance(entry, dict):
                yield ("devices", i), entry
                if isinstance(entry.get("below"), dict):
                    yield ("devices", i, "below"), entry["below"]


def _match_blocks(data: dict) -> Any:
    for section in ("devices", "mounts"):
        entries = data.get(section)
        if isinstance(entries, list):
            for i, entry in enumerate(entries):
                if isinstance(entry, dict) and isinstance(entry.get("match"), dict):
                    yield (section, i, "match"), entry["match"]


def _scheduler_list(value: Any) -> list[str]:
    names = value if isinstance(value, list) else [value]
    out: list[str] = []
    for n in names:
        n = LEGACY_SCHEDULERS.get(n, n) if isinstance(n, str) else n
        if isinstance(n, str) and n not in out:
            out.append(n)
    return out


def _known_schedulers(value: Any) -> list[str]:
    return [n for n in _scheduler_list(value) if n in SCHEDULERS]


def _knob_message(knob: str, chosen: list[str]) -> str:
    owners = schedulers_with_knob(knob)
    return f"{knob!r} is a knob of {' and '.join(owners)}, not of the chosen scheduler {' or '.join(chosen)}"


def _check_settings(doc: Document, path: PathT, settings: dict) -> list[Diagnostic]:
    out = []
    sched = settings.get("scheduler")
    names = sched if isinstance(sched, list) else [sched]
    for i, n in enumerate(names):
        if isinstance(n, str) and n in LEGACY_SCHEDULERS:
            where = path + ("scheduler",) + ((i,) if isinstance(sched, list) else ())
            out.append(doc.diag(where, f"legacy scheduler {n!r} is mapped to {LEGACY_SCHEDULERS[n]!r} "
                                "on blk-mq kernels; write that instead", severity="warning"))
    ra = settings.get("read_ahead_kb")
    if isinstance(ra, str) and _ecma_regex(SIZE_PATTERN).search(ra):
        ra_schema = load_schema()["$defs"]["read_ahead_kb"]["anyOf"][0]
        try:
            kib = parse_kib(ra)
            if not ra_schema["minimum"] <= kib <= ra_schema["maximum"]:
                out.append(doc.diag(path + ("read_ahead_kb",), f"{ra!r} is {kib} KiB, out of range: {_range(ra_schema)}"))
        except ValueError as e:
            out.append(doc.diag(path + ("read_ahead_kb",), str(e)))
    knobs = settings.get("iosched")
    chosen = _known_schedulers(sched) if sched is not None else []
    if isinstance(knobs, dict) and chosen:
        for knob in knobs:
            owners = schedulers_with_knob(knob)
            if owners and not set(owners) & set(chosen):
                out.append(doc.diag(path + ("iosched", knob), _knob_message(knob, chosen), key=True))
    return out


def _check_match(doc: Document, path: PathT, match: dict) -> list[Diagnostic]:
    size = match.get("size")
    if not isinstance(size, dict) or "min" not in size or "max" not in size:
        return []
    try:
        lo, hi = parse_bytes(size["min"]), parse_bytes(size["max"])
    except (ValueError, TypeError, KeyError):
        return []  # reported by the schema
    if lo > hi:
        return [doc.diag(path + ("size",), f"min ({_short(size['min'])}) is larger than max ({_short(size['max'])}); "
                         "no device can match")]
    return []


# ---------------------------------------------------------------------------
# Profiles on disk: search path, cache, extends chains
# ---------------------------------------------------------------------------

@dataclass
class Profile:
    """A resolved profile: merged data (normalised), the files it came from, where each value came from."""

    name: str
    description: str
    files: list[str]
    data: dict
    origins: dict[PathT, str]  # path of each merged scalar (or empty container) -> file it came from
    warnings: list[Diagnostic] = field(default_factory=list)
    positions: dict[PathT, tuple[int, int]] = field(default_factory=dict)  # path -> line, col in that file

    @property
    def classes(self) -> dict:
        return self.data.get("classes", {})

    @property
    def devices(self) -> list:
        return self.data.get("devices", [])

    @property
    def mounts(self) -> list:
        return self.data.get("mounts", [])

    @property
    def boundary_kib(self) -> int:
        return self.data.get("alignment", {}).get("boundary_kib", 1024)

    def origin(self, path: PathT) -> tuple[str, int, int] | None:
        """(file, line, col) where the value at `path` was set (its first item, for a list)."""
        path = tuple(path)
        found = path if path in self.origins else None
        if found is None:
            inside = [p for p in self.origins if p[: len(path)] == path]
            found = min(inside, key=lambda p: self.positions.get(p, (1, 1))) if inside else None
        if found is None:
            return None
        line, col = self.positions.get(found, (1, 1))
        return self.origins[found], line, col


def shipped_profile_dir() -> Path:
    """Profiles shipped with the package (installed as tunectl/profiles, or ./profiles in a checkout)."""
    installed = Path(__file__).parent / "profiles"
    if installed.is_dir():
        return installed
    return Path(__file__).parent.parent / "profiles"


def default_search_path(env: dict | None = None) -> list[Path]:
    env = os.environ if env is None else env
    extra = [Path(p) for p in env.get("TUNECTL_PROFILE_PATH", "").split(":") if p]
    return extra + [Path("/etc/tunectl/profiles"), shipped_profile_dir()]


def _looks_like_path(ref: ProfileRef) -> bool:
    return isinstance(ref, Path) or "/" in ref or ref.endswith((".yaml", ".yml"))


def find_profile(ref: ProfileRef, search_path: list[Path], relative_to: Path | None = None,
                 skip: Path | None = None) -> Path | None:
    """The file for `ref`: a path (relative to `relative_to`), or a name on the search path.

    `skip` is the file doing the asking: ``extends: balanced`` inside
    /etc/tunectl/profiles/balanced.yaml means the next balanced on the path.
    """
    if _looks_like_path(ref):
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        return p if p.is_file() else None
    skip_key = _file_key(skip) if skip is not None else None
    for d in search_path:
        for ext in (".yaml", ".yml"):
            candidate = d / f"{ref}{ext}"
            if candidate.is_file() and (skip_key is None or _file_key(candidate) != skip_key):
                return candidate
    return None


def _file_key(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return str(path.absolute())


def list_profiles(search_path: list[Path]) -> list[tuple[str, Path]]:
    """(name, file) for every profile on the search path; earlier directories shadow later ones."""
    seen: dict[str, Path] = {}
    for d in search_path:
        if d.is_dir():
            for f in sorted(d.glob("*.y*ml")):
                seen.setdefault(f.stem, f)
    return sorted(seen.items())


def read_profile_bytes(path: Path) -> tuple[bytes | None, list[Diagnostic]]:
    """The file's bytes (at most MAX_PROFILE_BYTES + 1 are read), or a diagnostic."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_PROFILE_BYTES + 1), []
    except OSError as e:
        return None, [Diagnostic(str(path), 1, 1, "$", f"cannot read: {e.strerror or e}")]


@lru_cache(maxsize=1)
def _checker_digest() -> bytes:
    """What the verdict on a text depends on besides the text: this checker, the catalogue, the schema."""
    from tunectl import __version__, attributes, units

    digest = hashlib.sha256(f"{__version__}\0".encode())
    for source in (__file__, attributes.__file__, units.__file__, SCHEMA_PATH):
        with contextlib.suppress(OSError):
            digest.update(Path(source).read_bytes())
    return digest.digest()


def _cache_key(raw: bytes) -> str:
    digest = hashlib.sha256(_checker_digest())
    digest.update(raw)
    return digest.hexdigest()


def check_file(path: Path, cache_dir: Path | None = None) -> tuple[Document, list[Diagnostic]]:
    """Parse and check one file: the Document and every diagnostic (errors and warnings).

    A file that passed the checks before (same bytes, same checker) is not
    checked again: importing jsonschema costs more than the rest of a `verify`
    run. Only successes are cached, under `cache_dir`.
    """
    file = str(path)
    raw, diags = read_profile_bytes(path)
    if raw is None:
        return Document(file, None), diags
    key = _cache_key(raw) if cache_dir is not None else ""
    if cache_dir is not None:
        try:
            cached = json.loads((cache_dir / f"{key}.json").read_text())
            doc = Document.from_cache(file, cached)
            return doc, list(doc.warnings)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    text, diags = decode_profile(raw, file)
    if text is None:
        return Document(file, None), diags
    doc, diags = parse_yaml(text, file)
    if doc.data is not None:
        # Problems the builder found (duplicate keys, bad aliases, ...) and the schema's, without saying twice
        # that a value the builder already rejected has the wrong type.
        seen = {d.path for d in diags}
        diags = _limit(diags + [d for d in check_document(doc) if d.path not in seen])
    doc.warnings = [d for d in diags if d.severity == "warning"]
    if cache_dir is not None and not any(d.severity == "error" for d in diags):
        with contextlib.suppress(OSError, ValueError, TypeError):
            entry = json.dumps(doc.to_cache())
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_dir / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(entry)
            os.replace(tmp, cache_dir / f"{key}.json")
    return doc, diags


def _merge(base: Any, over: Any, path: PathT, owners: dict, doc: Document) -> Any:
    """Deep merge: mappings merge key by key, everything else (lists too) replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v, path + (k,), owners, doc) if k in base else _own(v, path + (k,), owners, doc)
        return out
    for p in _leaves(base, path):
        owners.pop(p, None)
    return _own(over, path, owners, doc)


def _own(value: Any, path: PathT, owners: dict, doc: Document) -> Any:
    for p in _leaves(value, path):
        owners[p] = doc
    return value


def _leaves(value: Any, path: PathT) -> Any:
    """Paths of the scalars (and empty containers) in `value`."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict) and value:
            stack.extend((v, path + (k,)) for k, v in value.items())
        elif isinstance(value, list) and value:
            stack.extend((v, path + (i,)) for i, v in enumerate(value))
        else:
            yield path


def resolve_profile(ref: ProfileRef | None, search_path: list[Path],
                    cache_dir: Path | None = None) -> tuple[Profile | None, list[Diagnostic | str]]:
    """Resolve `ref` (name or path; None = default) with its `extends:` chain.

    Returns the profile (None on errors) and every diagnostic of every file in
    the chain. A diagnostic is a plain string only when `ref` itself is not found.
    """
    ref = ref or DEFAULT_PROFILE
    chain: list[Document] = []
    seen: list[str] = []
    diags: list[Diagnostic | str] = []
    current: ProfileRef | None = ref
    parent_doc: Document | None = None
    while current is not None:
        relative_to = Path(parent_doc.file).parent if parent_doc else None
        skip = Path(parent_doc.file) if parent_doc and not _looks_like_path(current) else None
        path = find_profile(current, search_path, relative_to, skip)
        if path is None:
            diags.append(_not_found(current, search_path, parent_doc, chain))
            break
        key = _file_key(path)
        if key in seen:
            names = [Path(d.file).name for d in chain[seen.index(key):]] + [path.name]
            diags.append(parent_doc.diag(("extends",), f"extends cycle: {' -> '.join(names)}"))
            break
        seen.append(key)
        doc, found = check_file(path, cache_dir)
        diags.extend(found)
        chain.append(doc)
        parent_doc = doc
        current = doc.data.get("extends") if isinstance(doc.data, dict) else None
        if not isinstance(current, str) or not current.strip() or "\n" in current:
            current = None
    if not any(not isinstance(d, Diagnostic) or d.severity == "error" for d in diags):
        data, owners = _merge_chain(chain)
        diags.extend(_check_merged(data, owners, chain))
        try:
            normalised = normalise(data)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # the checks above should have caught it
            diags.append(chain[0].diag((), f"cannot normalise the profile: {e}"))
        if not any(not isinstance(d, Diagnostic) or d.severity == "error" for d in diags):
            name = data.get("name") or Path(chain[0].file).stem
            profile = Profile(name, data.get("description", ""), [d.file for d in chain], normalised,
                              {p: d.file for p, d in owners.items()},
                              [w for d in reversed(chain) for w in d.warnings],
                              {p: d.where(p, key=True) for p, d in owners.items()})
            return profile, _limit_mixed(diags)
    return None, _limit_mixed(diags)


def _limit_mixed(diags: list[Diagnostic | str]) -> list[Diagnostic | str]:
    plain = [d for d in diags if not isinstance(d, Diagnostic)]
    return plain + _limit([d for d in diags if isinstance(d, Diagnostic)])


def _not_found(ref: ProfileRef, search_path: list[Path], parent: Document | None,
               chain: list[Document]) -> Diagnostic | str:
    known = [n for n, _ in list_profiles(search_path)]
    hint = "" if _looks_like_path(ref) else _suggest(str(ref), known)
    if parent is None:
        if _looks_like_path(ref):
            return f"{ref}: no such profile file"
        return f"profile {str(ref)!r} not found on the search path ({', '.join(map(str, search_path))}){hint}"
    names = " -> ".join([Path(d.file).name for d in chain] + [str(ref)])
    what = "no such file" if _looks_like_path(ref) else "no such profile on the search path"
    return parent.diag(("extends",), f"{str(ref)!r}: {what} (chain: {names}){hint}")


def _merge_chain(chain: list[Document]) -> tuple[dict, dict[PathT, Document]]:
    """Merge base first; also which document each merged value (or replaced subtree) came from."""
    data: dict = {}
    owners: dict[PathT, Document] = {}
    for doc in reversed(chain):
        body = {k: v for k, v in doc.data.items() if k != "extends"}
        data = _merge(data, body, (), owners, doc)
    return data, owners


def _check_merged(data: dict, owners: dict[PathT, Document], chain: list[Document]) -> list[Diagnostic]:
    """Checks only the merged profile can fail: iosched knobs from one file, the scheduler from another.

    A knob added under an inherited scheduler it does not belong to is an
    error. A scheduler chosen over inherited knobs is only a warning: a
    deep merge cannot remove keys, and plan skips knobs of other schedulers.
    """

    def owner(path: PathT) -> Document:
        inside = [p for p in owners if p[: len(path)] == path]
        return owners[min(inside, key=lambda p: owners[p].where(p))] if inside else chain[0]

    def rank(doc: Document) -> int:  # 0 = the profile asked for, higher = further up the chain
        return next(i for i, d in enumerate(chain) if d is doc)

    out = []
    for path, settings in _settings_blocks(data):
        if path[0] != "classes" or not isinstance(settings.get("iosched"), dict) or "scheduler" not in settings:
            continue
        chosen = _known_schedulers(settings["scheduler"])
        sched_path = path + ("scheduler",)
        sched_doc = owner(sched_path)
        sched_line = sched_doc.where(sched_path)[0]
        inherited = []
        for knob in settings["iosched"]:
            knob_owners = schedulers_with_knob(knob)
            if not chosen or not knob_owners or set(knob_owners) & set(chosen):
                continue
            knob_path = path + ("iosched", knob)
            knob_doc = owner(knob_path)
            if rank(knob_doc) <= rank(sched_doc):
                out.append(knob_doc.diag(knob_path, f"{_knob_message(knob, chosen)} (inherited from "
                                         f"{sched_doc.file}:{sched_line})", key=True))
            else:
                inherited.append((knob, knob_doc, knob_doc.where(knob_path, key=True)[0]))
        if inherited:
            knobs = ", ".join(f"{k!r} ({d.file}:{line})" for k, d, line in inherited)
            out.append(sched_doc.diag(sched_path, f"inherited iosched knobs {knobs} do not apply to the chosen scheduler "
                                      f"{' or '.join(chosen)}; plan will skip them", severity="warning"))
    return out


def load_profile(ref: ProfileRef | None, search_path: list[Path], cache_dir: Path | None = None) -> Profile:
    """Resolve `ref` (name or path; None = default); ProfileError with every problem of the chain."""
    profile, diags = resolve_profile(ref, search_path, cache_dir)
    if profile is None:
        hint = "fix the lines above; `tunectl profile validate FILE` checks a profile"
        if any(not isinstance(d, Diagnostic) or "no such" in d.message for d in diags):
            names = ", ".join(n for n, _ in list_profiles(search_path)) or "none"
            hint = f"known profiles: {names}; `tunectl profile list` shows them"
        raise ProfileError(diags, hint=hint)
    return profile


def normalise_settings(settings: dict) -> dict:
    out = dict(settings)
    if "scheduler" in out:
        out["scheduler"] = _scheduler_list(out["scheduler"])
    if "read_ahead_kb" in out:
        out["read_ahead_kb"] = parse_kib(out["read_ahead_kb"])
    if "below" in out:
        out["below"] = normalise_settings(out["below"])
    return out


def normalise(data: dict) -> dict:
    """Validated profile data -> canonical form: scheduler lists, KiB ints, byte sizes."""
    out = dict(data)
    out["classes"] = {c: normalise_settings(s or {}) for c, s in (data.get("classes") or {}).items()}
    devices = []
    for entry in data.get("devices") or []:
        entry = normalise_settings(entry)
        entry["match"] = normalise_match(entry["match"])
        devices.append(entry)
    out["devices"] = devices
    out["mounts"] = [dict(m, match=normalise_match(m["match"])) for m in data.get("mounts") or []]
    return out


def normalise_match(match: dict) -> dict:
    out = dict(match)
    for key in ("class", "dm_type", "bus"):
        if isinstance(out.get(key), str):
            out[key] = [out[key]]
    if "size" in out:
        out["size"] = {k: parse_bytes(v) for k, v in out["size"].items()}
    return out

