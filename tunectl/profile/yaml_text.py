"""A resolved profile as YAML for people (`tunectl profile show`): it validates as a profile; with --explain each
value is followed by the file and line it came from."""

from __future__ import annotations

import json

import yaml

from tunectl.profile.reader import PathT
from tunectl.profile.resolve import Profile, is_setting_value

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any


def _scalar(value: Any) -> str:
    """One YAML scalar (or a flow list of scalars) on one line."""
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if not text.isprintable():
        return json.dumps(text, ensure_ascii=False)  # newlines and the like: one line, double-quoted
    dumped = yaml.safe_dump(text, allow_unicode=True, width=1 << 30).rstrip("\n")
    return dumped[: -len("\n...")] if dumped.endswith("\n...") else dumped


def _is_leaf(value: Any) -> bool:
    if isinstance(value, dict):
        return not value
    if isinstance(value, list):
        return all(not isinstance(v, (dict, list)) for v in value)
    return True


def _lines(value: Any, path: PathT, indent: int) -> list[tuple[str, PathT | None]]:
    """Block YAML lines for a mapping or list, each with the path of the leaf it shows (None for headers)."""
    pad = " " * indent
    out: list[tuple[str, PathT | None]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item and is_setting_value(path + (key,)):  # a range: one value, one line
                flow = ", ".join(f"{k}: {_scalar(v)}" for k, v in item.items())
                out.append((f"{pad}{_scalar(key)}: {{{flow}}}", path + (key,)))
            elif _is_leaf(item):
                out.append((f"{pad}{_scalar(key)}: {_scalar(item)}", path + (key,)))
            else:
                out.append((f"{pad}{_scalar(key)}:", None))
                out.extend(_lines(item, path + (key,), indent + 2))
    else:
        for i, item in enumerate(value):
            if _is_leaf(item):
                out.append((f"{pad}- {_scalar(item)}", path + (i,)))
                continue
            inner = _lines(item, path + (i,), indent + 2)
            first, first_path = inner[0]
            out.append((f"{pad}- {first[indent + 2:]}", first_path))
            out.extend(inner[1:])
    return out


def render_profile_yaml(profile: Profile, explain: bool = False) -> str:
    """The resolved profile as YAML (it validates as a profile); with `explain`, each value's file:line."""
    lines = _lines(profile.data, (), 0)
    if not explain:
        return "\n".join(text for text, _ in lines)
    width = min(max((len(text) for text, _ in lines), default=0), 60)
    rendered = []
    for text, path in lines:
        origin = profile.origin(path) if path is not None else None
        if origin is None:
            rendered.append(text)
        else:
            file, line, _ = origin
            rendered.append(f"{text.ljust(width)}  # {file}:{line}{_range_note(profile.data, path)}")
    return "\n".join(rendered)


def _range_note(data: Any, path: PathT) -> str:
    for key in path:
        data = data[key]
    if not isinstance(data, dict) or not is_setting_value(path):
        return ""
    lo, hi = data.get("min"), data.get("max")
    if hi is None:
        return f" (a floor: raised to {lo} when below, never lowered)"
    if lo is None:
        return f" (a cap: lowered to {hi} when above, never raised)"
    return f" (kept when inside {lo}..{hi}, else moved to the nearest bound)"
