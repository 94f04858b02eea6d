"""SIGTERM as an interruption, and a stretch no signal may cut short.

Python's default for SIGTERM ends the process at once: no `finally` runs. A command
that made something it must unmake (bench's changed settings, `explain --try`'s loop
devices, verity devices and mounts) turns SIGTERM (a service stop, `timeout`) into
`Terminated`, a KeyboardInterrupt, while it holds them; its undoing runs with Ctrl-C and
SIGTERM ignored (a second Ctrl-C would stop it half way; programs it starts then ignore
them too), and the command exits 143 (129 for SIGHUP) as a shell reports a process the signal ended.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

# SIGHUP too: the terminal went away (an ssh session dropped) and Python's default would end the process as abruptly.
_ENDING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service stop, `timeout`) or SIGHUP (the terminal closed): handled like Ctrl-C; exit 128 + the
    signal's number (143, 129)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum
        self.exit_code = 128 + signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def _handling(handlers: dict[int, Callable | int]) -> Iterator[None]:
    """`handlers` in place inside the block, the old ones given back after; in the main thread only (elsewhere
    nothing changes: only the main thread may set a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def sigterm_interrupts() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise Terminated inside the block (in the main thread; elsewhere nothing changes)."""
    # A signal the process was started ignoring stays ignored: `nohup tunectl bench` must outlive its terminal.
    return _handling({sig: _raise_terminated for sig in _ENDING if signal.getsignal(sig) is not signal.SIG_IGN})


def interrupts_deferred() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C, SIGTERM and SIGHUP are ignored inside the block: an undoing stopped half way is the one outcome to
    avoid."""
    return _handling({sig: signal.SIG_IGN for sig in (signal.SIGINT, *_ENDING)})


@contextlib.contextmanager
def undoing() -> Iterator[contextlib.ExitStack]:
    """An ExitStack for undo steps, unwound (last first) with Ctrl-C and SIGTERM ignored, whatever ended the block."""
    stack = contextlib.ExitStack()
    try:
        yield stack
    finally:
        with interrupts_deferred():
            stack.close()
