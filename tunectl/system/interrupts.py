"""SIGTERM as an interruption, and a stretch no signal may cut short.

Python's default for SIGTERM ends the process at once: no `finally` runs. A command
that made something it must unmake (bench's changed settings, `explain --try`'s loop
devices, verity devices and mounts) turns SIGTERM (a service stop, `timeout`) into
`Terminated`, a KeyboardInterrupt, while it holds them; its undoing runs with Ctrl-C,
SIGTERM and SIGHUP held back (a second Ctrl-C would stop it half way): one that comes then
is recorded and acted on once the undoing is done, so the command still stops. It exits
143 (129 for SIGHUP, 130 for Ctrl-C) as a shell reports a process the signal ended.
A program the undoing starts (umount, losetup) runs in a process group of its own, out of
reach of the terminal's Ctrl-C, with the signal mask and dispositions any program gets.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

from tunectl.system.termination import Deferring, Terminated, stops_with_a_document

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")
    R = TypeVar("R")

# SIGHUP too: the terminal went away (an ssh session dropped) and Python's default would end the process as abruptly.
_ENDING = (signal.SIGTERM, signal.SIGHUP)
_STOPS = (signal.SIGINT, *_ENDING)
_MASKS: list[set[int]] = []  # the main thread's signal mask before each undoing still running, the outermost first


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _swap(sig: int, handler: Callable | int | None) -> None:
    """signal.signal(sig, handler), done even when the handler of a signal already come, which signal.signal runs
    first, raises (the exception is raised after the swap)."""
    if handler is None:  # a handler not set from Python: nothing to give back
        return
    try:
        signal.signal(sig, handler)
    except KeyboardInterrupt:
        signal.signal(sig, handler)  # that signal has been handled: this time nothing runs first
        raise


def _swap_all(handlers: dict[int, Callable | int | None]) -> list[KeyboardInterrupt]:
    """Every handler of `handlers` set, whatever a signal's handler raised on the way: what they raised. (Else a
    SIGTERM's Terminated while SIGHUP's handler is given back would leave the block's handler behind.)"""
    raised = []
    for sig, handler in handlers.items():
        try:
            _swap(sig, handler)
        except KeyboardInterrupt as e:
            raised.append(e)
    return raised


@contextlib.contextmanager
def _handling(handlers: dict[int, Callable | int]) -> Iterator[None]:
    """`handlers` in place inside the block, the old ones given back after; in the main thread only (elsewhere
    nothing changes: only the main thread may set a handler)."""
    if not _in_main_thread():
        yield
        return
    old = {sig: signal.getsignal(sig) for sig in handlers}
    try:
        raised = _swap_all(handlers)
        if raised:
            raise raised[0]
        yield
    finally:
        raised = _swap_all(old)
        if raised:
            raise raised[0]


def sigterm_interrupts() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise Terminated inside the block (in the main thread; elsewhere nothing changes).

    Under the program's own handler (--json: `tunectl.system.termination`) they already do: it stays."""
    if stops_with_a_document():
        return _handling({})
    # A signal the process was started ignoring stays ignored: `nohup tunectl bench` must outlive its terminal.
    return _handling({sig: _raise_terminated for sig in _ENDING if signal.getsignal(sig) is not signal.SIG_IGN})


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait for the end of the block: an undoing stopped half way is the one outcome
    to avoid, and a stop asked for meanwhile must not be lost either.

    Inside, their handler only records them; after it (the old handlers given back) each one recorded is raised
    again, so it acts as if it came then: Terminated, KeyboardInterrupt, or the default's end of the process.
    One whose handler already ran as the block began (signal.signal runs it first) is what that handler raised,
    raised again: the program's --json handler acts only once, and sent to it again the stop would be lost.
    They are also blocked in the main thread's signal mask. A program the block starts (umount, losetup) would
    inherit that mask: it is started by `child_start` instead, with the mask from before the block and in a
    process group of its own (a Ctrl-C at the terminal reaches tunectl's whole group, and must not cut those
    short). Every thread tunectl starts blocks them too, for its whole life (`threads_without_stops`): one sent
    meanwhile stays pending in the process until the mask is taken back here, and is delivered to this thread
    in that very call, whose return runs the recorder. (Were another thread to take it, the kernel hands it
    over before that thread's C handler has noted it: preempted there, it would note it after the old handler,
    the default, is back, and Python drops such a signal, "ignored due to race condition": the stop lost.)
    A thread tunectl did not start (none in its processes) would still reopen that window. A signal ignored
    from the start stays ignored (`nohup`). In the main thread only; elsewhere nothing changes."""
    if not _in_main_thread():
        yield
        return
    came: list[int] = []

    def record(signum: int, frame: object) -> None:
        if signum not in came:
            came.append(signum)

    # None: a handler set outside Python, which it cannot give back
    old = {sig: signal.getsignal(sig) for sig in _STOPS if signal.getsignal(sig) not in (signal.SIG_IGN, None)}
    held = list(old)
    before: list[KeyboardInterrupt] = []  # what a stop that came just before raised as the recorder was set
    try:
        for e in _swap_all({sig: record for sig in held}):  # one that came just before: deferred as well
            before.append(e)
            record(getattr(e, "signum", signal.SIGINT), None)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # reads it
        _MASKS.append(mask)
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, held)
            with Deferring():  # nor is a stop Python dropped before raised inside (termination.stop_not_said)
                yield
        finally:
            _MASKS.pop()
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one held meanwhile is delivered (recorded) here
    finally:
        for e in _swap_all(old):
            record(getattr(e, "signum", signal.SIGINT), None)
        if before:  # its handler has acted already: what it raised is raised again, not the signal sent again
            raise before[0]  # (the program's --json handler acts once: sent again, the stop would be lost)
        for sig in came:  # to the usual handler now: raised (or the process ended) as if it came now
            signal.raise_signal(sig)


@contextlib.contextmanager
def threads_without_stops() -> Iterator[None]:
    """Threads started inside the block (`Thread.start`, an executor's `submit` or `map`) have Ctrl-C, SIGTERM and
    SIGHUP blocked for their whole life: a new thread inherits the mask of the one starting it, blocked here for
    the block's time only (keep it to the starts). Only the main thread (Python runs handlers there alone) then
    takes a stop sent to the process, so one held by `interrupts_deferred` cannot be taken by a thread that
    notes it too late (see there). One sent during the block itself waits for its end and acts then. SIGALRM too:
    the alarm that bounds a started document's write after a stop (tunectl.system.termination) must interrupt
    that write, in the main thread."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, (*_STOPS, signal.SIGALRM))  # SIGALRM: see termination._look
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def in_threads(work: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """`work` on each item in up to `workers` threads started without stops (`threads_without_stops`): the results
    in the items' order, once every item is done; the first item's exception (in the items' order) is raised then.
    A stop in the main thread while they run waits for them all (what they write is half done otherwise).
    ThreadPoolExecutor.map with its shutdown, without concurrent.futures's import of logging and queue (start-up)."""
    results: list[R | None] = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)
    todo = iter(range(len(items)))
    taking = threading.Lock()

    def worker() -> None:
        while True:
            with taking:
                i = next(todo, None)
            if i is None:
                return
            try:
                results[i] = work(items[i])
            except BaseException as e:  # noqa: BLE001 (raised in the main thread, below)
                errors[i] = e

    threads = [threading.Thread(target=worker, name=f"tunectl-{n}") for n in range(min(workers, len(items)))]
    with threads_without_stops():
        for t in threads:
            t.start()
    try:
        for t in threads:
            t.join()
    finally:
        for t in threads:
            t.join()
    for e in errors:
        if e is not None:
            raise e
    return results  # type: ignore[return-value]  # every item done without an error: each has its result


def child_start() -> Callable[[], None] | None:
    """What a program started now runs before it is executed (subprocess's `preexec_fn`), or None: nothing to do.

    Inside `interrupts_deferred` (in the main thread, where the stops are blocked) a program would start with
    Ctrl-C, SIGTERM and SIGHUP blocked, and keep them blocked: a SIGTERM sent to it (a service stop, `timeout`)
    would do nothing. It takes back the mask from before the undoing (its dispositions are the defaults, or
    ignored as tunectl's were from the start: `nohup`), and a process group of its own, so that a Ctrl-C at the
    terminal, sent to tunectl's whole group, still does not cut it short half way.
    """
    if not _MASKS or not _in_main_thread():
        return None
    mask = _MASKS[0]

    def start() -> None:
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return start


@contextlib.contextmanager
def undoing() -> Iterator[contextlib.ExitStack]:
    """An ExitStack for undo steps, unwound (last first) with Ctrl-C, SIGTERM and SIGHUP deferred to its end,
    whatever ended the block."""
    stack = contextlib.ExitStack()
    try:
        yield stack
    finally:
        with interrupts_deferred():
            stack.close()
