"""`tunectl profile list|show|validate|import-tuned`: arguments, the calls, and the rendering."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import yaml

from tunectl.errors import ExitCode
from tunectl.profile.library import ProfileRef, list_profiles, read_profile_bytes
from tunectl.profile.reader import PathT, decode_profile, parse_yaml
from tunectl.profile.reports import FileVerdict, ProfileListReport, ProfileShowReport, ValidateReport
from tunectl.profile.resolve import Profile, is_setting_value, load_profile, resolve_profile
from tunectl.report import error_lines

EXAMPLES = ("examples:\n  tunectl profile list\n  tunectl profile show virtual-guest --explain\n"
            "  tunectl profile validate /etc/tunectl/profiles/*.yaml\n  tunectl profile import-tuned throughput-performance")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EXAMPLES
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION")
    psub.required = True
    add_action(psub, "list", "profiles on the search path with their description")
    pp = add_action(psub, "show", "print the resolved (merged) profile as YAML")
    pp.add_argument("name", nargs="?", help="profile name or file (default: 'default')")
    pp.add_argument("--explain", action="store_true", help="say which file each value came from")
    pp = add_action(psub, "validate", "check profile files; one file:line:col line per problem")
    pp.add_argument("files", nargs="+", metavar="FILE", help="profile files or names")
    pp = add_action(psub, "import-tuned", "convert a tuned profile (tuned.conf) to a tunectl profile on stdout")
    pp.add_argument("ref", metavar="PATH|NAME", help="tuned profile directory, tuned.conf or profile name")
    pp.add_argument("--tuned-dir", action="append", metavar="DIR", dest="tuned_dirs",
                    help="where tuned profiles named by NAME (and by their include=) are looked up; repeat for "
                         "several, first wins (default: /etc/tuned, then /usr/lib/tuned)")


def run(ctx, args, out) -> int:
    actions = {"list": _list, "show": _show, "validate": _validate, "import-tuned": _import_tuned}
    return actions[args.profile_command](ctx, args, out)


def _description(path: Path) -> str:
    """The profile's description; for one tunectl would refuse by name (not root's alone), why."""
    from tunectl.system import trust

    try:
        fd, _ = trust.open_regular(os.path.realpath(path), trusted=True)
        os.close(fd)
    except trust.Untrusted as e:
        return f"(refused: {e.message})"
    except OSError:
        return "(unreadable)"
    raw, problems = read_profile_bytes(path)
    text, problems = decode_profile(raw, str(path)) if raw is not None else (None, problems)
    if text is None:
        return "(unreadable)"
    doc, problems = parse_yaml(text, str(path))
    if not isinstance(doc.data, dict):
        return "(unreadable)"
    description = doc.data.get("description", "")
    return " ".join(description.split()) if isinstance(description, str) else ""


def _list(ctx, args, out) -> int:
    report = ProfileListReport([(name, path, _description(path)) for name, path in list_profiles(ctx.search_path)])
    if out.json:
        out.emit(report.to_json())
    else:
        out.print(out.table(["NAME", "DESCRIPTION", "FILE"], [(n, d, p) for n, p, d in report.entries], middle=("FILE",),
                            keep=("NAME",)))
    return report.exit_code


def _show(ctx, args, out) -> int:
    profile = load_profile(_ref(args.name), ctx.search_path)
    for w in profile.warnings:
        out.warn(str(w))
    report = ProfileShowReport(profile, args.explain)
    if out.json:
        out.emit(report.to_json())
        return report.exit_code
    if args.explain:
        out.print(f"# {profile.name}: {' <- '.join(profile.files)}")
        out.print("# each value is followed by the file and line it comes from; later files in the")
        out.print("# extends: chain override earlier ones key by key, a list or a range {min, max} replaces the whole value")
    out.print(render_profile_yaml(profile, explain=args.explain))
    return report.exit_code


def _ref(ref: str | None) -> ProfileRef | None:
    """A command-line profile reference: an existing file wins over a name on the search path."""
    if ref is not None and os.path.isfile(ref):
        return Path(ref)
    return ref


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


def _validate(ctx, args, out) -> int:
    report = ValidateReport()
    for ref in args.files:
        verdict = FileVerdict(ref, *resolve_profile(_ref(ref), ctx.search_path))
        report.files.append(verdict)
        if not out.json:
            diags = verdict.diagnostics
            for line in error_lines(diags):
                out.warn(line)
            if not verdict.errors:
                warned = f" ({len(diags)} warning{'s' if len(diags) != 1 else ''})" if diags else ""
                out.print(f"{ref}: ok{warned}")
    if out.json:
        out.emit(report.to_json())
    return report.exit_code


def _import_tuned(ctx, args, out) -> int:
    from tunectl.profile.tuned_import import DEFAULT_SEARCH_DIRS, import_tuned, render_yaml

    result = import_tuned(args.ref, args.tuned_dirs or DEFAULT_SEARCH_DIRS)
    if out.json:
        out.emit(result.to_json())
    else:
        out.stdout.write(render_yaml(result))
    return ExitCode.OK
