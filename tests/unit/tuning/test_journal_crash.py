"""Runs killed at each counted step in turn, not at random moments: apply, apply of another profile, rollback,
apply.

tests/root/tuning/test_journal_kill.py kills real runs at random moments, so a window a few system calls wide is
hit one run in many (a CI run once met the rotation's `.journal.json.1.link` left behind; 25bc1e3). Here each of
these steps is, in turn, the moment a forked child running the commands dies (`os._exit`: no `finally`, no
handler, as under SIGKILL): a file's creation (a temp file, the lock), a sync, a link, a rename, an unlink, the
lock's line, a sysfs write. Not counted, as a death there leaves only what one at the counted step before or
after it leaves: a directory's creation (an empty directory), a temp file's mode, owner and data (a temp file
the next lock sweeps). After each death the state must read without a fallback or warning, a rollback must bring
back every original value and say nothing but its report, and no temp file or link of a writer may stay in the
state directory.

A second test kills two runs in a row, each after a save's rotation: a state one kill cannot leave (9738a58).
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
from tunectl.system.state import ACTIVE, JOURNAL, StateStore
from tunectl.tuning import intent, journal

# The steps counted (with os.open with O_CREAT, below, and a sysfs write): a state file's link, rename, unlink and
# sync, and the lock's line. A step that only reads changes nothing a later run could meet.
STEPS = ("replace", "link", "unlink", "rename", "fsync", "ftruncate", "pwrite")
SAVES = (f".{JOURNAL}.", f".{ACTIVE}.")  # the temp file of a save: created after the save's rotation
# A first save, saves over one and two generations, and an apply after a full rollback: its saves rotate an
# empty journal and a record of nothing applied, which a rollback after it has no reason to save again.
COMMANDS = [("apply", "-p", "p1"), ("apply", "-p", "p2"), ("rollback",), ("apply", "-p", "p1")]
DIED, DONE, FAILED = 9, 0, 3
CHILD_SECONDS = 60  # a child's commands take well under a second each


def _die_at(step: int, saves: bool = False) -> list[int]:
    """From now on this process counts its steps and ends at step `step` (0: never), before taking it; with
    `saves`, it counts only the creations of a save's temp file (a death after that save's rotation).

    A sysfs write is one step: the kernel makes its effect whole (a scheduler switch replaces the knobs), so the
    fake kernel's own file operations inside it are not steps of tunectl's."""
    count, in_kernel = [0], [0]

    def step_taken(save: bool = False) -> None:
        if saves and not save:
            return
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
            step_taken(os.path.basename(path).startswith(SAVES))
        return real_open(path, flags, *args, **kwargs)

    for name in STEPS:
        setattr(os, name, counted(getattr(os, name)))
    os.open = opening
    FakeKernel.write = kernel_write(FakeKernel.write)
    return count


def _run_until(pair: Pair, step: int, saves: bool = False) -> tuple[int, int]:
    """The commands in a child that dies at `step`: (how it ended, how many steps it took)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns to pytest
        code = FAILED
        try:
            os.close(r)
            count = _die_at(step, saves)
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
        _assert_recovers(pair, f"killed at step {step}")


@pytest.mark.slow
def test_two_runs_killed_after_a_rotation_leave_nothing_behind(fake_root: Path) -> None:
    """A save killed after its rotation leaves NAME and NAME.1 one file; the next run's save killed there too
    leaves NAME, NAME.1 and NAME.2 one file, and the rollback's save must still move each generation. One kill
    cannot make that state: with a rotation's plain renames (before 9738a58) the test above passes and this one
    fails (the rollback left `.journal.json.1.link`)."""
    code, saves = _run_until(Pair(fake_root / "whole"), 0, saves=True)
    assert code == DONE and saves >= 6, (code, saves)
    for save in range(1, saves + 1):
        pair = Pair(fake_root / f"save{save}")
        assert _run_until(pair, save, saves=True)[0] == DIED, f"save {save}: the child did not die there"
        assert _run_until(pair, 1, saves=True)[0] == DIED, f"after save {save}: the second child saved nothing"
        _assert_recovers(pair, f"killed at save {save}, then at the next run's first save")


def _assert_recovers(pair: Pair, killed: str) -> None:
    """The state reads whole, a rollback restores every original and says only its report, nothing is left."""
    store = StateStore(pair.state)
    if pair.state.exists():  # each file was replaced whole: the newest generation is intact
        journal.load(store)
        intent.load(store)
        assert store.warnings == [], (killed, store.warnings)
    r = pair.fresh()("rollback")
    assert (r.code, r.err) == (0, ""), (killed, r.code, r.err)
    assert pair.snap() == pair.originals, f"{killed}: an original was lost"
    if pair.state.exists():
        left = [name for name in os.listdir(pair.state) if name.startswith(".")]
        assert left == [], f"{killed}: {left} left in the state directory"
