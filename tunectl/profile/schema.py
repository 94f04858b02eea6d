"""The profile JSON Schema: loading it, validating against it (with ECMA-262 regexes), and turning
jsonschema's errors into Diagnostics a person can act on.

Pure apart from reading the schema shipped beside the package. jsonschema is imported only when a
validator is first built, and that only for a document `fits_schema` cannot pass: start-up time is
budgeted, and importing jsonschema costs more CPU than the rest of a check.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from tunectl.profile.reader import Diagnostic, Document, PathT, short

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

SCHEMA_PATH = Path(__file__).parent.parent / "schema" / "profile.schema.json"
MAX_DIAGNOSTICS = 100


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=64)
def ecma_regex(pattern: str) -> re.Pattern:
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
def schema_validator() -> Any:
    import jsonschema
    from jsonschema import validators
    from jsonschema.exceptions import ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: dict) -> Any:
        if isinstance(instance, str) and not ecma_regex(patrn).search(instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    base = jsonschema.Draft202012Validator
    # JSON Schema counts 150.0 as an integer; sysfs does not.
    types = base.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool))
    strict = validators.extend(base, validators={"pattern": pattern}, type_checker=types)
    return strict(load_schema())


# What fits_schema reads (any other keyword leaves the decision to jsonschema), and what it skips: annotations.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default"})


class _Undecided(Exception):
    """A keyword or a value fits_schema does not model: jsonschema decides."""


def fits_schema(instance: Any) -> bool:
    """True only when `instance` is valid against the profile schema as `schema_validator` validates it.

    Decided without jsonschema (whose import is most of a first check's CPU: 5-9 s in a TCG guest) for
    the keywords the schema uses, read as jsonschema reads them, on the values a profile's YAML gives:
    mappings with string keys, lists, strings, integers, booleans and null. False for an invalid
    instance and for anything it does not model (a float, a non-string key, a keyword it does not
    read): then jsonschema validates, and its errors are the diagnostics. So a verdict and its
    messages are jsonschema's either way; tests/unit/profile/test_fits_schema.py compares the two.
    """
    try:
        return _fits(instance, load_schema())
    except (_Undecided, RecursionError):
        return False


def _fits(value: Any, schema: Any) -> bool:
    if schema is True or schema is False:
        return schema
    kind = type(value)
    if not isinstance(schema, dict) or kind not in _VALUE_TYPES or kind is dict and any(type(k) is not str for k in value):
        raise _Undecided
    for keyword, rule in schema.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-"):
            continue
        check = _KEYWORDS.get(keyword)
        if check is None:
            raise _Undecided
        if not check(value, rule, schema):
            return False
    return True


def _is_type(value: Any, name: str) -> bool:
    kind = type(value)
    if name in ("integer", "number"):  # no float gets here; integer is redefined to refuse 150.0 as sysfs does
        return kind is int
    expected = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}.get(name)
    if expected is None:
        raise _Undecided
    return kind is expected


def _ref(value: Any, rule: Any, schema: dict) -> bool:
    """A reference into this schema ("#/$defs/match/properties/class"), by mappings' keys only."""
    if not isinstance(rule, str) or not rule.startswith("#/") or "~" in rule or "%" in rule:
        raise _Undecided
    target = load_schema()
    for name in rule[2:].split("/"):
        if not isinstance(target, dict) or name not in target:
            raise _Undecided
        target = target[name]
    return _fits(value, target)


def _enum(value: Any, rule: Any, schema: dict) -> bool:
    if not all(type(choice) is str for choice in rule):
        raise _Undecided
    return type(value) is str and value in rule


def _additional(value: Any, rule: Any, schema: dict) -> bool:
    if type(value) is not dict:
        return True
    if "patternProperties" in schema:
        raise _Undecided
    known = schema.get("properties", {})
    return all(_fits(item, rule) for key, item in value.items() if key not in known)


def _unique(value: Any, rule: Any, schema: dict) -> bool:
    if not rule or type(value) is not list:
        return True
    if not all(type(item) is str for item in value):
        raise _Undecided
    return len(set(value)) == len(value)


def _items(value: Any, rule: Any, schema: dict) -> bool:
    if isinstance(rule, list) or "prefixItems" in schema:
        raise _Undecided
    return type(value) is not list or all(_fits(item, rule) for item in value)


_VALUE_TYPES = frozenset({dict, list, str, int, bool, type(None)})
_KEYWORDS = {
    "type": lambda v, rule, s: any(_is_type(v, t) for t in ([rule] if isinstance(rule, str) else rule)),
    "$ref": _ref,
    "enum": _enum,
    "properties": lambda v, rule, s: type(v) is not dict or all(_fits(v[k], sub) for k, sub in rule.items() if k in v),
    "additionalProperties": _additional,
    "propertyNames": lambda v, rule, s: type(v) is not dict or all(_fits(k, rule) for k in v),
    "required": lambda v, rule, s: type(v) is not dict or all(k in v for k in rule),
    "minProperties": lambda v, rule, s: type(v) is not dict or len(v) >= rule,
    "anyOf": lambda v, rule, s: any(_fits(v, sub) for sub in rule),
    "items": _items,
    "minItems": lambda v, rule, s: type(v) is not list or len(v) >= rule,
    "uniqueItems": _unique,
    "pattern": lambda v, rule, s: type(v) is not str or bool(ecma_regex(rule).search(v)),
    "minLength": lambda v, rule, s: type(v) is not str or len(v) >= rule,
    "maxLength": lambda v, rule, s: type(v) is not str or len(v) <= rule,
    "minimum": lambda v, rule, s: type(v) is not int or v >= rule,
    "maximum": lambda v, rule, s: type(v) is not int or v <= rule,
}


def suggest(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    import difflib  # only for a mistake: loading it costs every profile read

    names = [str(c) for c in choices]
    if not names:  # nothing to suggest (no profile on the search path); difflib refuses n=0
        return ""
    close = difflib.get_close_matches(word, names, n=len(names), cutoff=0.6)
    if not close:
        return ""
    # get_close_matches breaks a tie by the larger string ('nope': 'noop' before 'none'); the choices list the
    # current names before the legacy ones (which only warn), so a tie goes to the one listed first
    best = difflib.SequenceMatcher(None, word, close[0]).ratio()
    tied = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() == best]
    return f"; did you mean {min(tied, key=names.index)!r}?"


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(_type_name(v) for v in value)
    return {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string",
            "boolean": "true/false", "number": "a number", "null": "null"}.get(value, str(value))


def type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "nothing (null)"
    kind = {dict: "a mapping", list: "a list", int: "an integer", str: "a string", float: "a number"}.get(
        type(value), type(value).__name__)
    return kind if isinstance(value, (dict, list)) else f"{kind} ({short(value)})"


def range_text(schema: dict) -> str:
    unit = f" {schema['x-unit']}" if schema.get("x-unit") else ""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        return f"allowed {lo} to {hi}{unit}"
    return f"must be at least {lo}{unit}" if lo is not None else f"must be at most {hi}{unit}"


def _looks_like_range(value: Any, path: PathT) -> bool:
    """A {min, max} mapping given to a setting that takes a name or a choice, not a number."""
    setting = path[-1:] == ("scheduler",) or path[-2:-1] == ("queue",)
    return setting and isinstance(value, dict) and bool(value) and set(value) <= {"min", "max"}


def describe(error: Any, doc: Document) -> list[Diagnostic]:
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind = error.validator
    value = error.instance
    if kind in ("enum", "anyOf", "type") and _looks_like_range(value, path):
        return [doc.diag(path, "a range {min, max} is only for integer settings (read_ahead_kb, iosched knobs, "
                         f"numeric queue attributes); {short(path[-1])} is not a number")]
    if "propertyNames" in error.schema_path:
        title = schema.get("title", "key")
        return [doc.diag(path + (value,), f"{title} name {short(value)} is not allowed: {schema.get('description', '')}",
                         key=True)]
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        names = schema.get("propertyNames", {})
        title = names.get("title", "key")
        out = []
        for key in sorted(set(value) - set(allowed), key=str):
            if "pattern" in names and not ecma_regex(names["pattern"]).search(key):
                continue  # reported by propertyNames
            hint = suggest(key, allowed)
            msg = f"unknown {title} {key!r}{hint}" if hint else f"unknown {title} {key!r}; expected one of: {', '.join(allowed)}"
            out.append(doc.diag(path + (key,), msg, key=True))
        return out
    if kind == "enum":
        choices = [str(c) for c in error.validator_value]
        title = schema.get("title")
        if not isinstance(value, str):
            return [doc.diag(path, f"expected one of: {', '.join(choices)}; got {type_of(value)}")]
        hint = suggest(value, choices)
        if title:
            return [doc.diag(path, f"unknown {title} {short(value)}{hint or '; expected one of: ' + ', '.join(choices)}")]
        return [doc.diag(path, f"{short(value)} is not one of: {', '.join(choices)}{hint}")]
    if kind in ("anyOf", "oneOf") and error.context:
        return _describe_any_of(error, doc, path, schema)
    if kind == "type":
        expected = _type_name(error.validator_value)
        if error.validator_value == "integer" and schema.get("x-unit"):
            expected = f"an integer number of {schema['x-unit']}"
        return [doc.diag(path, f"expected {expected}, got {type_of(value)}")]
    if kind in ("minimum", "maximum"):
        return [doc.diag(path, f"{short(value)} is out of range: {range_text(schema)}")]
    if kind == "pattern":
        title = schema.get("title")
        if title:
            return [doc.diag(path, f"{short(value)} is not a valid {title}: {schema.get('description', '')}".rstrip(": "))]
        return [doc.diag(path, f"{short(value)} has characters or a form not allowed here")]
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
        return describe(best, doc)
    kinds = []
    for e in error.context:
        title = e.schema.get("title") if isinstance(e.schema, dict) else None
        unit = e.schema.get("x-unit") if isinstance(e.schema, dict) else None
        if e.validator == "type" and title == "range":
            name = "a range {min: N, max: M}"
        elif e.validator == "type" and e.validator_value == "integer" and unit:
            name = f"an integer number of {unit}"
        else:
            name = _type_name(e.validator_value) if e.validator == "type" else f"a {title} name" if title else "a name"
        if name not in kinds:
            kinds.append(name)
    # "an integer number of ms or a range" says it all; the description is for the less obvious choices.
    plain = kinds[-1:] == ["a range {min: N, max: M}"] and len(kinds) == 2 and kinds[0].startswith("an integer")
    desc = f" ({schema['description']})" if schema.get("description") and not plain else ""
    return [doc.diag(path, f"expected {' or '.join(kinds)}{desc}, got {type_of(error.instance)}")]
