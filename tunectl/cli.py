"""The command line: parse, call one operation, render, return an exit code.

`main(argv, env)` is the whole program; tests call it in-process. Logging is
configured here and only here. Each command group lives in its capability's
package (`tunectl/<package>/cli.py`: `add_arguments` and `run`); only the
group of the command that runs is imported, so a command pays for nothing else.
"""

from __future__ import annotations

import sys

from tunectl import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (it costs more than the rest of --version)
if TYPE_CHECKING:  # start-up is budgeted: `tunectl --version` imports nothing else
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import TextIO

    from tunectl.report import Progress

# command -> (the module that adds its arguments and runs it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("tunectl.tuning.cli", "devices, their class, scheduler, read-ahead and knobs, drift against the active profile"),
    "plan": ("tunectl.tuning.cli", "what apply would change, as before -> after"),
    "apply": ("tunectl.tuning.cli", "write the plan through sysfs, journalling original values"),
    "verify": ("tunectl.tuning.cli", "compare live state with the profile; exit 1 on drift"),
    "rollback": ("tunectl.tuning.cli", "restore the values that were there before tunectl first changed them"),
    "profile": ("tunectl.profile.cli", "the profile library: list, show, validate, import-tuned"),
    "udev": ("tunectl.udev.cli", "rules for hot-plug and boot: render, install, remove, check; monitor events"),
    "align": ("tunectl.align.cli", "partition alignment against parted's tables and sysfs topology; exit 1 if misaligned"),
    "mounts": ("tunectl.mounts.cli", "mount options against the profile: check live mounts and fstab, fix fstab, remount"),
    "preload": ("tunectl.preload.cli", "physical-order preload of a file set: collect, record, replay, show"),
    "bench": ("tunectl.bench.cli", "read-only sweep of read-ahead and schedulers; restores every setting; recommends"),
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

    def progress(self, total: int, label: str) -> Progress:
        """A progress bar on stderr when it is a terminal; silent under --json, -q or a pipe."""
        from tunectl.report import Progress

        shown = not (self.json or self.quiet) and getattr(self.stderr, "isatty", lambda: False)()
        return Progress(self.stderr, total, label, enabled=shown)


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    import argparse

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
    """The parser; with `argv` naming a command, only that command is built, with its arguments.

    Every command is listed in `tunectl --help` (and in the error for an
    unknown one), but only the group of the command that runs is imported and
    built: one command runs per process. Without `argv` every command is built
    in full (documentation, tests).
    """
    import argparse
    import importlib

    wanted = _command_in(argv) if argv is not None else None
    parser = argparse.ArgumentParser(
        prog="tunectl",
        description="Declarative block-device I/O tuning: classify disks, plan, apply, verify, roll back.",
        epilog="exit codes: 0 ok/in sync, 1 drift or failed checks, 2 usage or profile error, "
               "3 partial failure, 4 not permitted, 5 state directory unusable.\n"
               "`tunectl COMMAND --help` explains a command. See tunectl(8) and tunectl-profile(5).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tunectl {__version__}")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        if argv is not None and wanted in COMMANDS and wanted != name:
            continue  # each subparser costs about a millisecond; an unknown command still lists them all
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=argparse.RawDescriptionHelpFormatter)
        if argv is not None and wanted != name:
            continue
        _global_options(p, suppress=True)

        def add_action(subparsers: argparse._SubParsersAction, action: str, action_help: str) -> argparse.ArgumentParser:
            ap = subparsers.add_parser(action, help=action_help, description=action_help,
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
            _global_options(ap, suppress=True)
            return ap

        importlib.import_module(module).add_arguments(name, p, add_action)
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
    if argv == ["--version"]:  # the one request that needs no parser: answer before importing one
        stdout.write(f"tunectl {__version__}\n")
        return 0
    import contextlib
    import importlib

    from tunectl.errors import ExitCode, ProfileError, TunectlError

    parser = build_parser(argv)
    try:
        # argparse prints usage, errors and --help itself: to the streams main was given.
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else ExitCode.USAGE
    out = Output(stdout, stderr, args.json, args.quiet, args.verbose)
    if args.verbose >= 2:
        import logging

        logging.basicConfig(stream=stderr, format="tunectl: %(levelname)s: %(message)s", level=logging.DEBUG)
    try:
        ctx = context or _context(args, env)
        group = importlib.import_module(COMMANDS[args.command][0])
        return int(group.run(ctx, args, out))
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
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as e:  # a bug: say so plainly, keep the traceback for --propagate
        if args.propagate:
            raise
        out.warn(f"tunectl: internal error: {type(e).__name__}: {e}\n"
                 "this is a bug in tunectl; rerun with --propagate for the traceback and report it")
        return ExitCode.INTERNAL


def main_entry() -> None:
    sys.exit(main())
