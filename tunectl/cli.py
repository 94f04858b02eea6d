"""The command line: parse, call one operation, render, return an exit code.

`main(argv, env)` is the whole program; tests call it in-process. Logging is
configured here and only here. Each command group lives in its capability's
package (`tunectl/<package>/cli.py`: `add_arguments` and `run`); only the
group of the command that runs is imported, so a command pays for nothing else.
"""

from __future__ import annotations

import os
import sys

from tunectl import __version__
from tunectl.system.termination import (
    Terminated,
    exiting,
    noting_dropped_stops,
    said,
    started,
    stop_not_said,
    stop_with_a_document,
    stops_with_a_document,
    wants_json,
    write_document,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (it costs more than the rest of --version)
if TYPE_CHECKING:  # start-up is budgeted: `tunectl --version` imports nothing else
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import TextIO

    from tunectl.output import Progress
    from tunectl.report import Column, Report

# command -> (the module that adds its arguments and runs it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("tunectl.tuning.cli", "devices, their class, scheduler, read-ahead and knobs, drift against the active profile"),
    "plan": ("tunectl.tuning.cli", "what apply would change, as before -> after"),
    "apply": ("tunectl.tuning.cli", "write the plan through sysfs, journalling original values"),
    "verify": ("tunectl.tuning.cli", "compare live state with the profile; exit 1 on drift"),
    "rollback": ("tunectl.tuning.cli", "restore the values that were there before tunectl first changed them"),
    "doctor": ("tunectl.owners.cli", "other writers of what the profile sets (udev rules, tuned, sysfs.conf, tmpfiles); "
                                     "exit 1 if one undoes tunectl"),
    "profile": ("tunectl.profile.cli", "the profile library: list, show, validate, import-tuned"),
    "udev": ("tunectl.udev.cli", "rules for hot-plug and boot: render, install, remove, check; monitor events"),
    "align": ("tunectl.align.cli", "partition alignment against parted's tables and sysfs topology; exit 1 if misaligned"),
    "mounts": ("tunectl.mounts.cli", "mount options against the profile: check live mounts and fstab, fix fstab, remount"),
    "preload": ("tunectl.preload.cli", "physical-order preload of a file set: collect, record, replay, show"),
    "bench": ("tunectl.bench.cli", "read-only sweep of read-ahead and schedulers; restores every setting; recommends"),
    "explain": ("tunectl.explain.cli", "why a file reads slowly: its stack layer by layer, a cold read, findings and the change"),
}

def _one_line(text: str) -> str:
    """`text` as one line for people (`report.shown`); the common plain line costs no import of report."""
    from tunectl.output import printable

    if printable(text) and "\n" not in text and "\t" not in text:
        return text
    from tunectl.report import shown

    return shown(text)


class Output:
    def __init__(self, stdout: TextIO, stderr: TextIO, as_json: bool, quiet: bool, verbose: int,
                 document: str) -> None:
        self.stdout, self.stderr = stdout, stderr
        self.json, self.quiet, self.verbose = as_json, quiet, verbose
        self.document = document  # the format name of this command's --json document, after "tunectl-"
        self.width: int | None = None  # the terminal's columns; None: cells whole (a pipe, -v)
        self.colour = False
        self.columns: list[str] | None = None  # -o
        self.style = "table"  # -r: "raw", -P: "pairs"
        self.headings = True  # -n: False
        # the exit code of the result being shown, known before its first line is written: the verdict a reader
        # that goes away part way (`verify | head`, more than a pipe's 64 KiB) does not change
        self.verdict: int | None = None

    def table(self, columns: Sequence[Column] | Sequence[str], rows, **fit) -> str:
        """A table that fits the terminal, with the -o columns, drift and failures coloured on a terminal.

        `columns`: the command's column table (tunectl.report.Column: how each is cut, which are hidden unless -v),
        or plain headers with `fit` saying how to cut them (a table -o does not pick from)."""
        from tunectl.report import Column, fit_options, table

        if columns and isinstance(columns[0], Column):
            fit = {**fit_options(columns, bool(self.verbose)), **fit}
            columns = [c.header for c in columns]
        return table(columns, rows, width=self.width, only=self.columns,
                     paint=self.colour and self.style == "table", style=self.style,
                     headings=self.headings, **fit)

    @property
    def picked(self) -> bool:
        """-o, -r or -P: stdout is the table alone, for a script; lines about it (profile:, scope:) go to stderr."""
        return self.columns is not None or self.style != "table"

    def heading(self, text: str) -> None:
        """A line above a table (profile:, scope:): on stdout, or on stderr when the table was picked for a script."""
        if self.picked:
            if not self.quiet:
                self.warn(text)
        else:
            self.say(text)

    def print(self, text: str = "") -> None:
        """A line (or lines) for stdout; for people, control characters are escaped, colours kept only when on."""
        if self.quiet and not self.json:
            return
        from tunectl.output import printable  # a plain line, the common one, printed without tunectl.report

        if not self.json and not printable(text):
            from tunectl.report import escape_keeping_colour

            text = escape_keeping_colour(text, self.colour)
        self.stdout.write(text + "\n")

    def say(self, text: str) -> None:
        """A sentence for people: wrapped at the terminal's width between words, continued indented."""
        text = _one_line(text)  # one sentence: a newline in a name it holds is shown as \n, never a new line
        if self.width is None or len(text) <= self.width:
            self.print(text)
            return
        import textwrap

        # a path or a digest longer than the line stays whole, on a line of its own: it is copied and pasted
        self.print(textwrap.fill(text, self.width, subsequent_indent="  ", break_on_hyphens=False,
                                 break_long_words=False))

    def warn(self, text: str) -> None:
        """One line for people on stderr: control characters (a file name, a value read back) escaped, a newline and a
        tab too (a path holding one would start a line that passes for another warning); a caller with several
        lines warns once a line."""
        self.stderr.write(_one_line(text) + "\n")

    def show(self, report: Report, one_line: bool = False) -> int:
        """A command's result (tunectl.report.Report): its --json document, or its text; then its exit code.

        `one_line`: the document on one line, for a stream of reports (`udev monitor`: a JSON line per event)."""
        code = report.exit_code
        if not one_line:  # a stream's report is one event's, not the command's verdict
            self.verdict = code
        if self.json:
            self.emit(report.to_json(), one_line)
        else:
            report.print_text(self)
        return code

    def emit(self, doc: dict, one_line: bool = False) -> None:
        """This command's --json document: `tunectl-<command>`, its version, then `doc`'s keys."""
        from tunectl.report import emit_json

        stop_not_said()  # a stop Python dropped while the command ran: its document instead of this one
        if not one_line:  # a stream's line (`udev monitor`) is not the one document
            said()
        emit_json(self.document, doc, self.stdout, one_line)

    def progress(self, total: int, label: str) -> Progress:
        """A progress bar on stderr when it is a terminal; silent under --json, -q or a pipe."""
        from tunectl.output import Progress

        visible = not (self.json or self.quiet) and getattr(self.stderr, "isatty", lambda: False)()
        return Progress(self.stderr, total, label, enabled=visible)


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    import argparse

    default = argparse.SUPPRESS if suppress else None
    g = parser.add_argument_group("global options")
    if suppress:
        parser._repeated_globals = g  # type: ignore[attr-defined]  # named in one line of its --help
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="print one JSON document on stdout (logs go to stderr)")
    g.add_argument("--sysfs-root", metavar="DIR", default=default, help="sysfs root (default /sys, env TUNECTL_SYSFS_ROOT)")
    g.add_argument("--udev-root", metavar="DIR", default=default,
                   help="udev database directory (default /run/udev/data, env TUNECTL_UDEV_ROOT)")
    g.add_argument("--state-dir", metavar="DIR", default=default,
                   help="journal and lock directory (default /var/lib/tunectl, env TUNECTL_STATE_DIR)")
    g.add_argument("--wait", metavar="SECONDS", type=_seconds, default=default,
                   help="wait at most this long for another tunectl run's lock (default: as long as it takes)")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS if suppress else 0,
                   help="show in-sync and skipped settings too; -vv logs debug detail")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="print nothing but errors; rely on the exit code")
    g.add_argument("--color", "--colour", dest="color", choices=("auto", "always", "never"), metavar="WHEN",
                   default=argparse.SUPPRESS if suppress else "auto",
                   help="colour drift and failures: auto (on a terminal, unless NO_COLOR is set or TERM=dumb), always, never")
    g.add_argument("--propagate", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help=argparse.SUPPRESS)


_VALUE_OPTIONS = ("--sysfs-root", "--udev-root", "--state-dir", "--color", "--colour", "--wait")


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


def _parser_class() -> type:
    """argparse's parser, but a bad argument is a UsageError: one renderer for every error, --json included."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # type: ignore[override]
            unknown = self._unknown_long_options() if message.startswith("the following arguments are required") else []
            if unknown:  # argparse names the missing positional first; the option nobody knows is the mistake
                message = f"unrecognized arguments: {' '.join(unknown)}; and {message}"
            raise self._usage_error(message, f"`{self.prog} --help` lists the arguments")

        def _usage_error(self, message: str, hint: str) -> Exception:
            """The UsageError of this (sub)command: its name before `message`, its usage attached."""
            from tunectl.errors import UsageError

            command = self.prog.partition(" ")[2]
            e = UsageError(f"{command}: {message}" if command else message, hint=hint, code="usage", where=self.prog)
            e.usage = self.format_usage()  # type: ignore[attr-defined]
            return e

        def _get_values(self, action: argparse.Action, arg_strings: list[str]):  # noqa: ANN202
            """An option's value that is empty or blank (`--scope ''`, `--state-dir ''`: an unset variable in a
            script) is a usage error, never taken as "not given": `--state-dir ''` fell back to the real state
            directory, `-p ''` to the default profile. Positional arguments are left as they are (a command's own
            arguments after `--` may be empty), and so is an option whose help documents '' as a value
            (`empty_is_a_value` set on its action: `explain --try-compressors ''`, no compressor but the image's)."""
            if action.option_strings and not getattr(action, "empty_is_a_value", False):
                for value in arg_strings:
                    if isinstance(value, str) and not value.strip():
                        option = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
                        metavar = action.metavar or action.dest.upper()
                        if isinstance(metavar, tuple):
                            metavar = " ".join(metavar)
                        what = "blank" if value else "empty"
                        # what the option takes, not its whole help (a --color hint was a 120-column line)
                        takes = "one of " + ", ".join(map(str, action.choices)) if action.choices else metavar
                        raise self._usage_error(f"{option}: the value is {what}; give {option} {metavar}, or leave "
                                                f"{option} out for its default",
                                                f"{option} takes {takes}; `{self.prog} --help` says more")
            return super()._get_values(action, arg_strings)

        def _get_formatter(self) -> argparse.HelpFormatter:
            # argparse makes one for every argument added (to check its metavar), each asking shutil for the
            # terminal's width: the same width (argparse's is the columns less 2), without loading shutil.
            return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)

        def _unknown_long_options(self) -> list[str]:
            """The --options of the command line (up to `--`) that this parser does not know, nor abbreviates."""
            known = list(self._option_string_actions)
            found = []
            for arg in getattr(self, "seen_argv", ()):
                if arg == "--":
                    break
                name = arg.split("=", 1)[0]
                if name.startswith("--") and not any(k.startswith(name) for k in known):
                    found.append(name)
            return found

        def format_help(self) -> str:
            """A command's help without the global options it repeats: one line names them (`tunectl --help`
            explains them); they still parse, and complete, after the command."""
            group = getattr(self, "_repeated_globals", None)
            if group is None:
                return super().format_help()
            actions, groups = self._actions, self._action_groups
            self._actions = [a for a in actions if a not in group._group_actions]
            self._action_groups = [g for g in groups if g is not group]
            try:
                text = super().format_help()
            finally:
                self._actions, self._action_groups = actions, groups
            import textwrap

            names = " ".join(next(o for o in a.option_strings if o.startswith("--")) + (f" {a.metavar}" if a.metavar
                                                                                       else "")
                             for a in group._group_actions if a.help != argparse.SUPPRESS)
            return text.rstrip("\n") + "\n\n" + textwrap.fill(
                f"global options, before or after the command: {names} (`tunectl --help` explains them)", 78,
                break_on_hyphens=False) + "\n"

    return Parser


def _help_formatter() -> type:
    """argparse's raw-description formatter, but prose wider than the terminal is wrapped at its width. Prose is
    text that starts in the first column: its lines run on until one ends a sentence (".") or a heading (":"), and
    such a run is refilled only when one of its lines is too wide (a one-line description, an epilog paragraph
    wrapped by hand at a wider margin). Indented lines (examples, tables) stay as written, so a command line in
    an example is never cut in two."""
    import argparse

    class Formatter(argparse.RawDescriptionHelpFormatter):
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            import textwrap

            out: list[str] = []
            run: list[str] = []

            def flush() -> None:
                if any(len(line) > width for line in run):
                    out.extend(textwrap.wrap(" ".join(run), width, initial_indent=indent, subsequent_indent=indent,
                                             break_on_hyphens=False, break_long_words=False))
                else:
                    out.extend(indent + line for line in run)
                run.clear()

            for line in text.splitlines():
                if not line or line[:1].isspace():
                    flush()
                    out.append(indent + line if line else "")
                    continue
                run.append(line)
                if line.endswith((".", ":")):
                    flush()
            flush()
            return "\n".join(out)

    return Formatter


def _version_action(argv: Sequence[str] | None) -> type:
    """-V among other options (`tunectl --state-dir X -V --json`): as `_version` answers it alone, --json a
    document (argparse's own version action printed the text line whatever --json said)."""
    import argparse

    class Version(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
            _version(list(argv or ()), sys.stdout)  # sys.stdout: main's stream while the parser runs
            parser.exit()

    return Version


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a command, only that command is built, with its arguments.

    Every command is listed in `tunectl --help` (and in the error for an
    unknown one), but only the group of the command that runs is imported and
    built: one command runs per process. Without `argv` every command is built
    in full (documentation, tests).
    """
    import importlib

    wanted = _command_in(argv) if argv is not None else None
    parser_class = _parser_class()
    formatter = _help_formatter()
    parser_class.seen_argv = list(argv or ())  # type: ignore[attr-defined]
    parser = parser_class(
        prog="tunectl",
        description="Declarative block-device I/O tuning: classify disks, plan, apply, verify, roll back.",
        epilog="exit codes: 0 ok/in sync, 1 drift or failed checks, 2 usage or profile error, "
               "3 partial failure, 4 not permitted, 5 state directory unusable, 70 internal error (a bug), "
               "130 interrupted.\n"
               "`tunectl COMMAND --help` explains a command. See tunectl(8) and tunectl-profile(5).",
        formatter_class=formatter)
    parser.add_argument("-V", "--version", action=_version_action(argv), nargs=0,
                        help="print the version and exit (with --json: a tunectl-version document)")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        if argv is not None and wanted in COMMANDS and wanted != name:
            continue  # each subparser costs about a millisecond; an unknown command still lists them all
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=formatter)
        if argv is not None and wanted != name:
            continue
        _global_options(p, suppress=True)

        def add_action(subparsers: argparse._SubParsersAction, action: str, action_help: str,
                       group: argparse.ArgumentParser = p) -> argparse.ArgumentParser:
            ap = subparsers.add_parser(action, help=action_help, description=action_help,
                                       epilog=_action_examples(group.epilog, group.prog, action),
                                       formatter_class=formatter)
            _global_options(ap, suppress=True)
            return ap

        importlib.import_module(module).add_arguments(name, p, add_action)
    return parser


def _action_examples(group_epilog: str | None, group_prog: str, action: str) -> str | None:
    """An action's --help teaches by example too: the lines of its group's examples that run this action."""
    words = [*group_prog.split(), action]
    lines = [line for line in (group_epilog or "").splitlines() if line.split()[:len(words)] == words]
    return "examples:\n" + "\n".join(lines) if lines else None


def _lean_replay(argv: Sequence[str]):  # noqa: ANN202 (a ReplayArgs, or None; its module stays lazy)
    """`preload replay LIST` in one of its plain shapes, read without argparse (its start-up is budgeted, #30),
    None: the full parser reads the line."""
    if "replay" not in argv or "preload" not in argv:
        return None
    from tunectl.preload.fastpath import replay_args

    return replay_args(argv)


def _context(args: argparse.Namespace, env: Mapping[str, str] | None):
    if getattr(args, "lean", False):
        from tunectl.preload.fastpath import ReplayContext

        return ReplayContext(env)
    from tunectl.context import Context

    return Context.create(getattr(args, "sysfs_root", None), getattr(args, "state_dir", None),
                          getattr(args, "udev_root", None), env)


def _seconds(text: str) -> float:
    """--wait: a number of seconds, 0 or more (inf: as long as it takes); nan or a negative bound means nothing."""
    import argparse

    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= 0:  # nan too
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more seconds (0: do not wait)")
    return seconds


def _document_name(args: argparse.Namespace) -> str:
    """`status`, `mounts-check`, `udev-monitor`: the command and its action, the name of its --json format."""
    action = getattr(args, f"{args.command}_command".replace("-", "_"), None)
    return args.command + (f"-{action}" if action else "")


def _version(argv: Sequence[str], stdout: TextIO) -> int:
    if wants_json(argv):
        from tunectl.report import emit_json
        from tunectl.schema import VERSIONS

        said()
        emit_json("version", {"tunectl": __version__,
                              "formats": {f"tunectl-{name}": v for name, v in VERSIONS.items()}}, stdout)
    else:
        stdout.write(f"tunectl {__version__}\n")
    return 0


def _fail(out: Output, error: Exception, usage: str | None = None) -> int:
    """Every failure, usage errors and bugs included, in its one text form and (--json) its one document."""
    from tunectl.errors import ExitCode, ProfileError, TunectlError
    from tunectl.report import emit_json, error_document, error_lines

    if isinstance(error, TunectlError):
        code, message, hint, where, exit_code = error.code, error.message, error.hint, error.where, error.exit_code
        label = "error"
    else:
        code, message, where, exit_code, label = "internal", f"{type(error).__name__}: {error}", None, \
            ExitCode.INTERNAL, "internal error"
        hint = "this is a bug in tunectl; rerun with --propagate for the traceback and report it"
    problems = error.diagnostics if isinstance(error, ProfileError) else ()
    diagnostics = [d.to_json() if hasattr(d, "to_json") else {"message": str(d)} for d in problems]
    # Stays a branch, not a Report: the one renderer of every failure, as plain as it can be (it must work when the
    # failure was in the report machinery), and its document is `tunectl-error`, whatever the command's format.
    if out.json:
        said()
        emit_json("error", error_document(code, message, hint, where, exit_code, diagnostics), out.stdout)
    if usage and not out.json:
        out.stderr.write(usage)
    for line in error_lines(problems or message, hint, label):
        out.warn(line)
    return exit_code


def _terminal_width(stdout: TextIO, environ: Mapping[str, str]) -> int | None:
    """COLUMNS when set, else the terminal's width; None (cells whole) when stdout is a pipe or a file."""
    columns = environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not getattr(stdout, "isatty", lambda: False)():
        return None
    return _terminal_columns()


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns without loading shutil (~4 ms of CPU a command): COLUMNS, else the
    width of the terminal on the interpreter's stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _columns(args: argparse.Namespace, out: Output) -> bool:
    """--columns lists the table's columns (True: done); -o is checked against them."""
    from tunectl.errors import UsageError
    from tunectl.report import column_lines, find_column

    names = [c.name for c in args.table_columns]
    if args.list_columns:
        if out.json:  # the list is for people choosing -o; no --json document has it (one document, or none)
            raise UsageError("--columns lists the table's columns for -o; it has no --json document",
                             hint="drop --json: each command's document already names every field", where="--columns")
        for line in column_lines(args.table_columns):
            out.print(line)
        return True
    if args.table_output:
        found = [find_column(c, names) for c in args.table_output]
        unknown = [c for c, name in zip(args.table_output, found) if name is None]
        if unknown:
            raise UsageError(f"unknown column {unknown[0]!r} for -o", hint=f"columns: {','.join(names)}", where="-o")
        out.columns = [name for name in found if name is not None]
    out.style = args.table_style or "table"
    out.headings = not args.table_noheadings
    return False


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None, context=None) -> int:
    if stdout is None and stderr is None:  # the process's own streams
        stdout, stderr = _own_streams()
    stdout = _Stdout(stdout or sys.stdout)
    stderr = _Stderr(stderr or sys.stderr)
    try:
        code = _main(argv, env, stdout, stderr, context)
        try:
            stdout.flush()  # what is still buffered fails here, not unseen as Python exits
        except BrokenPipeError:
            return code  # the reader has what it wanted (`| head`): the verdict stands
        return code
    except OutputLost as e:  # the result cannot reach the caller: said on stderr, never as a bug
        from tunectl.errors import ExitCode

        hint = "give the command a standard output (> /dev/null discards it; -q prints only errors)" if e.closed \
            else "check where standard output goes (a full disk, a device error)"
        stderr.write(f"tunectl: error: {e}\nhint: {hint}\n")
        return ExitCode.USAGE
    except (KeyboardInterrupt, Exception) as e:
        # A stop (Ctrl-C; SIGTERM under --json) while the parser or a command's modules load, or one Python raised
        # as another error: said as a stop. Any other error is not ours to say here.
        stop = _stop_within(e)
        if stop is None:
            raise
        return stopped(stop, stdout, stderr, wants_json(list(sys.argv[1:] if argv is None else argv)))


def _stop_within(error: BaseException) -> KeyboardInterrupt | None:
    """The stop (Ctrl-C, Terminated) an error was raised instead of or while handling, or None.

    A stop's handler raises wherever Python is: in a class body's __set_name__ (ipaddress's cached_property, loaded
    with a command), Python before 3.12 raises "RuntimeError: Error calling __set_name__" with the stop as its
    cause. That is a stop, not a bug."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        if isinstance(found, KeyboardInterrupt):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


class OutputLost(Exception):
    """Standard output could not be written (a full disk, an I/O error): the result never reached the caller.

    Not a TunectlError, so no per-device or per-event handler takes it for one item's failure and carries on."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"cannot write to standard output: {error.strerror or error}")
        self.closed = isinstance(error, _ClosedError)


def _own_streams() -> tuple[TextIO, TextIO]:
    """The process's stdout and stderr, also when one started closed (`tunectl status >&-`), which Python gives as
    None. Its descriptor is taken by /dev/null first, so no file tunectl opens later (the lock, a journal's temp
    file) becomes descriptor 1 or 2 and receives what a helper (parted, udevadm) prints there. A closed stdout is
    one whose every write fails, said as for a full disk (exit 2), as coreutils do; a closed stderr discards."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY if fd == 2 else os.O_RDONLY)  # the lowest free: fd itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # a helper inherits it as it would have the stream
    return sys.stdout or _Closed(), sys.stderr or _Closed(discard=True)  # type: ignore[return-value]


class _Closed:
    """A standard stream the process started without: writes fail ("it is closed"), or vanish for stderr."""

    def __init__(self, discard: bool = False) -> None:
        self._discard = discard

    def write(self, text: str) -> int:
        if self._discard:
            return len(text)
        raise _ClosedError

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _ClosedError(OSError):
    def __init__(self) -> None:
        import errno

        super().__init__(errno.EBADF, "it is closed")


class _Guarded:
    """A standard stream whose refused writes and flushes (an OSError) go to `_refused`, the stream's own rule."""

    carries_document = False  # only stdout carries the --json document; a note on stderr never finishes it

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            if self.carries_document and started() and write_document(self._stream, text):  # its bytes counted
                return len(text)
            return self._stream.write(text)
        except OSError as e:
            self._refused(e)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self._refused(e)

    def _refused(self, error: OSError) -> None:
        raise error

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _Stdout(_Guarded):
    """The stream a command's result goes to: a write or flush the system refuses (ENOSPC, EIO) is `OutputLost`,
    not an OSError taken for a bug; a reader gone away stays BrokenPipeError (`tunectl ... | head`)."""

    carries_document = True

    def _refused(self, error: OSError) -> None:
        if isinstance(error, BrokenPipeError):
            raise error
        raise OutputLost(error) from error


class _Stderr(_Guarded):
    """The stream for people's notes and errors. Once its reader has gone away (`2> >(...)` that ended, a closed
    log pipe), what would go there goes nowhere and the command goes on: its result still goes to stdout with its
    own exit code. Before, the broken pipe was taken for stdout's reader gone (`| head`): `--json status` then
    exited 0 with no document at all. Any other refusal is raised as before."""

    def _refused(self, error: OSError) -> None:
        if not isinstance(error, BrokenPipeError):
            raise error
        # Its descriptor becomes /dev/null: the bytes the buffer still holds, and a helper's own messages, go
        # nowhere instead of failing again (Python ends with status 120 when its last flush of stderr fails).
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # a stream without one (a test's StringIO)
            return
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
        try:  # noqa: SIM105 (contextlib: an import a boot replay would pay for)
            self._stream.flush()
        except OSError:
            pass


def stopped(stop: KeyboardInterrupt, stdout: TextIO, stderr: TextIO, json: bool) -> int:
    """A command cut short (Ctrl-C; SIGTERM or SIGHUP under --json or where a command stops on them: Terminated):
    said on stderr and, under --json, as the one document --json promises (`tunectl-error`), so a caller reading
    stdout finds one document, not none; its exit code (130, 143, 129)."""
    word = "terminated" if isinstance(stop, Terminated) else "interrupted"
    code = stop.exit_code if isinstance(stop, Terminated) else 130
    if json:
        said()  # a stop that comes while this document is made changes nothing (under the program's handler)
        from tunectl.report import emit_json, error_document

        emit_json("error", error_document(word, f"{word}: the command stopped part way", None, None, code), stdout)
    stderr.write(f"tunectl: {word}\n")
    return code


def _main(argv: Sequence[str] | None, env: Mapping[str, str] | None, stdout: TextIO, stderr: TextIO,
          context) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and {"-V", "--version"} & set(argv) and set(argv) <= {"-V", "--version", "--json"}:
        return _version(argv, stdout)  # needs no parser: answered before importing one
    from tunectl.errors import ExitCode, ProfileError, UsageError

    held = next((a for a in argv if "\x00" in a), None)
    if held is not None:  # exec() cannot pass one; a caller of main() can, and no path or value holds one
        return _fail(Output(stdout, stderr, wants_json(argv), False, 0, "error"),
                     UsageError(f"an argument holds a NUL byte: {held!r}",
                                hint="no device, path or value contains one: check how the command line was built"))
    args = _lean_replay(argv)
    if args is None:
        import contextlib

        parser = build_parser(argv)
        try:
            # argparse prints --help itself: to the streams main was given; its errors come back as UsageError.
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                args = parser.parse_args(argv)
        except SystemExit as e:
            return int(e.code or 0) if e.code in (0, None) else ExitCode.USAGE
        except UsageError as e:
            return _fail(Output(stdout, stderr, wants_json(argv), False, 0, "error"), e, getattr(e, "usage", None))
    out = Output(stdout, stderr, args.json, args.quiet, args.verbose, _document_name(args))
    if getattr(args, "table_columns", None) is not None:
        try:
            if _columns(args, out):
                return ExitCode.OK
        except UsageError as e:
            return _fail(out, e)
        except BrokenPipeError:  # `--columns | head`
            return ExitCode.OK
    if args.verbose >= 2:
        import logging

        logging.basicConfig(stream=stderr, format="tunectl: %(levelname)s: %(message)s", level=logging.DEBUG)
    try:
        # Without --json a SIGTERM ends the command by the default action, as for any program. Under the program
        # (tunectl.program) --json's handler has been in place since its first line.
        if not out.json or stops_with_a_document():
            return _command(args, out, env, stdout, context)
        from tunectl.system.interrupts import sigterm_interrupts

        # --json promises one document on stdout: SIGTERM (a service stop, `timeout`) and SIGHUP end the command
        # as Ctrl-C does, with the tunectl-error document (code terminated, exit 143, 129 for SIGHUP)
        with sigterm_interrupts():
            return _command(args, out, env, stdout, context)
    except KeyboardInterrupt as e:  # Ctrl-C; SIGTERM, SIGHUP under --json or where a command stops on them
        return stopped(e, out.stdout, out.stderr, out.json)
    except BrokenPipeError:  # the reader went away (`| head`): the result's own verdict when it was known, else 0
        return ExitCode.OK if out.verdict is None else out.verdict
    except OutputLost:
        raise  # main says it: stdout cannot carry an error document either
    except Exception as e:  # a TunectlError is a message for people; anything else is a bug, said plainly
        stop = _stop_within(e)
        if stop is not None:  # a stop Python raised as another error (see there): a stop all the same
            return stopped(stop, out.stdout, out.stderr, out.json)
        if args.propagate and not isinstance(e, ProfileError):
            raise
        return _fail(out, e)


def _command(args: argparse.Namespace, out: Output, env: Mapping[str, str] | None, stdout: TextIO, context) -> int:
    """The command `args` names, run with its context."""
    ctx = context or _context(args, env)
    out.width = None if args.verbose else _terminal_width(stdout, ctx.env)
    is_tty = getattr(stdout, "isatty", lambda: False)()
    # TERM=dumb: a terminal that cannot draw escape sequences (Emacs shell, some serial consoles)
    out.colour = args.color == "always" or (args.color == "auto" and is_tty and not ctx.env.get("NO_COLOR")
                                            and ctx.env.get("TERM") != "dumb")
    if ctx.state is not None:  # None: a replay's own context (tunectl.preload.fastpath), no journal, no lock
        ctx.state.forget_reads()  # a Context may serve several commands (tests): each reads the state afresh
        ctx.state.command = f"tunectl {args.command}" + (
            f" {getattr(args, args.command + '_command', '')}" if hasattr(args, args.command + "_command") else "")
        ctx.state.wait_seconds = getattr(args, "wait", None)
        ctx.state.on_wait = out.warn
    module = COMMANDS[args.command][0]
    __import__(module)  # importlib.import_module without importing importlib (a boot replay's start-up)
    group = sys.modules[module]
    return int(group.run(ctx, args, out))



def main_entry() -> None:
    """The program (bin/tunectl, `python -m tunectl`): main on this process's arguments, its code the exit status.

    Under --json the SIGTERM/SIGHUP handler (tunectl.system.termination) is set before main imports anything: a
    stop while the parser is built or the command's modules load gets the one document too; one while Python
    exits ends the process at once with main's code (`termination.exiting`)."""
    argv = sys.argv[1:]
    json = wants_json(argv)
    try:
        if json:
            stop_with_a_document()
        noting_dropped_stops()
        code = main(argv)
        said()  # what main wrote stands: a stop now ends nothing more (not two documents)
    except KeyboardInterrupt as e:  # a stop in the instants main was entered or left, outside its own handling
        code = stopped(e, sys.stdout, sys.stderr, json)
    exiting(code)  # the document's code is the exit status: a stop during Python's exit ends it with that code
    sys.exit(code)
