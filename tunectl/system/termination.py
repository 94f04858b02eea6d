"""SIGTERM and SIGHUP under --json, from the program's first line to its exit.

--json promises one document on stdout. A SIGTERM (a service stop, `timeout`) or
SIGHUP (the terminal closed) ends a command under --json as Ctrl-C does: `Terminated`,
then the tunectl-error document (code terminated, exit 143, 129 for SIGHUP). The
program (`tunectl.cli.main_entry`) sets the handler here on its first line, before main
imports anything, so a stop while Python loads the command's modules or argparse builds
the parser gets its document too. Only a signal that comes before that line (Python's
own start, tens of milliseconds) ends the process by the default action, with no
document (exit 143 as a shell reports it).

The handler acts once, and not after the one document is being written (`said`):
a second stop, or a stop after the result was written, changes nothing, and the
process exits with the document's own exit code. Never two documents, never half of one.

Only `_signal`, the C half of the signal module, is imported: `signal` imports enum,
which costs a boot replay's start-up more than everything here (#30).
"""

from __future__ import annotations

import _signal

TYPE_CHECKING = False  # typing's, without importing typing (nor collections, before the handler is set)
if TYPE_CHECKING:
    from collections.abc import Sequence

_ENDING = (_signal.SIGTERM, _signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service stop, `timeout`) or SIGHUP (the terminal closed): handled like Ctrl-C; exit 128 + the
    signal's number (143, 129)."""

    def __init__(self, signum: int = _signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum
        self.exit_code = 128 + signum


class _Said:
    done = False  # the process's one document is written or being written
    stop = 0  # the signal the handler raised Terminated for (it acts once), 0: none yet


def _stop(signum: int, frame: object) -> None:
    if _Said.done or _Said.stop:  # the document stands, or a stop is being said: a second changes nothing
        return
    _Said.stop = signum
    raise Terminated(signum)


def stop_not_said() -> None:
    """Raise Terminated again for a stop the handler raised that nothing has said: Python swallowed it.

    A handler's exception raised while Python runs a weakref callback or a __del__ is printed ("Exception
    ignored in: <function _get_module_lock.<locals>.cb>", importlib's module lock) and dropped: the command
    went on, and as the handler acts once, it then waited for a held lock for good. Called before a wait."""
    if _Said.stop and not _Said.done:
        raise Terminated(_Said.stop)


def wants_json(argv: Sequence[str]) -> bool:
    """--json on a tunectl command line (after `--`: a recorded command's own arguments, not ours)."""
    own = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in own


def stop_with_a_document() -> None:
    """SIGTERM and SIGHUP raise Terminated once, until the document is said; for the program's whole life.

    A signal the process was started ignoring stays ignored: `nohup tunectl ... --json` outlives its terminal."""
    for sig in _ENDING:
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            _signal.signal(sig, _stop)


def stops_with_a_document() -> bool:
    """The program's handler is in place: a command needs no handler of its own for SIGTERM and SIGHUP."""
    return _signal.getsignal(_signal.SIGTERM) is _stop


def said() -> None:
    """The one document is about to be written: a stop from now on no longer raises (see the module's text)."""
    _Said.done = True
