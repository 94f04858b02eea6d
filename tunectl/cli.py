"""The command line: parse, call one operation, render, return an exit code.

`main(argv, env)` is the whole program; tests call it in-process. Logging is
configured here and only here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from tunectl import __version__
from tunectl.errors import ExitCode, ProfileError, TunectlError

EPILOG_EXAMPLES = {
    "status": "examples:\n  tunectl status\n  tunectl status --json | jq '.devices[].class'",
    "plan": "examples:\n  tunectl plan -p throughput-performance\n  tunectl plan -p ./my.yaml /dev/sda --json",
    "apply": "examples:\n  tunectl apply -p latency-performance\n  tunectl apply -p default --check --diff\n"
             "  tunectl apply -p default --json --detailed-exitcode   # for Ansible",
    "verify": "examples:\n  tunectl verify            # against the last applied profile\n  tunectl verify -p desktop sda",
    "rollback": "examples:\n  tunectl rollback          # every device tunectl changed\n  tunectl rollback sdb --check",
    "profile": "examples:\n  tunectl profile list\n  tunectl profile show virtual-guest --explain\n"
               "  tunectl profile validate /etc/tunectl/profiles/*.yaml\n  tunectl profile import-tuned throughput-performance",
}


class Output:
    def __init__(self, stdout: TextIO, stderr: TextIO, as_json: bool, quiet: bool, verbose: int) -> None:
        self.stdout, self.stderr = stdout, stderr
        self.json, self.quiet, self.verbose = as_json, quiet, verbose

    def print(self, text: str = "") -> None:
        if not self.quiet or self.json:
            self.stdout.write(text + "\n")

    def warn(self, text: str) -> None:
        self.stderr.write(text + "\n")


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    g = parser.add_argument_group("global options")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="print one JSON document on stdout (logs go to stderr)")
    g.add_argument("--sysfs-root", metavar="DIR", default=default, help="sysfs root (default /sys, env TUNECTL_SYSFS_ROOT)")
    g.add_argument("--udev-root", metavar="DIR", default=default,
                   help="udev database directory (default /run/udev/data, env TUNECTL_UDEV_ROOT)")
    g.add_argument("--state-dir", metavar="DIR", default=default,
                   help="journal and lock directory (default /var/lib/tunectl, env TUNECTL_STATE_DIR)")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS if suppress else 0,
                   help="show in-sync and skipped settings too; -vv logs debug detail")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="print nothing but errors; rely on the exit code")
    g.add_argument("--propagate", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help=argparse.SUPPRESS)


_VALUE_OPTIONS = ("--sysfs-root", "--udev-root", "--state-dir")


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word of argv, skipping global options and their values."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `argv`, global options are attached only to the command it names.

    Building every subparser's copy of the global options costs more than a
    no-op apply's sysfs work, and only one command runs per process.
    """
    wanted = _command_in(argv) if argv is not None else None
    parser = argparse.ArgumentParser(
        prog="tunectl",
        description="Declarative block-device I/O tuning: classify disks, plan, apply, verify, roll back.",
        epilog="exit codes: 0 ok/in sync, 1 drift or failed checks, 2 usage or profile error, "
               "3 partial failure, 4 not permitted.\nSee tunectl(8) and tunectl-profile(5).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tunectl {__version__}")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command(name: str, help_: str, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, epilog=EPILOG_EXAMPLES.get(name),
                           formatter_class=argparse.RawDescriptionHelpFormatter, **kw)
        if wanted in (None, name):
            _global_options(p, suppress=True)
        return p

    def action(owner: str, subparsers, name: str, help_: str) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help_, description=help_)
        if wanted in (None, owner):
            _global_options(p, suppress=True)
        return p

    p = command("status", "devices, their class, current scheduler/read-ahead/knobs, drift against the active profile")
    p.add_argument("-p", "--profile", help="compare with this profile instead of the last applied one")

    for name, help_ in (("plan", "what apply would change, as before -> after"),
                        ("verify", "compare live state with the profile; exit 1 on drift")):
        p = command(name, help_)
        p.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
        p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all)")

    p = command("apply", "write the plan through sysfs, journalling original values")
    p.add_argument("-p", "--profile", help="profile name or file (default: 'default')")
    p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all)")
    p.add_argument("--check", action="store_true", help="write nothing; report and exit as if it had")
    p.add_argument("--diff", action="store_true", help="show each change as - before / + after")
    p.add_argument("--detailed-exitcode", action="store_true",
                   help="exit 0 if nothing changed, 2 if something changed, 1 on any error")
    p.add_argument("--stack", action="store_true",
                   help="also apply to the disks below each named stacked device (what a dm/md udev event runs)")

    p = command("rollback", "restore the values that were there before tunectl first changed them")
    p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all journalled)")
    p.add_argument("--check", action="store_true", help="show what would be restored, write nothing")

    p = command("profile", "the profile library: list, show, validate, import-tuned")
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION")
    psub.required = True
    action("profile", psub, "list", "profiles on the search path with their description")
    pp = action("profile", psub, "show", "print the resolved (merged) profile as YAML")
    pp.add_argument("name", nargs="?", help="profile name or file (default: 'default')")
    pp.add_argument("--explain", action="store_true", help="say which file each value came from")
    pp = action("profile", psub, "validate", "check profile files; one file:line:col line per problem")
    pp.add_argument("files", nargs="+", metavar="FILE", help="profile files or names")
    pp = action("profile", psub, "import-tuned", "convert a tuned profile (tuned.conf) to a tunectl profile on stdout")
    pp.add_argument("ref", metavar="PATH|NAME", help="tuned profile directory, tuned.conf or profile name")
    p = command("udev", "rules for hot-plug and boot: render, install, remove, check")
    usub = p.add_subparsers(dest="udev_command", metavar="ACTION")
    usub.required = True
    for verb, help_ in (("render", "print the rules for a profile (same profile, same bytes)"),
                        ("install", "write the rules file atomically and reload udev"),
                        ("remove", "delete the rules file and reload udev"),
                        ("check", "exit 1 unless the installed rules match what the profile renders")):
        up = action("udev", usub, verb, help_)
        if verb != "remove":
            up.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
        if verb != "render":
            up.add_argument("--rules-dir", metavar="DIR", default="/etc/udev/rules.d",
                            help="where the rules file lives (default /etc/udev/rules.d)")
        if verb == "install":
            up.add_argument("--trigger", action="store_true",
                            help="send change events to block disks and wait for udev to settle")
    return parser


def _context(args: argparse.Namespace, env: Mapping[str, str] | None):
    from tunectl.context import Context

    return Context.create(getattr(args, "sysfs_root", None), getattr(args, "state_dir", None),
                          getattr(args, "udev_root", None), env)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None, context=None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else ExitCode.USAGE
    out = Output(stdout, stderr, args.json, args.quiet, args.verbose)
    if args.verbose >= 2:
        import logging

        logging.basicConfig(stream=stderr, format="tunectl: %(levelname)s: %(message)s", level=logging.DEBUG)
    try:
        ctx = context or _context(args, env)
        handler = _HANDLERS[args.command]
        return int(handler(ctx, args, out))
    except ProfileError as e:
        if out.json:
            from tunectl.report import emit_json

            emit_json({"ok": False, "hint": e.hint,
                       "errors": [d.to_json() if hasattr(d, "to_json") else {"message": str(d)} for d in e.diagnostics]},
                      stdout)
        for d in e.diagnostics:
            out.warn(str(d))
        if e.hint:
            out.warn(f"hint: {e.hint}")
        return e.exit_code
    except TunectlError as e:
        if args.propagate:
            raise
        if out.json:
            from tunectl.report import emit_json

            emit_json({"ok": False, "error": e.message, "hint": e.hint}, stdout)
        out.warn(f"tunectl: error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        out.warn("tunectl: interrupted")
        return 130
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as e:  # a bug: say so plainly, keep the traceback for --propagate
        if args.propagate:
            raise
        out.warn(f"tunectl: internal error: {type(e).__name__}: {e}\n"
                 "this is a bug in tunectl; rerun with --propagate for the traceback and report it")
        return ExitCode.USAGE


def _warn_profile(report, out: Output) -> None:
    for w in report.warnings:
        out.warn(str(w))


def _cmd_status(ctx, args, out: Output) -> int:
    from tunectl import tuning
    from tunectl.report import emit_json, show, table

    report = tuning.status(ctx, args.profile)
    _warn_profile(report, out)
    drift_by_dev: dict[str, int] = {}
    for s in report.drift:
        drift_by_dev[s.device] = drift_by_dev.get(s.device, 0) + 1
    if out.json:
        emit_json({"profile": report.profile,
                   "devices": [dict(d.to_json(), drift=[s.to_json() for s in report.drift if s.device == d.name])
                               for d in report.devices]}, out.stdout)
        return ExitCode.OK
    rows = []
    for d in report.devices:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(d.iosched.items())) if out.verbose else ""
        drift = f"{drift_by_dev[d.name]} setting(s)" if d.name in drift_by_dev else "in sync"
        rows.append([d.name, d.cls + (f"/{d.dm_type}" if d.dm_type else ""), show(d.scheduler),
                     show(d.queue.get("read_ahead_kb")), d.identity, drift] + ([knobs] if out.verbose else []))
    headers = ["DEVICE", "CLASS", "SCHEDULER", "READ-AHEAD", "IDENTITY", "DRIFT"] + (["KNOBS"] if out.verbose else [])
    out.print(f"profile: {report.profile}")
    out.print(table(headers, rows))
    return ExitCode.OK


def _settings_rows(settings, verbose: int, with_status: bool = False):
    from tunectl.report import show

    rows = []
    for s in settings:
        status = getattr(s, "status", None)
        setting = getattr(s, "setting", s)
        if not verbose and status in ("ok", "skip"):
            continue
        note = getattr(s, "error", "") or setting.reason
        row = [setting.device, setting.attribute, f"{show(setting.before)} -> {show(setting.after)}", setting.source]
        if with_status:
            row.append(status)
        rows.append(row + [note])
    return rows


def _summary(statuses: list[str]) -> str:
    counts: dict[str, int] = {}
    for st in statuses:
        counts[st] = counts.get(st, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "nothing to do"


def _cmd_plan(ctx, args, out: Output, verify: bool = False) -> int:
    from tunectl import tuning
    from tunectl.report import emit_json, table

    ref = tuning.active_profile_ref(ctx, args.profile) if verify else args.profile
    report = tuning.plan(ctx, ref, args.devices)
    _warn_profile(report, out)
    drift = report.drift
    code = ExitCode.DRIFT if verify and drift else ExitCode.OK
    if out.json:
        emit_json({"profile": report.profile, "in_sync": not drift,
                   "settings": [s.to_json() for s in report.settings]}, out.stdout)
        return code
    rows = _settings_rows(report.settings, out.verbose, with_status=True)
    out.print(f"profile: {report.profile}")
    if rows:
        out.print(table(["DEVICE", "ATTRIBUTE", "BEFORE -> AFTER", "SOURCE", "STATUS", "NOTE"], rows))
    out.print(_summary([s.status for s in report.settings]))
    if verify:
        out.print("in sync" if not drift else f"drift: {len(drift)} setting(s) differ")
    return code


def _cmd_apply(ctx, args, out: Output) -> int:
    from tunectl import tuning

    report = tuning.apply(ctx, args.profile, args.devices, check=args.check, stack=args.stack)
    code = _render_apply(report, args, out)
    if args.detailed_exitcode:
        return 1 if code != ExitCode.OK else (2 if report.changed else 0)
    return code


def _render_apply(report, args, out: Output) -> int:
    from tunectl.report import emit_json, show, table

    _warn_profile(report, out)
    if out.json:
        emit_json({"profile": report.profile, "changed": report.changed, "check": report.check,
                   "writes": report.writes, "write_phase_ms": round(report.write_seconds * 1000, 3),
                   "notes": report.notes,
                   "settings": [o.to_json() for o in report.outcomes]}, out.stdout)
        return report.exit_code
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
    rows = _settings_rows(report.outcomes, out.verbose, with_status=True)
    if getattr(args, "diff", False):
        for o in report.outcomes:
            s = o.setting
            if o.status in ("changed", "change"):
                out.print(f"--- {s.device} queue/{s.attribute}\n-{show(s.before)}\n+{show(s.after)}")
    elif rows:
        out.print(table(["DEVICE", "ATTRIBUTE", "BEFORE -> AFTER", "SOURCE", "STATUS", "NOTE"], rows))
    verb = "would change" if report.check else "changed"
    n = sum(o.status in ("changed", "change") for o in report.outcomes)
    out.print(f"{report.profile}: {verb} {n} setting(s); {_summary([o.status for o in report.outcomes])}")
    return report.exit_code


def _cmd_rollback(ctx, args, out: Output) -> int:
    from tunectl import tuning

    return _render_apply(tuning.rollback(ctx, args.devices, check=args.check), args, out)


def _cmd_profile(ctx, args, out: Output) -> int:
    from tunectl import profile_commands

    return profile_commands.run(ctx, args, out)


def _cmd_udev(ctx, args, out: Output) -> int:
    from tunectl import udev_commands

    return udev_commands.run(ctx, args, out)


_HANDLERS: dict[str, Callable] = {
    "udev": _cmd_udev,
    "status": _cmd_status,
    "plan": _cmd_plan,
    "verify": lambda ctx, args, out: _cmd_plan(ctx, args, out, verify=True),
    "apply": _cmd_apply,
    "rollback": _cmd_rollback,
    "profile": _cmd_profile,
}


def main_entry() -> None:
    sys.exit(main())
