"""SIGTERM and SIGHUP under --json, from the program's first line to its exit.

--json promises one document on stdout. A SIGTERM (a service stop, `timeout`) or
SIGHUP (the terminal closed) ends a command under --json as Ctrl-C does: `Terminated`,
then the tunectl-error document (code terminated, exit 143, 129 for SIGHUP). The
program (`tunectl.cli.main_entry`) sets the handler here on its first line, before main
imports anything, so a stop while Python loads the command's modules or argparse builds
the parser gets its document too. Only a signal that comes before that line (Python's
own start, tens of milliseconds) ends the process by the default action, with no
document (exit 143 as a shell reports it).

The handler acts once until the document is being written (`said`): a second stop
while the first is said changes nothing. Never two documents, never half of one when the
reader reads: a stop once the document has started lets it finish, and the process exits
with the document's own code. A reader that does not read (a full pipe, its reader stuck)
would hold the process in that write for good, so the document's time is bounded: a second
stop ends the process at once by that signal (exit 143 or 129 as a shell reports it), and so
does the first if the write has made no progress for `STUCK_SECONDS` since (counted by
write(2)'s bytes in /proc/self/io; where that cannot be read, hidepid or a container without
/proc, by the bytes the document's own write loop counts, `write_document`, and then after two
looks in a row, as that count may lag the kernel's by the write the alarm interrupted). Nothing
more is written then: the reader has part of a document and the signal's exit status, as from
the default action. Ctrl-C (SIGINT) once the document has started is such a stop too: never an
`interrupted` document after part of the result.

A stop the handler raised where Python prints an exception and drops it (a weakref
callback such as importlib's module lock, a __del__: "Exception ignored in ...") would let
the command go on as if never stopped. `noting_dropped_stops` notes such a stop instead, and
`stop_not_said` raises it again before each step a stop must precede: a lock wait, a write
to sysfs or a state file, the start of the document.

Only `_signal`, the C half of the signal module, is imported: `signal` imports enum,
which costs a boot replay's start-up more than everything here (#30).
"""

from __future__ import annotations

import _signal
import sys

TYPE_CHECKING = False  # typing's, without importing typing (nor collections, before the handler is set)
if TYPE_CHECKING:
    from _thread import LockType
    from collections.abc import Callable, Sequence

_ENDING = (_signal.SIGTERM, _signal.SIGHUP)
_STOPS = (_signal.SIGINT, *_ENDING)  # what ends the process while Python exits (`exiting`)
# A started document whose write has not moved for this long after a stop is cut: its reader is not reading.
STUCK_SECONDS = 2.0


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
    late = 0  # a stop that came once the document was started: it has STUCK_SECONDS of no progress to finish
    written = -1  # the write's progress at the last look, while `late` (`_progress`)
    still = 0  # looks in a row that found no progress (by the loop's own count, which may lag one write)
    sent = 0  # the bytes `write_document` passed to the kernel
    program = False  # the program's handler is set (`stop_with_a_document`): SIGINT joins it once the document starts
    finished = False  # `write_document` wrote all of it: no look is due
    dropped: KeyboardInterrupt | None = None  # a stop Python printed and dropped, not raised again yet
    deferred = 0  # undoings running (tunectl.system.interrupts): a dropped stop waits for their end too


def _stop(signum: int, frame: object) -> None:
    if _Said.done:  # the document has started: it may finish, in bounded time
        _stop_late(signum)
    elif not _Said.stop:  # a stop being said already: a second changes nothing
        _Said.stop = signum
        raise Terminated(signum)


def _stop_late(signum: int) -> None:
    if _Said.late:  # a second stop: the caller will not wait
        _end(signum)
    _Said.late, _Said.written, _Said.still = signum, _progress()[0], 0
    _signal.signal(_signal.SIGALRM, _look)
    _signal.setitimer(_signal.ITIMER_REAL, STUCK_SECONDS)


def _look(signum: int, frame: object) -> None:
    """STUCK_SECONDS after a late stop (or the last look): the document's write moved since, or the process ends.

    The alarm interrupts the blocked write(2) (Python's handlers are set without SA_RESTART): a pipe write returns
    the bytes it wrote so far, so wchar has counted them; one that wrote nothing since has a reader not reading.
    The loop's own count is added to only once that write has returned, which may be after this handler ran: it
    ends the process after two looks in a row without progress."""
    if _Said.finished:  # an alarm already due as the write ended: no new one (Python's exit would die of it)
        return
    now, exact = _progress()
    if now == _Said.written:
        _Said.still += 1
        if exact or _Said.still >= 2:
            _end(_Said.late)
    else:
        _Said.still = 0
    _Said.written = now
    _signal.setitimer(_signal.ITIMER_REAL, STUCK_SECONDS)


def _progress() -> tuple[int, bool]:
    """How far the document's write has come: write(2)'s bytes of /proc/self/io (exact), or where that cannot be
    read the bytes `write_document` counted (False: may lag by the write in progress)."""
    wchar = _written()
    return (wchar, True) if wchar >= 0 else (_Said.sent, False)


def write_document(stream: object, text: str) -> bool:
    """Write the started document to `stream`'s file (the program's stdout) by a loop that counts what the kernel
    took (`_progress`'s fallback); False, nothing written, when `stream` has no file (a StringIO)."""
    import os

    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    stream.flush()  # type: ignore[attr-defined]
    data = memoryview(text.encode(getattr(stream, "encoding", None) or "utf-8",
                                  getattr(stream, "errors", None) or "strict"))
    while data:
        n = os.write(fd, data)
        _Said.sent += n
        data = data[n:]
    _Said.finished = True
    if _Said.late:  # the alarm a late stop armed is not needed now: once Python exits it would kill (SIGALRM)
        _signal.setitimer(_signal.ITIMER_REAL, 0)
    return True


def started() -> bool:
    """The one document is being written (`said`)."""
    return _Said.done


def _written() -> int:
    """The bytes this process has passed to write(2) (wchar of /proc/self/io), -1 when unknown."""
    try:
        with open("/proc/self/io", "rb") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(b"wchar:"))
    except (OSError, ValueError, StopIteration):
        return -1


def _end(signum: int) -> None:
    """The process ends now by `signum`'s default action: no buffer flushed, nothing more written, the signal's
    exit status (143, 129), as before the handler was set."""
    import os

    _signal.setitimer(_signal.ITIMER_REAL, 0)
    _signal.signal(signum, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, (signum,))
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the signal ended the process as kill returned


def noting_dropped_stops() -> None:
    """From now on a stop (Ctrl-C's KeyboardInterrupt, Terminated) Python would print as "Exception ignored" and
    drop is kept for `stop_not_said` instead; other such exceptions are printed as before."""
    before = sys.unraisablehook

    def note(unraisable) -> None:  # sys.UnraisableHookArgs
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            if _Said.dropped is None:
                _Said.dropped = unraisable.exc_value
            return
        before(unraisable)

    if getattr(sys.unraisablehook, "notes_stops", False):
        return
    note.notes_stops = True  # type: ignore[attr-defined]
    sys.unraisablehook = note


def stop_not_said() -> None:
    """Raise again a stop Python dropped (`noting_dropped_stops`), once: called before a step a stop must come
    before (a lock wait, a write to sysfs or a state file, the document's start). Else nothing.

    Not inside an undoing (it runs to its end; the next step after raises it), nor once the document started."""
    stop = _Said.dropped
    if stop is None or _Said.deferred or _Said.done:
        return
    _Said.dropped = None
    raise Terminated(stop.signum) if isinstance(stop, Terminated) else KeyboardInterrupt()


class Deferring:
    """Inside, `stop_not_said` raises nothing (tunectl.system.interrupts.interrupts_deferred: an undoing)."""

    def __enter__(self) -> None:
        _Said.deferred += 1

    def __exit__(self, *exc: object) -> None:
        _Said.deferred -= 1


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
    _Said.program = True


def stops_with_a_document() -> bool:
    """The program's handler is in place: a command needs no handler of its own for SIGTERM and SIGHUP."""
    return _signal.getsignal(_signal.SIGTERM) is _stop


def exiting(code: int) -> None:
    """The program's document is written and main returned `code`: the process exits with that code, and a stop
    from now on ends it with that code at once (none is left to bound: main wrote all it had).

    Python's exit joins the threads still running and runs the atexit handlers, which may take long or hang (a
    thread that never ends, a slow flush): a stop then ends the process at once by `os._exit(code)`, the rest of
    the exit not run, so a service stop or a `timeout` ends it without SIGKILL, with the code of the document the
    reader has. Then Python gives every handler it set back to the default action (its signal module's
    finalization) and tears down the modules, milliseconds on a command that loaded many: a SIGTERM the reader
    sent on seeing the whole document (a service stop, a `timeout` as it ran out) ended the process by the signal
    then, exit 143 after a whole result that said 0, one run in seven.

    So the main thread blocks the stops from here to its end, and a thread of its own takes them (sigwait) and
    ends the process: not Python's handlers, which run only in the main thread between two of its steps (a stop
    that came as it went to sleep in a lock wait was taken by none until the next stop), nor after the signal
    module's finalization. Once Python is finalizing that thread cannot run Python code any more (it ends as it
    asks for the interpreter): a stop it takes then changes nothing, the exit keeps main's code. tunectl's other
    threads have the stops blocked for their whole life (tunectl.system.interrupts.threads_without_stops), so
    none takes one; a thread a library started without that could. stdout and stderr are flushed first (a flush
    held by a reader not reading is still ended by a second stop, as before). A signal the process was started
    ignoring stays ignored. Only under --json (the program's handler): without it, a stop ends the process by its
    default action, as ever."""
    if not _Said.program:
        return
    import _thread  # built in, loaded with Python
    import contextlib  # loaded by now: the command has run

    for stream in (sys.stdout, sys.stderr):
        # a closed stream, a reader gone: what it means was said before; Python's own exit finds it as ever
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    stops = {sig for sig in _STOPS if _signal.getsignal(sig) != _signal.SIG_IGN}
    # blocked before the thread starts: it inherits the mask, as sigwait needs (and no alarm is due any more)
    _signal.pthread_sigmask(_signal.SIG_BLOCK, (*_STOPS, _signal.SIGALRM))
    _signal.setitimer(_signal.ITIMER_REAL, 0)
    if stops:
        import os

        # No thread to be had (a pids cgroup at its limit: systemd's TasksMax on a service or on udev's worker, a
        # container's pids.max): the stops stay blocked to the end, the exit keeps main's code (a hang then needs
        # SIGKILL, as before this thread). Never a traceback after the whole document, exit 1.
        running = _thread.allocate_lock()
        running.acquire()
        with contextlib.suppress(RuntimeError):
            _thread.start_new_thread(_exit_on_a_stop, (stops, code, os._exit, running))
            # Main returns only once the thread runs. Python 3.11.2 (Debian 12's) frees every other thread's state
            # as it exits, a thread not started yet included: one the scheduler started late (a loaded machine)
            # then started on freed memory, and the process died by SIGSEGV after its whole document (1 run in
            # ~15-45 of an apply at idle CPU priority beside a busy one).
            running.acquire()


def _exit_on_a_stop(stops: set[int], code: int, exit_now: Callable[[int], object],
                    running: LockType) -> None:
    """The thread `exiting` starts: it says it runs (releases `running`), then at the first of `stops` the process
    ends with main's `code` (`exit_now`, os._exit, bound before the wait: the woken thread makes one call, no
    import while Python exits)."""
    running.release()
    _signal.sigwait(stops)
    exit_now(code)


def said() -> None:
    """The one document is about to be written: a stop from now on no longer raises (see the module's text).

    In the program (`stop_with_a_document`), Ctrl-C from now on is such a stop too: Python's KeyboardInterrupt
    raised inside the document's write would be followed by an `interrupted` document after part of the result."""
    _Said.done, _Said.finished = True, False
    if _Said.program and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _stop)
