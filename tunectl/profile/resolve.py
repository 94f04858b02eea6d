"""Resolving a profile: its ``extends:`` chain merged, checked as a whole, and normalised."""

from __future__ import annotations

import os
from pathlib import Path

from tunectl.errors import ProfileError
from tunectl.profile.checks import check_merged, limit_diagnostics, scheduler_list
from tunectl.profile.library import (
    DEFAULT_PROFILE,
    check_file,
    file_key,
    find_profile,
    list_profiles,
    looks_like_path,
)
from tunectl.profile.reader import Diagnostic, Document, PathT
from tunectl.profile.schema import suggest
from tunectl.record import field, record
from tunectl.system import trust
from tunectl.system.cache import ValidationCache
from tunectl.system.trust import kind
from tunectl.units import parse_bytes, parse_kib

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

    from tunectl.profile.library import ProfileRef


@record
class Profile:
    """A resolved profile: merged data (normalised), the files it came from, where each value came from."""

    name: str
    description: str
    files: list[str]
    data: dict
    origins: dict[PathT, str]  # path of each merged scalar (or empty container) -> file it came from
    warnings: list[Diagnostic] = field(default_factory=list)
    positions: dict[PathT, tuple[int, int]] = field(default_factory=dict)  # path -> line, col in that file
    sha256: str | None = None  # of the first file's text, as read for this profile (what the record of intent keeps)
    # where each of `files` was read (the walk of its read: root's or the user's links followed), in order: what
    # the record of intent names, never the names resolved again later (a link put on the way meanwhile)
    read_from: list[str] = field(default_factory=list)

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


def is_setting_value(path: PathT) -> bool:
    """A setting's value: a range {min, max} there is one value, replaced whole like a number."""
    return path[-1:] == ("read_ahead_kb",) or path[-2:-1] in (("iosched",), ("queue",))


def _merge(base: Any, over: Any, path: PathT, owners: dict, doc: Document) -> Any:
    """Deep merge: mappings merge key by key, everything else (lists and ranges too) replaces."""
    if isinstance(base, dict) and isinstance(over, dict) and not is_setting_value(path):
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
        if isinstance(value, dict) and value and not is_setting_value(path):  # a range is one value
            stack.extend((v, path + (k,)) for k, v in value.items())
        elif isinstance(value, list) and value:
            stack.extend((v, path + (i,)) for i, v in enumerate(value))
        else:
            yield path


def resolve_profile(ref: ProfileRef | None, search_path: list[Path],
                    cache: ValidationCache | None = None) -> tuple[Profile | None, list[Diagnostic | str]]:
    """Resolve `ref` (name or path; None = default) with its `extends:` chain.

    Returns the profile (None on errors) and every diagnostic of every file in
    the chain. A diagnostic is a plain string only when `ref` itself is not found.
    A file found by name on the search path must be root's alone (trusted); an
    ``extends:`` path must stay on the search path or beside the file `ref` names:
    only a file given on the command line is read from anywhere.
    """
    ref = ref or DEFAULT_PROFILE
    chain: list[Document] = []
    seen: list[str] = []
    diags: list[Diagnostic | str] = []
    current: ProfileRef | None = ref
    parent_doc: Document | None = None
    while current is not None:
        relative_to = Path(parent_doc.file).parent if parent_doc else None
        skip = Path(parent_doc.file) if parent_doc and not looks_like_path(current) else None
        path = find_profile(current, search_path, relative_to, skip)
        if path is None:
            diags.append(_not_found(current, search_path, parent_doc, chain))
            break
        try:  # the file read: through root's or the user's links only, never another user's (a 0600 file's keys)
            key = str(trust.resolve_own_links(path))
        except trust.Untrusted as e:
            diags.append(Diagnostic(str(path), 1, 1, "$", f"cannot be used: {e.message}; {e.hint}"))
            break
        except OSError:
            key = file_key(path)
        if parent_doc is not None and looks_like_path(current) and not _within(key, search_path, chain[0].file):
            diags.append(parent_doc.diag(("extends",), f"{str(current)!r}: outside the search path and the directory "
                                         f"of {Path(chain[0].file).name}; only a file named on the command line "
                                         "is read from elsewhere"))
            break
        if key in seen:
            names = [Path(d.file).name for d in chain[seen.index(key):]] + [path.name]
            diags.append(parent_doc.diag(("extends",), f"extends cycle: {' -> '.join(names)}"))
            break
        seen.append(key)
        doc, found = check_file(path, cache, trusted=not looks_like_path(current), resolved=key)
        diags.extend(found)
        chain.append(doc)
        parent_doc = doc
        current = doc.data.get("extends") if isinstance(doc.data, dict) else None
        if not isinstance(current, str) or not current.strip() or "\n" in current:
            current = None
    if not any(not isinstance(d, Diagnostic) or d.severity == "error" for d in diags):
        data, owners = _merge_chain(chain)
        diags.extend(check_merged(data, owners, chain))
        try:
            normalised = normalise(data)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # the checks above should have caught it
            diags.append(chain[0].diag((), f"cannot normalise the profile: {e}"))
        if not any(not isinstance(d, Diagnostic) or d.severity == "error" for d in diags):
            name = data.get("name") or Path(chain[0].file).stem
            profile = Profile(name, data.get("description", ""), [d.file for d in chain], normalised,
                              {p: d.file for p, d in owners.items()},
                              [w for d in reversed(chain) for w in d.warnings],
                              {p: d.where(p, key=True) for p, d in owners.items()}, chain[0].sha256, list(seen))
            return profile, _limit_mixed(diags)
    return None, _limit_mixed(diags)


def _within(key: str, search_path: list[Path], first: str) -> bool:
    """Whether the resolved file `key` lies under a search-path directory or the directory of `first`."""
    return any(Path(key).is_relative_to(file_key(d)) for d in [*search_path, Path(first).parent])


def _limit_mixed(diags: list[Diagnostic | str]) -> list[Diagnostic | str]:
    plain = [d for d in diags if not isinstance(d, Diagnostic)]
    return plain + limit_diagnostics([d for d in diags if isinstance(d, Diagnostic)])


def _not_found(ref: ProfileRef, search_path: list[Path], parent: Document | None,
               chain: list[Document]) -> Diagnostic | str:
    known = [n for n, _ in list_profiles(search_path)]
    hint = "" if looks_like_path(ref) else suggest(str(ref), known)
    if parent is None:
        if looks_like_path(ref):
            return f"{ref}: {_not_a_profile_file(Path(ref))}"
        return f"profile {str(ref)!r} not found on the search path ({', '.join(map(str, search_path))}){hint}"
    names = " -> ".join([Path(d.file).name for d in chain] + [str(ref)])
    what = "no such file" if looks_like_path(ref) else "no such profile on the search path"
    return parent.diag(("extends",), f"{str(ref)!r}: {what} (chain: {names}){hint}")


def _not_a_profile_file(path: Path) -> str:
    """Why a path named on the command line is no profile: it is missing, or what it is instead (a FIFO...)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return "no such profile file"
    return f"{kind(mode)}, not a profile file (a profile is a regular YAML file)"


def _merge_chain(chain: list[Document]) -> tuple[dict, dict[PathT, Document]]:
    """Merge base first; also which document each merged value (or replaced subtree) came from."""
    data: dict = {}
    owners: dict[PathT, Document] = {}
    for doc in reversed(chain):
        body = {k: v for k, v in doc.data.items() if k != "extends"}
        data = _merge(data, body, (), owners, doc)
    return data, owners


def load_profile(ref: ProfileRef | None, search_path: list[Path], cache: ValidationCache | None = None) -> Profile:
    """Resolve `ref` (name or path; None = default); ProfileError with every problem of the chain."""
    profile, diags = resolve_profile(ref, search_path, cache)
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
        out["scheduler"] = scheduler_list(out["scheduler"])
    if "read_ahead_kb" in out:
        ra = out["read_ahead_kb"]
        out["read_ahead_kb"] = {k: parse_kib(v) for k, v in ra.items()} if isinstance(ra, dict) else parse_kib(ra)
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
