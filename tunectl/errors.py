"""One exception tree whose text is the message a person reads, and the exit codes."""

from __future__ import annotations

from tunectl.named import Member, Named


class ExitCode(Member, int, metaclass=Named):
    OK = 0
    DRIFT = 1  # verify/align/mounts check found differences
    USAGE = 2  # bad arguments or a bad profile
    PARTIAL = 3  # some writes refused, the rest applied
    NOT_PERMITTED = 4
    STATE = 5  # the state directory or journal cannot be used: not a regular file, unreadable, newer, disk full
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
    INTERNAL = 70  # a bug in tunectl (EX_SOFTWARE): never a verdict about the machine


class TunectlError(Exception):
    """Base of every error shown to a user: what happened, and a hint what to do.

    `code` names the kind of failure in the --json error document (stable words a
    script may test); `where` is what it is about: a device, a file, an option.
    """

    exit_code = ExitCode.USAGE
    code = "error"

    def __init__(self, message: str, hint: str | None = None, *, code: str | None = None,
                 where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.where = where
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class UsageError(TunectlError):
    exit_code = ExitCode.USAGE
    code = "usage"


class NotPermitted(TunectlError):
    exit_code = ExitCode.NOT_PERMITTED
    code = "not-permitted"


class StateError(TunectlError):
    """The state directory (journal, lock, active profile) cannot be used."""

    exit_code = ExitCode.STATE
    code = "state"


class OutOfDescriptors(TunectlError):
    """The process could not open one more file (EMFILE: its RLIMIT_NOFILE, `ulimit -n`; ENFILE: the system's
    file table is full) even after letting go of what it kept open: a limit of the process, not a fault of the
    file it was opening. The command stopped part way.

    Exit 4, as the process was not permitted what it needed (one more descriptor), like a permission it lacks:
    not 3, a partial result. Collect and record write no list; a replay stops part way. A unit's
    `SuccessExitStatus=3` (files it could not read, the rest done) must not take it for success."""

    exit_code = ExitCode.NOT_PERMITTED
    code = "out-of-descriptors"

    @classmethod
    def at(cls, where: str, enfile: bool, stopped: str, again: str) -> OutOfDescriptors:
        """The error of a command that could not open `where` for want of a descriptor: which limit (`enfile`: the
        system's file table, else this process's `ulimit -n`), what `stopped` says of the command, and the hint
        to raise the limit and run `again`."""
        import os

        why = "the system's file table is full (ENFILE, fs.file-max)" if enfile else \
            f"this process may have at most {os.sysconf('SC_OPEN_MAX')} files open (ulimit -n)"
        hint = f"free file handles on the system, then {again}" if enfile else \
            f"raise the limit (ulimit -n 1024; LimitNOFILE= for a unit) and {again}"
        return cls(f"out of file descriptors at {where}: {why}; {stopped}", hint=hint, where=where)


class ProfileError(TunectlError):
    """A profile that cannot be used; `diagnostics` holds one line per problem."""

    exit_code = ExitCode.USAGE
    code = "profile"

    def __init__(self, diagnostics: list, hint: str | None = None) -> None:
        self.diagnostics = list(diagnostics)
        first = self.diagnostics[0] if self.diagnostics else None
        where = f"{first.file}:{first.line}:{first.col}" if hasattr(first, "file") else None
        super().__init__("\n".join(str(d) for d in self.diagnostics), hint, where=where)


class SysfsError(OSError):
    """A sysfs read or write the kernel refused; carries the attribute and errno."""

    def __init__(self, path: str, errno_: int, reason: str) -> None:
        super().__init__(errno_, reason, path)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"
