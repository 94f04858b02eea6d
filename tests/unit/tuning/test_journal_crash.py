"""Runs killed at every step they take, not at random moments: apply, apply of another profile, rollback, apply.

tests/root/tuning/test_journal_kill.py kills real runs at random moments, so a window a few system calls wide is
hit one run in many (a CI run once met the rotation's `.journal.json.1.link` left behind; 25bc1e3). Here each
step that changes a file (a state file's create, sync, link, rename, unlink; the lock's line; a sysfs write) is,
in turn, the moment a forked child running the commands dies (`os._exit`: no `finally`, no handler, as under
SIGKILL). After each death the state must read without a fallback or warning, a rollback must bring back every
original value and say nothing but its report, and no temp file or link of a writer may stay in the state
directory.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakesys import FakeKernel
from tests.journal_helpers import Pair
from tunectl.system.state import StateStore
from tunectl.tuning import intent, journal

# What changes a file on the way: a state file's link, rename, unlink and sync, the lock's line, and (os.open
# with O_CREAT, below) a temp file's creation. A step that only reads changes nothing a later run could meet.
STEPS = ("replace", "link", "unlink", "rename", "fsync", "ftruncate", "pwrite")
# A first save, saves over one and two generations, and an apply after a full rollback: its saves rotate an
# empty journal and a record of nothing applied, which a rollback after it has no reason to save again.
COMMANDS = [("apply", "-p", "p1"), ("apply", "-p", "p2"), ("rollback",), ("apply", "-p", "p1")]
DIED, DONE, FAILED = 9, 0, 3
CHILD_SECONDS = 60  # a child's commands take well under a second each


def _die_at(step: int) -> list[int]:
    """From now on this process counts its steps and ends at step `step` (0: never), before taking it.

    A sysfs write is one step: the kernel makes its effect whole (a scheduler switch replaces the knobs), so the
    fake kernel's own file operations inside it are not steps of tunectl's."""
    count, in_kernel = [0], [0]

    def step_taken() -> None:
        count[0] += 1
        if count[0] == step:
            os._exit(DIED)

    def counted(real: Callable) -> Callable:
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not in_kernel[0]:
                step_taken()
            return real(*args, **kwargs)
        return call

    def kernel_write(real: Callable) -> Callable:
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            step_taken()
            in_kernel[0] += 1
            try:
                return real(*args, **kwargs)
            finally:
                in_kernel[0] -= 1
        return call

    real_open = os.open

    def opening(path, flags, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if flags & os.O_CREAT and not in_kernel[0]:
            step_taken()
        return real_open(path, flags, *args, **kwargs)

    for name in STEPS:
        setattr(os, name, counted(getattr(os, name)))
    os.open = opening
    FakeKernel.write = kernel_write(FakeKernel.write)
    return count


def _run_until(pair: Pair, step: int) -> tuple[int, int]:
    """The commands in a child that dies at `step`: (how it ended, how many steps it took)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns to pytest
        code = FAILED
        try:
            os.close(r)
            count = _die_at(step)
            if all(pair.fresh()(*argv).code == 0 for argv in COMMANDS):
                os.write(w, str(count[0]).encode())
                code = DONE
        finally:
            os._exit(code)
    os.close(w)
    # A fork of a process with other threads can deadlock in the child (a lock one of them held at the fork): a
    # child silent that long is ended, and the test fails at that step instead of hanging the run.
    if not select.select([r], [], [], CHILD_SECONDS)[0]:
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(r) as f:
        taken = f.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return code, int(taken or 0)


@pytest.mark.slow
def test_a_run_killed_at_any_step_loses_no_original_and_leaves_nothing_behind(fake_root: Path) -> None:
    code, steps = _run_until(Pair(fake_root / "whole"), 0)
    assert code == DONE and steps > 30, (code, steps)  # the commands run whole, and take that many steps
    for step in range(1, steps + 1):
        pair = Pair(fake_root / f"step{step}")
        assert _run_until(pair, step)[0] == DIED, f"step {step}: the child did not die there"
        store = StateStore(pair.state)
        if pair.state.exists():  # each file was replaced whole: the newest generation is intact
            journal.load(store)
            intent.load(store)
            assert store.warnings == [], (step, store.warnings)
        r = pair.fresh()("rollback")
        assert (r.code, r.err) == (0, ""), (step, r.code, r.err)
        assert pair.snap() == pair.originals, f"killed at step {step}: an original was lost"
        if pair.state.exists():
            left = [name for name in os.listdir(pair.state) if name.startswith(".")]
            assert left == [], f"killed at step {step}: {left} left in the state directory"
