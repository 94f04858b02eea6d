"""Profiles: find, parse (with positions), validate, resolve ``extends:``, normalise.

Everything here works on text; reading files is limited to `read_profile_file`
and the search path, so the checker is usable on strings in tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunectl.attributes import LEGACY_SCHEDULERS, schedulers_with_knob
from tunectl.errors import ProfileError
from tunectl.units import parse_bytes, parse_kib

SCHEMA_PATH = Path(__file__).parent / "schema" / "profile.schema.json"
DEFAULT_PROFILE = "default"
MAX_PROFILE_BYTES = 1 << 20  # profiles are small; refuse to parse megabytes of YAML

PathT = tuple  # JSON path as a tuple of keys / indices


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
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


@dataclass
class Document:
    """One parsed YAML file: its data and where each value and key stands."""

    file: str
    data: Any
    value_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    key_pos: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)

    def where(self, path: PathT, key: bool = False) -> tuple[int, int]:
        table = self.key_pos if key else self.value_pos
        path = tuple(path)
        while path:
            if path in table:
                return table[path]
            if path in self.value_pos:
                return self.value_pos[path]
            path = path[:-1]
        return self.value_pos.get((), (1, 1))

    def diag(self, path: PathT, message: str, key: bool = False, severity: str = "error") -> Diagnostic:
        line, col = self.where(path, key)
        return Diagnostic(self.file, line, col, json_path(path), message, severity)


def parse_yaml(text: str, file: str) -> tuple[Document, list[Diagnostic]]:
    """YAML text -> Document; syntax errors and duplicate keys become diagnostics."""
    import yaml

    doc = Document(file, None)
    if len(text) > MAX_PROFILE_BYTES:
        return doc, [Diagnostic(file, 1, 1, "$", f"file is {len(text)} bytes; profiles are limited to {MAX_PROFILE_BYTES}")]
    if "\0" in text:
        return doc, [Diagnostic(file, 1, 1, "$", "file contains NUL bytes; not a YAML profile")]
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return doc, [Diagnostic(file, line, col, "$", f"YAML syntax: {e.problem or e}")]
    except yaml.YAMLError as e:
        return doc, [Diagnostic(file, 1, 1, "$", f"YAML error: {e}")]
    if node is None:
        return doc, [Diagnostic(file, 1, 1, "$", "the profile is empty")]
    diags: list[Diagnostic] = []
    constructor = yaml.SafeLoader("")
    doc.data = _construct(node, (), doc, diags, constructor, 0)
    return doc, diags


def _construct(node: Any, path: PathT, doc: Document, diags: list, ctor: Any, depth: int) -> Any:
    import yaml

    doc.value_pos[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if depth > 32:
        diags.append(doc.diag(path, "nesting is too deep for a profile"))
        return None
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                diags.append(doc.diag(path, "mapping keys must be plain names"))
                continue
            key = ctor.construct_object(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                diags.append(doc.diag(path, "YAML merge keys (<<) are not supported; use extends:"))
                continue
            key = str(key) if not isinstance(key, str) else key
            kpos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in out:
                first = doc.key_pos[path + (key,)]
                diags.append(Diagnostic(doc.file, kpos[0], kpos[1], json_path(path + (key,)),
                                        f"duplicate key {key!r} (first at line {first[0]}); YAML would keep only the last"))
                continue
            doc.key_pos[path + (key,)] = kpos
            out[key] = _construct(value_node, path + (key,), doc, diags, ctor, depth + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(n, path + (i,), doc, diags, ctor, depth + 1) for i, n in enumerate(node.value)]
    try:
        return ctor.construct_object(node)
    except yaml.YAMLError as e:
        diags.append(doc.diag(path, f"YAML value: {e}"))
        return None


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema())


def _suggest(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _schema_at(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"]
        schema = root
        for part in ref.lstrip("#/").split("/"):
            schema = schema[part]
    return schema


def _describe(error, doc: Document, root: dict) -> list[Diagnostic]:
    path = tuple(error.absolute_path)
    schema = _schema_at(error.schema, root)
    kind = error.validator
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        out = []
        for key in sorted(set(error.instance) - set(allowed), key=str):
            hint = _suggest(key, allowed)
            msg = f"unknown key {key!r}{hint}" if hint else f"unknown key {key!r}; allowed here: {', '.join(allowed)}"
            out.append(doc.diag(path + (key,), msg, key=True))
        return out
    if kind == "enum":
        choices = [str(c) for c in error.validator_value]
        return [doc.diag(path, f"{error.instance!r} is not one of {', '.join(choices)}{_suggest(error.instance, choices)}")]
    if kind in ("anyOf", "oneOf") and error.context:
        # Report the branch that fits the value's type best (like check-jsonschema).
        best = min(error.context, key=lambda e: (e.validator == "type", -len(e.absolute_path)))
        if best.validator != "type":
            return _describe(best, doc, root)
        kinds = sorted({_type_name(e.validator_value) for e in error.context if e.validator == "type"})
        enum = [e for e in error.context if e.validator == "enum"]
        if enum:
            return _describe(enum[0], doc, root)
        return [doc.diag(path, f"expected {' or '.join(kinds)}, got {_type_of(error.instance)}")]
    if kind == "type":
        return [doc.diag(path, f"expected {_type_name(error.validator_value)}, got {_type_of(error.instance)}")]
    if kind in ("minimum", "maximum"):
        word = "at least" if kind == "minimum" else "at most"
        return [doc.diag(path, f"{error.instance} is out of range: must be {word} {error.validator_value}")]
    if kind == "pattern":
        return [doc.diag(path, f"{error.instance!r} has characters or a form not allowed here")]
    if kind == "required":
        return [doc.diag(path, f"missing required key {error.validator_value[0]!r}" if len(error.validator_value) == 1
                         else error.message)]
    return [doc.diag(path, error.message)]


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(value)
    return {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string",
            "boolean": "true/false"}.get(value, str(value))


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", int: "an integer", str: "a string", float: "a number"}.get(
        type(value), type(value).__name__)


def check_document(doc: Document) -> list[Diagnostic]:
    """Schema and semantic checks of one parsed file (before merging)."""
    if not isinstance(doc.data, dict):
        return [doc.diag((), f"a profile is a mapping of keys, got {_type_of(doc.data)}")]
    root = load_schema()
    diags: list[Diagnostic] = []
    for error in sorted(_validator().iter_errors(doc.data), key=lambda e: [str(p) for p in e.absolute_path]):
        diags.extend(_describe(error, doc, root))
    for path, settings in _settings_blocks(doc.data):
        diags.extend(_check_settings(doc, path, settings))
    return sorted(set(diags), key=lambda d: (d.line, d.col, d.message))


def _settings_blocks(data: dict):
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


def _scheduler_list(value: Any) -> list[str]:
    names = value if isinstance(value, list) else [value]
    return [LEGACY_SCHEDULERS.get(n, n) for n in names if isinstance(n, str)]


def _check_settings(doc: Document, path: PathT, settings: dict) -> list[Diagnostic]:
    out = []
    sched = settings.get("scheduler")
    if sched is not None:
        names = sched if isinstance(sched, list) else [sched]
        for i, n in enumerate(names):
            if n in LEGACY_SCHEDULERS:
                where = path + ("scheduler",) + ((i,) if isinstance(sched, list) else ())
                out.append(doc.diag(where, f"legacy scheduler {n!r} is mapped to {LEGACY_SCHEDULERS[n]!r} "
                                    "on blk-mq kernels; write that instead", severity="warning"))
    ra = settings.get("read_ahead_kb")
    if isinstance(ra, str):
        try:
            kib = parse_kib(ra)
            if kib > 65536:
                out.append(doc.diag(path + ("read_ahead_kb",), f"{ra!r} is {kib} KiB, more than the 65536 KiB allowed"))
        except ValueError as e:
            out.append(doc.diag(path + ("read_ahead_kb",), str(e)))
    knobs = settings.get("iosched")
    if isinstance(knobs, dict):
        chosen = _scheduler_list(sched) if sched is not None else None
        for knob in knobs:
            owners = schedulers_with_knob(knob)
            if owners and chosen is not None and not set(owners) & set(chosen):
                out.append(doc.diag(path + ("iosched", knob), f"{knob!r} is a knob of {', '.join(owners)}, "
                                    f"not of the chosen scheduler {', '.join(chosen)}", key=True))
    return out


@dataclass
class Profile:
    """A resolved profile: merged data (normalised), the files it came from, where each value came from."""

    name: str
    description: str
    files: list[str]
    data: dict
    origins: dict[PathT, str]
    warnings: list[Diagnostic] = field(default_factory=list)

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


def find_profile(ref: str, search_path: list[Path], relative_to: Path | None = None) -> Path | None:
    looks_like_path = "/" in ref or ref.endswith((".yaml", ".yml"))
    if looks_like_path:
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        return p if p.is_file() else None
    for d in search_path:
        for ext in (".yaml", ".yml"):
            candidate = d / f"{ref}{ext}"
            if candidate.is_file():
                return candidate
    return None


def list_profiles(search_path: list[Path]) -> list[tuple[str, Path]]:
    """(name, file) for every profile on the search path; earlier directories shadow later ones."""
    seen: dict[str, Path] = {}
    for d in search_path:
        if d.is_dir():
            for f in sorted(d.glob("*.y*ml")):
                seen.setdefault(f.stem, f)
    return sorted(seen.items())


def read_profile_file(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise ProfileError([Diagnostic(str(path), 1, 1, "$", f"cannot read: {e.strerror}")]) from None
    return raw.decode("utf-8", "replace")


def _cache_key(text: str) -> str:
    from tunectl import __version__

    digest = hashlib.sha256(f"{__version__}\0".encode())
    digest.update(SCHEMA_PATH.read_bytes())
    digest.update(text.encode())
    return digest.hexdigest()


def load_document(path: Path, cache_dir: Path | None = None) -> Document:
    """Parse and check one file; ProfileError listing every problem at once.

    A file that passed the checks before (same bytes, same schema, same
    version) is not checked again: importing jsonschema costs more than the
    rest of a `verify` run. Only successes are cached, under `cache_dir`.
    """
    text = read_profile_file(path)
    key = _cache_key(text) if cache_dir is not None else ""
    if cache_dir is not None:
        try:
            cached = json.loads((cache_dir / f"{key}.json").read_text())
            return Document(str(path), cached["data"], warnings=[Diagnostic(**d) for d in cached["warnings"]])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    doc, diags = parse_yaml(text, str(path))
    if not diags:
        diags = check_document(doc)
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise ProfileError(diags, hint="fix the lines above; `tunectl profile validate FILE` checks a profile")
    doc.warnings = [d for d in diags if d.severity == "warning"]
    if cache_dir is not None:
        entry = {"file": str(path), "data": doc.data, "warnings": [dataclasses.asdict(d) for d in doc.warnings]}
        with contextlib.suppress(OSError):
            cache_dir.mkdir(parents=True, exist_ok=True)
            (cache_dir / f"{key}.json").write_text(json.dumps(entry))
    return doc


def _merge(base: Any, over: Any, path: PathT, origins: dict, file: str) -> Any:
    """Deep merge: mappings merge key by key, everything else (lists too) replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v, path + (k,), origins, file) if k in base else _mark(v, path + (k,), origins, file)
        return out
    return _mark(over, path, origins, file)


def _mark(value: Any, path: PathT, origins: dict, file: str) -> Any:
    for p in [k for k in origins if k[: len(path)] == path]:
        del origins[p]
    origins[path] = file
    return value


def load_profile(ref: str | None, search_path: list[Path], cache_dir: Path | None = None) -> Profile:
    """Resolve `ref` (name or path; None = default) with its `extends:` chain."""
    ref = ref or DEFAULT_PROFILE
    chain: list[Document] = []
    seen: list[str] = []
    relative_to = None
    current: str | None = ref
    ext_doc: Document | None = None
    while current is not None:
        path = find_profile(current, search_path, relative_to)
        if path is None:
            where = f"{ext_doc.diag(('extends',), '').file}:{ext_doc.where(('extends',))[0]}: " if ext_doc else ""
            names = ", ".join(n for n, _ in list_profiles(search_path))
            raise ProfileError([f"{where}profile {current!r} not found"],
                               hint=f"known profiles: {names}; search path: {', '.join(map(str, search_path))}")
        key = str(path.resolve())
        if key in seen:
            cycle = " -> ".join([*(Path(s).name for s in seen[seen.index(key):]), path.name])
            raise ProfileError([f"{ext_doc.file}:{ext_doc.where(('extends',))[0]}:1: $.extends: "
                                f"extends cycle: {cycle}"], hint="remove one extends: from the cycle")
        seen.append(key)
        doc = load_document(path, cache_dir)
        chain.append(doc)
        ext_doc = doc
        current = doc.data.get("extends")
        relative_to = path.parent
    data: dict = {}
    origins: dict = {}
    warnings: list[Diagnostic] = []
    for doc in reversed(chain):
        body = {k: v for k, v in doc.data.items() if k != "extends"}
        data = _merge(data, body, (), origins, doc.file)
        warnings.extend(doc.warnings)
    name = data.get("name") or Path(chain[0].file).stem
    return Profile(name, data.get("description", ""), [d.file for d in chain], normalise(data), origins, warnings)


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

