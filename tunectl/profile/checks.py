"""Profile checks: the JSON Schema (tunectl.profile.schema) plus what a schema cannot say (knobs of
the chosen scheduler, sizes with units, udev's glob dialect, checks across an ``extends:`` chain).

Pure apart from reading the schema shipped beside the package.
"""

from __future__ import annotations

from tunectl.attributes import LEGACY_SCHEDULERS, SCHEDULERS, schedulers_with_knob
from tunectl.profile.reader import Diagnostic, Document, PathT, short
from tunectl.profile.schema import describe, ecma_regex, fits_schema, load_schema, range_text, schema_validator, type_of
from tunectl.record import replace
from tunectl.units import SIZE_PATTERN, parse_bytes, parse_kib

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

MAX_DIAGNOSTICS = 100


def check_document(doc: Document) -> list[Diagnostic]:
    """Schema and semantic checks of one parsed file (before merging)."""
    if not isinstance(doc.data, dict):
        return [doc.diag((), f"a profile is a mapping of keys (name:, classes:, ...), got {type_of(doc.data)}")]
    diags: list[Diagnostic] = []
    if not fits_schema(doc.data):  # a document it passes has no schema errors: jsonschema is not loaded for it
        for error in schema_validator().iter_errors(doc.data):
            diags.extend(describe(error, doc))
    for path, settings in settings_blocks(doc.data):
        diags.extend(_check_settings(doc, path, settings))
    for path, match in _match_blocks(doc.data):
        diags.extend(_check_match(doc, path, match))
    if "name" not in doc.data:
        diags.extend(check_name_default(doc))
    return limit_diagnostics(diags)


def limit_diagnostics(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Sorted by position within each file (files in the order met), without repeats, at most MAX_DIAGNOSTICS."""
    files = {d.file: i for i, d in reversed(list(enumerate(diags)))}
    out = sorted(set(diags), key=lambda d: (files[d.file], d.line, d.col, d.path, d.message))
    if len(out) > MAX_DIAGNOSTICS:
        cut = out[MAX_DIAGNOSTICS]
        out = out[:MAX_DIAGNOSTICS] + [replace(
            cut, message=f"{len(out) - MAX_DIAGNOSTICS} more problems not shown", severity="error")]
    return out


def settings_blocks(data: dict) -> Any:
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


def scheduler_list(value: Any) -> list[str]:
    names = value if isinstance(value, list) else [value]
    out: list[str] = []
    for n in names:
        n = LEGACY_SCHEDULERS.get(n, n) if isinstance(n, str) else n
        if isinstance(n, str) and n not in out:
            out.append(n)
    return out


def known_schedulers(value: Any) -> list[str]:
    return [n for n in scheduler_list(value) if n in SCHEDULERS]


def knob_message(knob: str, chosen: list[str]) -> str:
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
    for key, size in (ra.items() if isinstance(ra, dict) else [((), ra)]):
        where = path + ("read_ahead_kb",) + ((key,) if key else ())
        if isinstance(size, str) and ecma_regex(SIZE_PATTERN).search(size):
            ra_schema = load_schema()["$defs"]["read_ahead_kb"]["anyOf"][0]
            try:
                kib = parse_kib(size)
                if not ra_schema["minimum"] <= kib <= ra_schema["maximum"]:
                    out.append(doc.diag(where, f"{size!r} is {kib} KiB, out of range: {range_text(ra_schema)}"))
            except ValueError as e:
                out.append(doc.diag(where, str(e)))
    for where, value in _int_settings(path, settings):
        lo, hi = value.get("min"), value.get("max")
        try:
            lo, hi = (parse_kib(lo), parse_kib(hi)) if where[-1] == "read_ahead_kb" else (lo, hi)
        except (ValueError, TypeError):
            continue  # reported above or by the schema
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            out.append(doc.diag(where, f"min ({short(value['min'])}) is larger than max ({short(value['max'])}); "
                                "no value fits the range"))
    knobs = settings.get("iosched")
    chosen = known_schedulers(sched) if sched is not None else []
    if isinstance(knobs, dict) and chosen:
        for knob in knobs:
            owners = schedulers_with_knob(knob)
            if owners and not set(owners) & set(chosen):
                out.append(doc.diag(path + ("iosched", knob), knob_message(knob, chosen), key=True))
    return out


def _int_settings(path: PathT, settings: dict) -> Any:
    """(path, range) of every setting of a block given as a range."""
    if isinstance(settings.get("read_ahead_kb"), dict):
        yield path + ("read_ahead_kb",), settings["read_ahead_kb"]
    for group in ("iosched", "queue"):
        values = settings.get(group)
        if isinstance(values, dict):
            for name, value in values.items():
                if isinstance(value, dict):
                    yield path + (group, name), value


def _check_match(doc: Document, path: PathT, match: dict) -> list[Diagnostic]:
    out = []
    if path[0] == "devices":  # these become udev rules; mounts matches never do
        for key in GLOB_KEYS:
            globs = match.get(key)
            items = list(enumerate(globs)) if isinstance(globs, list) else [((), globs)]
            for i, glob in items:
                where = path + (key,) + ((i,) if i != () else ())
                if _schema_glob_ok(glob):  # otherwise the schema has reported it
                    problem = glob_problem(glob)
                    if problem:
                        out.append(doc.diag(where, problem))
    size = match.get("size")
    if not isinstance(size, dict) or "min" not in size or "max" not in size:
        return out
    try:
        lo, hi = parse_bytes(size["min"]), parse_bytes(size["max"])
    except (ValueError, TypeError, KeyError):
        return out  # reported by the schema
    if lo > hi:
        out.append(doc.diag(path + ("size",), f"min ({short(size['min'])}) is larger than max ({short(size['max'])}); "
                            "no device can match"))
    return out


# --- udev's glob dialect --------------------------------------------------------------------------------------
# Match globs end up in udev rules (tunectl udev render), where udev matches them with fnmatch(3) and
# treats '|' as alternation, '%' and '$' as substitutions; tunectl matches them with fnmatchcase.

GLOB_KEYS = ("kernel", "model", "vendor", "serial", "wwn", "bus")
_GLOB_LITERAL = frozenset(chr(c) for c in range(0x20, 0x7F)) - set('"\\%$,|`[]*?')
_BRACKET_ITEM = frozenset(_GLOB_LITERAL) - set("-!^ ")


def _schema_glob_ok(glob: Any) -> bool:
    schema = load_schema()["$defs"]["glob"]
    return isinstance(glob, str) and len(glob) >= schema["minLength"] and bool(ecma_regex(schema["pattern"]).search(glob))


def glob_problem(glob: str) -> str | None:
    """Why `glob` cannot go into a udev rule meaning what it means to tunectl; None when it can.

    Accepted: printable ASCII literals, ``*``, ``?`` and bracket sets like
    ``[0-9]`` / ``[!a-c]``. Refused: ``|`` (udev alternation), quotes,
    ``%``/``$`` (udev substitutions), backslashes, commas, backquotes, control
    and non-ASCII characters, ``[^...]`` and ``[:class:]`` (fnmatch(3) and
    Python disagree on them), and leading/trailing blanks (discovery strips
    values; udev does not).
    """
    if not glob:
        return "expected a non-empty glob"
    if glob != glob.strip():
        return f"{short(glob)} starts or ends with blanks, which udev and tunectl compare differently; remove them"
    i = 0
    while i < len(glob):
        c = glob[i]
        if c in "*?":
            i += 1
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0 or not _bracket_ok(glob[i + 1:end]):
                return (f"{short(glob)}: the bracket expression at character {i + 1} is not one udev and tunectl read "
                        "alike; use simple sets such as [0-9], [a-f] or [!0-9]")
            i = end + 1
        elif c in _GLOB_LITERAL:
            i += 1
        else:
            return (f"{short(glob)}: character {c!r} cannot be put into a udev rule; globs may use letters, digits, "
                    "punctuation without \" \\ % $ , | ` and *, ?, [...]")
    return None


def _bracket_ok(body: str) -> bool:
    if body.startswith("!"):
        body = body[1:]
    if not body:
        return False
    i = 0
    while i < len(body):
        if body[i] not in _BRACKET_ITEM:
            return False
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i + 2] not in _BRACKET_ITEM or body[i] > body[i + 2]:
                return False
            i += 3
        else:
            i += 1
    return True


def check_name_default(doc: Document) -> list[Diagnostic]:
    """A profile without name: is named after its file; that name must be one a profile may have."""
    from pathlib import PurePath

    stem = PurePath(doc.file).stem
    schema = load_schema()["properties"]["name"]
    if len(stem) <= schema["maxLength"] and ecma_regex(schema["pattern"]).search(stem):
        return []
    return [doc.diag((), f"the file name {stem!r} is not a valid profile name and there is no name: key; "
                     f"add one ({schema['description']})")]


def check_merged(data: dict, owners: dict[PathT, Document], chain: list[Document]) -> list[Diagnostic]:
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
    for path, settings in settings_blocks(data):
        if path[0] != "classes" or not isinstance(settings.get("iosched"), dict) or "scheduler" not in settings:
            continue
        chosen = known_schedulers(settings["scheduler"])
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
                out.append(knob_doc.diag(knob_path, f"{knob_message(knob, chosen)} (inherited from "
                                         f"{sched_doc.file}:{sched_line})", key=True))
            else:
                inherited.append((knob, knob_doc, knob_doc.where(knob_path, key=True)[0]))
        if inherited:
            knobs = ", ".join(f"{k!r} ({d.file}:{line})" for k, d, line in inherited)
            out.append(sched_doc.diag(sched_path, f"inherited iosched knobs {knobs} do not apply to the chosen scheduler "
                                      f"{' or '.join(chosen)}; plan will skip them", severity="warning"))
    return out
