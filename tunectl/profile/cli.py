"""`tunectl profile list|show|validate|import-tuned`: arguments, the calls, and the rendering."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tunectl.profile.library import list_profiles, read_profile_bytes
from tunectl.profile.reader import decode_profile
from tunectl.profile.reports import FileVerdict, ProfileListReport, ProfileShowReport, ValidateReport
from tunectl.profile.resolve import load_profile, resolve_profile
from tunectl.profile.yaml_events import parse_yaml

TYPE_CHECKING = False  # the names below are for checkers only
if TYPE_CHECKING:
    from tunectl.profile.library import ProfileRef

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
        # as the loader reaches it (library.read_profile_bytes): links root's or the user's only, never another's
        fd, _ = trust.open_regular(trust.resolve_own_links(path), trusted=True, resolved=True)
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
    return out.show(report)


def _show(ctx, args, out) -> int:
    profile = load_profile(_ref(args.name), ctx.search_path)
    for w in profile.warnings:
        out.warn(str(w))
    return out.show(ProfileShowReport(profile, args.explain))


def _ref(ref: str | None) -> ProfileRef | None:
    """A command-line profile reference: an existing file wins over a name on the search path."""
    if ref is not None and os.path.isfile(ref):
        return Path(ref)
    return ref


def _validate(ctx, args, out) -> int:
    report = ValidateReport()
    for ref in args.files:
        verdict = FileVerdict(ref, *resolve_profile(_ref(ref), ctx.search_path))
        report.files.append(verdict)
    return out.show(report)


def _import_tuned(ctx, args, out) -> int:
    from tunectl.profile.tuned_import import DEFAULT_SEARCH_DIRS, import_tuned

    return out.show(import_tuned(args.ref, args.tuned_dirs or DEFAULT_SEARCH_DIRS))
