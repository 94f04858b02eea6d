"""The one way tunectl starts other programs: C locale, a timeout, one error type."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tunectl.errors import ExitCode, TunectlError
from tunectl.record import record


class CommandError(TunectlError):
    """A tool we depend on is missing, failed, or hung."""

    exit_code = ExitCode.USAGE
    code = "command"


@record
class Completed:
    """A program that ran: its argument vector, exit status and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def which(name: str, path: str) -> str | None:
    """shutil.which(name, path=path) without importing shutil (its archives load zlib, bz2 and lzma: ~4 ms of
    every command that starts a program): `name` itself when it names a directory, else the first executable
    file `name` in `path`'s directories (an empty entry: the working directory); None if there is none."""
    if os.path.dirname(name):
        return name if _executable(name) else None
    seen = set()
    for directory in path.split(os.pathsep) if path else ():
        if directory not in seen:
            seen.add(directory)
            found = os.path.join(directory, name)
            if _executable(found):
                return found
    return None


def _executable(path: str) -> bool:
    return os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)


def run(argv: Sequence[str], timeout: float = 60, check: bool = True, input_text: str | None = None) -> Completed:
    # Here, not at the top: a command that starts no program (plan, verify) does not load them (~4 ms of CPU).
    import subprocess

    from tunectl.system.interrupts import child_start

    exe = which(argv[0], os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if exe is None:
        raise CommandError(f"{argv[0]} not found", hint=f"install the package that provides {argv[0]}")
    env = dict(os.environ, LC_ALL="C", LANG="C")
    start = child_start()  # in an undoing: its own mask and process group, not the undoing's blocked stops
    # (out of the terminal's group, it reads no terminal: stdin is /dev/null unless it is given input)
    stdin = {"stdin": subprocess.DEVNULL} if start is not None and input_text is None else {}
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, errors="replace", timeout=timeout,
                              env=env, input=input_text, check=False, preexec_fn=start, **stdin)
    except subprocess.TimeoutExpired:
        raise CommandError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None
    except OSError as e:
        raise CommandError(f"cannot run {argv[0]}: {e.strerror}") from None
    done = Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise CommandError(f"{' '.join(argv)} failed (exit {proc.returncode})" + (f": {detail[-1]}" if detail else ""))
    return done
