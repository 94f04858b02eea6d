"""A stop (Ctrl-C, SIGTERM, SIGHUP) asked for while an undoing runs waits for the undoing's end, then acts: it is
neither lost (the run went on before) nor allowed to cut the undoing short; and it survives other threads being
alive: tunectl's threads block the stops for their whole life, so one held by the undoing stays pending until the
main thread takes it (taken by another thread, it could be noted after the default handler is back, and lost)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tunectl.status import Status
from tunectl.system import interrupts
from tunectl.system.interrupts import Terminated, interrupts_deferred, sigterm_interrupts, threads_without_stops

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
NAMES = [signal.Signals(sig).name for sig in STOPS]
# SIGINT's needs its default disposition (tests/conftest.py: an error with one message where pytest started with it
# ignored)
STOP_PARAMS = [pytest.param(sig, id=name, marks=[pytest.mark.sigint] if sig == signal.SIGINT else [])
               for sig, name in zip(STOPS, NAMES)]


@contextlib.contextmanager
def another_thread() -> Iterator[threading.Thread]:
    """A non-daemon thread alive for the block, as tunectl starts one (apply's writers, align's parted readers,
    preload's inode workers): with the stops blocked for its whole life. (A thread that takes a stop held by the
    undoing can note it only after the default handler is back: Python drops it, the stop is lost. tunectl's
    processes run no thread it did not start.)"""
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="bystander")
    with threads_without_stops():
        thread.start()
    try:
        yield thread
    finally:
        done.set()
        thread.join()


@pytest.fixture
def handlers():
    """The test's handlers for SIGTERM and SIGHUP are given back whatever happens (sigterm_interrupts changes them)."""
    old = {sig: signal.getsignal(sig) for sig in STOPS}
    yield
    for sig, handler in old.items():
        signal.signal(sig, handler)


def blocked() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, ()))


def child_sets(field: str) -> set[int]:
    """The signals a program started now has in `field` of /proc/self/status (SigBlk: blocked, SigIgn: ignored)."""
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    bits = int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":")), 16)
    return {sig for sig in STOPS if bits & (1 << (sig - 1))}


@pytest.mark.parametrize("bystander", [False, True], ids=["alone", "another-thread-alive"])
@pytest.mark.parametrize("sig", STOP_PARAMS)
def test_a_stop_during_the_undoing_acts_once_it_is_done(handlers, sig, bystander):
    steps: list[str] = []
    with contextlib.ExitStack() as threads:
        if bystander:
            assert threads.enter_context(another_thread()).is_alive()
        with pytest.raises(KeyboardInterrupt) as stopped, sigterm_interrupts():
            with interrupts_deferred():
                steps.append("umount")
                os.kill(os.getpid(), sig)
                steps.extend(["veritysetup close", "losetup --detach"])  # the rest of the undoing still runs
            steps.append("next variant")  # the stop acts here: this never runs
    assert steps == ["umount", "veritysetup close", "losetup --detach"]
    if sig == signal.SIGINT:
        assert type(stopped.value) is KeyboardInterrupt
    else:
        assert isinstance(stopped.value, Terminated) and stopped.value.exit_code == 128 + sig
    assert signal.SIGINT not in blocked() and signal.SIGTERM not in blocked()


@pytest.mark.sigint  # SIGINT's handler is Python's default one before and after
def test_handlers_and_mask_are_given_back_and_nothing_is_raised_when_no_stop_came(handlers):
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    mask = blocked()
    with interrupts_deferred():
        assert set(STOPS) <= blocked()
        assert all(signal.getsignal(sig) is not before[sig] for sig in STOPS)
    assert {sig: signal.getsignal(sig) for sig in STOPS} == before and blocked() == mask


def started_status() -> dict[str, int]:
    """A program started by tunectl's runner now, as /proc/self/status and stat show it: its blocked, ignored and
    caught signals (SigBlk, SigIgn, SigCgt, as bits) and its process group."""
    from tunectl.system.runner import run

    status = run(["sh", "-c", "echo $$; exec cat /proc/self/status /proc/self/stat"]).stdout
    fields = {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Sig")}
    lines = status.strip().splitlines()
    pid, pgrp = int(lines[0]), int(lines[-1].rpartition(")")[2].split()[2])
    return {**{k: int(v, 16) for k, v in fields.items() if k in ("SigBlk", "SigIgn", "SigCgt")},
            "own_group": pgrp == pid and pgrp != os.getpgrp()}


@pytest.mark.sigint  # outside, a program starts with no stop ignored
def test_programs_started_in_the_undoing_get_the_default_stops_in_a_group_of_their_own(handlers):
    """A program started in the undoing (umount, losetup) inherited Ctrl-C, SIGTERM and SIGHUP blocked, and kept
    them blocked whatever it ran: now it starts with SIGTERM's default disposition and an empty blocked mask,
    as outside, and in a process group of its own, so the terminal's Ctrl-C to tunectl's group still cannot
    cut it short half way."""
    term = 1 << (signal.SIGTERM - 1)
    outside = started_status()
    assert outside["SigBlk"] == 0 and not outside["own_group"]
    with sigterm_interrupts(), interrupts_deferred():
        assert set(STOPS) <= blocked()  # the undoing itself still holds them
        inside = started_status()
        with interrupts_deferred():  # nested: the mask from before the outermost one
            nested = started_status()
    for child in (inside, nested):
        assert child["SigBlk"] == 0, hex(child["SigBlk"])
        assert not (child["SigIgn"] | child["SigCgt"]) & term  # SIGTERM: the default, it ends the program
        assert child["own_group"]
    assert started_status() == outside


@pytest.mark.sigint  # SIGHUP the only stop ignored
def test_a_hangup_ignored_from_the_start_stays_ignored(handlers):
    """`nohup`: a SIGHUP in the undoing is not recorded (nothing raised after it), and programs started there
    inherit it ignored as before."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with sigterm_interrupts(), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGHUP)
        assert child_sets("SigIgn") == {signal.SIGHUP}
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


def test_a_stop_in_a_nested_undoing_waits_for_the_outer_one(handlers):
    steps: list[str] = []
    with pytest.raises(Terminated), sigterm_interrupts():
        with interrupts_deferred():
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("inner")
            steps.append("outer")
        steps.append("after")
    assert steps == ["inner", "outer"]


def test_a_stop_that_came_just_before_the_undoing_does_not_skip_it(handlers, monkeypatch):
    """signal.signal first runs the handlers of signals already come: a SIGTERM's Terminated raised while the
    undoing sets its recorder must not skip the undoing (nor leave a recorder behind); it acts after it."""
    before = {sig: signal.getsignal(sig) for sig in STOPS}

    def comes() -> None:
        raise Terminated(signal.SIGTERM)  # as the SIGTERM handler run first by signal.signal would

    with sigterm_interrupts():
        assert undoing_as_a_stop_comes(monkeypatch, comes) == (["undone"], 143)
    assert {sig: signal.getsignal(sig) for sig in STOPS} == before


def undoing_as_a_stop_comes(monkeypatch, comes: Callable[[], None]) -> tuple[list[str], int]:
    """An undoing whose first signal.signal call (setting its recorder) calls `comes` first, as a stop that came
    just then: the steps run, and the exit code of the Terminated raised (none raised: the test fails)."""
    real = signal.signal
    pending = [comes]

    def set_handler(sig, handler):
        if pending:
            pending.pop()()
        return real(sig, handler)

    steps: list[str] = []
    with pytest.raises(Terminated) as stopped:
        monkeypatch.setattr(signal, "signal", set_handler)
        try:
            with interrupts_deferred():
                steps.append("undone")
            steps.append("after")
        finally:
            monkeypatch.setattr(signal, "signal", real)
    return steps, stopped.value.exit_code


def test_a_stop_the_programs_handler_raised_just_before_the_undoing_still_acts_after_it(handlers, monkeypatch):
    """Under --json the program's own handler (tunectl.system.termination) acts once: a SIGTERM it turned into
    Terminated as the undoing set its recorder must act after the undoing, not be given to that handler again
    (which, having acted, ignores it: the stop was lost and the command went on)."""
    from tunectl.system import termination

    monkeypatch.setattr(termination._Said, "done", False)
    monkeypatch.setattr(termination._Said, "stop", 0)
    monkeypatch.setattr(termination._Said, "program", False)  # set by the call below: given back after the test, or
    # a later test's document (`said`) would put the program's handler on SIGINT for the rest of the session
    termination.stop_with_a_document()
    # the SIGTERM comes now: the program's handler runs in os.kill, as signal.signal would run it first
    assert undoing_as_a_stop_comes(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM)) == (["undone"], 143)
    assert signal.getsignal(signal.SIGTERM) is termination._stop


PROGRAM = """
import os, signal, sys, threading
from tunectl.system.interrupts import interrupts_deferred, threads_without_stops
sig = int(sys.argv[1])
signal.signal(signal.SIGINT, signal.SIG_DFL)
done = threading.Event()
bystander = threading.Thread(target=done.wait)  # not a daemon: the process waits for it at exit
with threads_without_stops():  # as tunectl starts its threads
    bystander.start()
try:
    with interrupts_deferred():
        os.kill(os.getpid(), sig)
        print("undone", flush=True)
    print("went on", flush=True)
finally:
    done.set()
"""


@pytest.mark.parametrize("sig", STOPS, ids=NAMES)
def test_a_process_whose_default_ends_it_ends_by_the_signal_after_the_undoing(sig):
    """With the default handler (no sigterm_interrupts), the process ends as the signal ends it (a shell shows
    128 + its number) once the undoing is done, another thread alive or not."""
    root = str(Path(interrupts.__file__).parents[2])
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(int(sig))], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": root}, cwd=root)
    assert (done.returncode, done.stdout) == (-sig, "undone\n"), done.stderr


def task_sets(tid: int, field: str) -> set[int]:
    """The stops in `field` of this process's thread `tid` (SigBlk: blocked) or of the process (ShdPnd: pending)."""
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    bits = int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":")), 16)
    return {sig for sig in STOPS if bits & (1 << (sig - 1))}


def test_a_thread_tunectl_starts_blocks_the_stops_for_its_whole_life():
    mask = blocked()
    with another_thread() as thread:
        assert blocked() == mask  # the starting thread's mask is given back
        assert task_sets(thread.native_id, "SigBlk") == set(STOPS)


def test_a_stop_held_by_the_undoing_stays_pending_in_the_process_not_taken_by_another_thread(handlers):
    """Taken by the bystander, it could be noted too late (after the default handler is back) and lost: held
    pending, it is delivered to the main thread as the undoing takes its mask back. The bystander answers a
    ping after the kill: back in user space, it would have taken the signal by then if it could."""
    ping, pong, done = threading.Event(), threading.Event(), threading.Event()

    def answer() -> None:
        ping.wait()
        pong.set()
        done.wait()

    bystander = threading.Thread(target=answer, name="bystander")
    with threads_without_stops():
        bystander.start()
    try:
        with pytest.raises(Terminated), sigterm_interrupts():
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                ping.set()
                answered = pong.wait(30)
                pending = task_sets(threading.get_native_id(), "ShdPnd")  # asserted after: the stop would win
            pytest.fail("the stop did not act after the undoing")
    finally:
        ping.set()
        done.set()
        bystander.join()
    assert answered and pending == {signal.SIGTERM}
    assert task_sets(threading.get_native_id(), "ShdPnd") == set()


def test_the_threads_of_a_parallel_apply_and_align_block_the_stops(monkeypatch):
    from tunectl.align import check
    from tunectl.tuning import apply

    seen: list[set[int]] = []
    monkeypatch.setattr(apply, "_apply_device", lambda sysfs, settings: seen.append(blocked()) or [])
    plan = [SimpleNamespace(device=d, attribute="scheduler", status=Status.CHANGE) for d in ("sda", "sdb", "sdc")]
    apply.apply_settings(None, plan, workers=3)  # type: ignore[arg-type]

    class Parted:
        def print_table(self, node, mapped=False):
            seen.append(blocked())
            return SimpleNamespace(has_table=False)

    check._read_tables(Parted(), {"sda": "/dev/sda", "sdb": "/dev/sdb"}, named=False, workers=2)  # type: ignore[arg-type]
    assert len(seen) == 5 and all(set(STOPS) <= mask for mask in seen), seen


def test_in_threads_gives_each_result_in_order_and_raises_the_first_error_once_all_are_done() -> None:
    """apply's writers and align's parted readers: every item runs, with the stops blocked in its thread, whatever
    another raised; then the first error in the items' order (as ThreadPoolExecutor.map's results are read)."""
    from tunectl.system.interrupts import in_threads

    started = threading.Barrier(3, timeout=120)  # three at once: the work is spread over the threads

    def work(n: int) -> tuple[int, bool]:
        if n < 3:
            started.wait()
        return n * n, bool(blocked() >= set(STOPS))

    assert in_threads(work, list(range(7)), workers=3) == [(n * n, True) for n in range(7)]
    done: list[int] = []

    def failing(n: int) -> int:
        done.append(n)
        if n in (4, 2):
            raise ValueError(n)
        return n

    with pytest.raises(ValueError, match="^2$"):
        in_threads(failing, list(range(6)), workers=2)
    assert sorted(done) == list(range(6))
    assert in_threads(failing, [], workers=4) == []
