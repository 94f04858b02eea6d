"""The state lock's waiting side: who holds it, and a wait that says so and can be bounded.

The holder writes one line into the lock file once it has the flock
(``tunectl apply (pid 4242, since 2026-01-01T10:00:00Z)``); a run that finds the
lock taken reads that line to tell the user whom it waits for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from tunectl.errors import StateError
from tunectl.system.termination import stop_not_said


def utc_now() -> str:
    """Now, in UTC, to the second (``2026-01-01T10:00:00Z``): time's, not datetime's (~1.5 ms to import)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def acquire(fd: int, lock: Path, command: str, wait_seconds: float | None,
            on_wait: Callable[[str], None] | None) -> None:
    """flock `fd`, saying who holds it while we wait (at most `wait_seconds`); then write who we are into it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        stop_not_said()  # a stop Python dropped on the way here must not wait for the lock
        held_by = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another tunectl run"
        bound = f" (at most {wait_seconds:g} s, --wait)" if wait_seconds is not None else ""
        if on_wait is not None:
            on_wait(f"tunectl: waiting for the lock {lock}{bound}: held by {held_by}")
        if wait_seconds is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            _wait(fd, lock, held_by, wait_seconds)
    since = utc_now()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{command} (pid {os.getpid()}, since {since})\n".encode(), 0)


def _wait(fd: int, lock: Path, held_by: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StateError(f"the lock {lock} is still held by {held_by} after {seconds:g} s; nothing was done",
                                 hint="wait for that run to end, or give a longer --wait") from None
            time.sleep(0.05)


def holder(lock: Path) -> str | None:
    """Who holds `lock` right now, or None when nobody does (or there is no lock file)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            return os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another tunectl run"
    finally:
        os.close(fd)
