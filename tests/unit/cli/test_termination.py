"""SIGTERM and SIGHUP under --json from the program's first line: one document, or (before Python ran that line)
none and the signal's own end. Each test runs `python -m tunectl` as a process and stops it."""

from __future__ import annotations

import fcntl
import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.harness import REPO, validate_document

# The program, with a hook that sends the process a signal at a chosen moment: when Python first looks up module
# `at` (while the program loads tunectl, builds the parser, loads the command, writes the result), or right after
# the result was written (`at` = "written"). It also records which handler SIGTERM had when main looked up its
# first module (tunectl.errors): the program's, set before main imports anything. `drop:NAME`: the signal is sent
# inside a weakref callback as NAME is looked up, so the handler's Terminated is one Python prints and drops (as
# in importlib's module-lock callback); `seen`.dropped then records what Python dropped.
CHILD = textwrap.dedent("""
    import os, sys, weakref, _signal
    at, signum, seen = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
    del sys.argv[1:4]

    class Dropped:
        pass

    def noted(hook):
        def note(unraisable):
            with open(seen + ".dropped", "a") as f:
                f.write(type(unraisable.exc_value).__name__ + "\\n")
            hook(unraisable)
        return note

    class Hook:
        def find_spec(self, name, path=None, target=None):
            if name == "tunectl.errors" and not os.path.exists(seen):
                with open(seen, "w") as f:
                    handler = _signal.getsignal(_signal.SIGTERM)
                    f.write(getattr(handler, "__module__", "") + "." + getattr(handler, "__name__", str(handler)))
            if name in at:
                at.remove(name)  # once for each name given
                os.kill(os.getpid(), signum)
            if "drop:" + name in at:
                at.remove("drop:" + name)
                sys.unraisablehook = noted(sys.unraisablehook)
                weakref.ref(Dropped(), lambda ref: os.kill(os.getpid(), signum))  # runs at once
            return None

    class Stream:  # stdout that is signalled once the result has been written
        def __init__(self, stream):
            self.stream = stream
        def write(self, text):
            n = self.stream.write(text)
            os.kill(os.getpid(), signum)
            return n
        def __getattr__(self, name):
            return getattr(self.stream, name)

    sys.meta_path.insert(0, Hook())
    if at == ["written"]:
        sys.stdout = Stream(sys.stdout)
    import runpy
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")



def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TUNECTL_STATE_DIR": str(tmp_path / "state")}


def _one_document(out: str, code: int) -> dict:
    doc = json.loads(out)  # exactly one: json.loads refuses a second document or half of one
    validate_document(doc)
    if doc["format"] == "tunectl-error":
        assert doc["error"]["exit_code"] == code
    return doc


@pytest.mark.parametrize("at", ["tunectl.errors", "argparse", "tunectl.profile.cli", "tunectl.report"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_while_the_program_starts_gets_the_one_document(tmp_path: Path, at: str, signum: int) -> None:
    # Before, the handler was set only once the command ran: a SIGTERM while Python loaded tunectl or argparse
    # built the parser (0.2-0.5 s on a loaded machine) ended the process with no document at all.
    seen = tmp_path / "seen"
    proc = subprocess.run([sys.executable, "-c", CHILD, at, str(signum), str(seen), "--json", "profile", "show",
                           "balanced"], capture_output=True, text=True, env=_env(tmp_path), cwd=REPO, timeout=120)
    assert proc.returncode == 128 + signum, (proc.returncode, proc.stderr)
    doc = _one_document(proc.stdout, proc.returncode)
    assert doc["format"] == "tunectl-error" and doc["error"]["code"] == "terminated"
    assert proc.stderr == "tunectl: terminated\n"
    # the program's handler was in place before main looked up its first module
    assert seen.read_text() == "tunectl.system.termination._stop"


def test_a_stop_after_the_result_is_written_leaves_that_document_alone(tmp_path: Path) -> None:
    # The document is on its way: a stop then must not add a second (the error document after the result) nor
    # cut the first; the process ends with the result's own exit code.
    proc = subprocess.run([sys.executable, "-c", CHILD, "written", str(int(signal.SIGTERM)), str(tmp_path / "seen"),
                           "--json", "profile", "show", "balanced"], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _one_document(proc.stdout, 0)["format"] == "tunectl-profile-show" and proc.stderr == ""


# The program, with an object whose __del__ sends the process a signal: kept by a module of its own, it goes when
# Python's exit tears the modules down, after that exit gave every handler Python set back to the default action.
AT_EXIT = textwrap.dedent("""
    import os, sys, types, runpy
    signum = int(sys.argv[1])
    del sys.argv[1]

    class Late:
        def __del__(self):
            os.kill(os.getpid(), signum)

    kept = types.ModuleType("late_stop")
    kept.late = Late()
    sys.modules["late_stop"] = kept
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, pytest.param(signal.SIGINT, marks=pytest.mark.sigint)])
@pytest.mark.parametrize("argv", [("profile", "show", "balanced"), ("profile", "show", "no-such-profile")])
def test_a_stop_while_python_exits_after_the_document_leaves_its_exit_code(tmp_path: Path, signum: int,
                                                                          argv: tuple[str, ...]) -> None:
    # A reader that stops the process once it has the whole document (a service stop, `timeout` running out)
    # caught it in Python's exit one run in seven: the handlers were the default again, and the process ended by
    # the signal (exit 143) after a whole result that said 0.
    proc = subprocess.run([sys.executable, "-c", AT_EXIT, str(int(signum)), "--json", *argv], capture_output=True,
                          text=True, env=_env(tmp_path), cwd=REPO, timeout=120)
    code = 0 if argv[-1] == "balanced" else 2
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert _one_document(proc.stdout, code)["format"] == ("tunectl-profile-show" if code == 0 else "tunectl-error")


def test_without_json_a_stop_while_python_exits_still_ends_it_by_the_signal(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", AT_EXIT, str(int(signal.SIGTERM)), "profile", "show", "balanced"],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=REPO, timeout=120)
    assert proc.returncode == -signal.SIGTERM, proc.stderr


# The program, with what holds Python's exit for good, added while the command runs (as tunectl's own or a library's
# would be): an atexit handler, or a thread Python's exit joins (started as tunectl starts its threads, stops
# blocked), each writing a byte to fd `ready` once Python's exit has reached it, then waiting forever.
HELD_AT_EXIT = textwrap.dedent("""
    import atexit, os, runpy, sys, threading
    how, ready = sys.argv[1], int(sys.argv[2])
    del sys.argv[1:3]
    from tunectl import cli
    from tunectl.system.interrupts import threads_without_stops
    command = cli.main

    def held():
        os.write(ready, b"x")
        threading.Event().wait()

    def joined():
        threading.main_thread().join()  # returns as Python's exit starts: it then joins this thread
        held()

    def main(argv):
        if how == "atexit":
            atexit.register(held)
        else:
            with threads_without_stops():
                threading.Thread(target=joined).start()  # not a daemon
        return command(argv)

    cli.main = main
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGINT, marks=pytest.mark.sigint), signal.SIGTERM,
                                    signal.SIGHUP])
@pytest.mark.parametrize("how", ["atexit", "thread"])
def test_a_stop_while_python_exits_held_ends_it_at_once_with_the_documents_code(tmp_path: Path, how: str,
                                                                                 signum: int) -> None:
    # Before, the stops were blocked through Python's whole exit: one held by an atexit handler or a thread that
    # never ended could be ended only by SIGKILL. Now a stop ends it at once with the code of the document the
    # reader has (2: an unknown profile's error document).
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-c", HELD_AT_EXIT, how, str(w), "--json", "profile", "show",
                                 "no-such-profile"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(tmp_path), cwd=REPO, pass_fds=(w,))
        os.close(w)
        w = -1
        try:
            assert select.select([r], [], [], 120)[0], "Python's exit did not reach the held handler in 120 s"
            assert os.read(r, 1) == b"x", "the program ended before its exit was held"
            # sent at once: also as the main thread goes to sleep in its lock wait (a Python handler took such a
            # stop only at the next one)
            os.kill(proc.pid, signum)
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 120 s after {signal.Signals(signum).name} while its exit was held "
                                 f"({how}): only SIGKILL ends it") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert proc.returncode == 2, (proc.returncode, err)
    assert _one_document(out, 2)["error"]["code"] == "profile" and "Traceback" not in err


NO_THREAD = textwrap.dedent("""
    import _thread, runpy

    def refused(*args):
        raise RuntimeError("can't start new thread")

    _thread.start_new_thread = refused  # a pids cgroup at its limit (TasksMax, pids.max)
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")


def test_no_thread_for_the_exit_keeps_the_documents_code_and_says_nothing_more(tmp_path: Path) -> None:
    # The thread that takes a stop during Python's exit could not be started (a pids cgroup at its limit): after a
    # whole document that said 0, exiting raised RuntimeError, a traceback and exit 1.
    proc = subprocess.run([sys.executable, "-c", NO_THREAD, "--json", "profile", "show", "balanced"],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=REPO, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert _one_document(proc.stdout, 0)["format"] == "tunectl-profile-show"


LATE_THREAD = textwrap.dedent("""
    import _thread, time
    from tunectl.system import termination

    began = []
    start = _thread.start_new_thread

    def late(function, args):  # the scheduler runs the new thread 0.3 s late (a loaded machine)
        def run(*args):
            time.sleep(0.3)
            began.append(time.monotonic())
            function(*args)
        return start(run, args)

    _thread.start_new_thread = late
    termination.stop_with_a_document()
    termination.exiting(0)
    print("running" if began else "not running")
""")


def test_the_exit_waits_until_its_thread_runs(tmp_path: Path) -> None:
    # Debian 12's Python 3.11.2 frees every other thread's state as it exits: a thread the scheduler had not yet
    # run then started on freed memory, and tunectl died by SIGSEGV after its whole document (an apply at idle
    # CPU priority beside a busy machine: 1 run in ~15-45).
    proc = subprocess.run([sys.executable, "-c", LATE_THREAD], capture_output=True, text=True, env=_env(tmp_path),
                          cwd=REPO, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "running\n", ""), (proc.returncode, proc.stderr)


def test_a_second_stop_while_the_first_is_said_changes_nothing(tmp_path: Path) -> None:
    # The first SIGTERM (while the parser is built) raises; the second comes while its document is being made
    # (tunectl.report loads for it): ignored, not a second Terminated escaping as a traceback.
    proc = subprocess.run([sys.executable, "-c", CHILD, "argparse,tunectl.report", str(int(signal.SIGTERM)),
                           str(tmp_path / "seen"), "--json", "profile", "show", "balanced"], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=REPO, timeout=120)
    assert proc.returncode == 143, proc.stderr
    assert _one_document(proc.stdout, 143)["error"]["code"] == "terminated" and proc.stderr == "tunectl: terminated\n"


def test_without_json_the_signal_still_ends_the_program_by_its_default_action(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, "argparse", str(int(signal.SIGTERM)), str(tmp_path / "seen"),
                           "profile", "show", "balanced"], capture_output=True, text=True, env=_env(tmp_path),
                          cwd=REPO, timeout=120)
    assert proc.returncode == -signal.SIGTERM and proc.stdout == "" and proc.stderr == ""


def test_a_sigterm_at_random_early_moments_gives_one_document_or_none_before_python_ran_tunectl(
        tmp_path: Path) -> None:
    """`python -m tunectl --json rollback` waiting for a lock the test holds (so it never ends by itself) is sent
    SIGTERM at random moments of its first 0.4 s, from 0.5 ms after the exec on. Each outcome is one valid
    tunectl-error document and exit 143, or, when the signal came before Python ran the program's first line (its
    own start), nothing on stdout or stderr and the signal's own end: never when the kernel showed the handler set
    before the signal was sent. Right whatever the timing (no flake); the tests above pin where the handler is set."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (tmp_path / "sys").mkdir()
    lock = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    rng = random.Random(30)
    delays = [0.0005, 0.001] + [rng.uniform(0.001, 0.08) for _ in range(8)] + [rng.uniform(0.08, 0.4) for _ in range(6)]
    outcomes = []
    try:
        for delay in delays:
            proc = subprocess.Popen([sys.executable, "-m", "tunectl", "--json", "--sysfs-root", str(tmp_path / "sys"),
                                     "rollback"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=_env(tmp_path), cwd=REPO)
            time.sleep(delay)  # the moment to stop it (it cannot end by itself: the lock is held)
            caught = _catches_sigterm(proc.pid)  # the kernel's view: the program's handler is set
            proc.send_signal(signal.SIGTERM)
            outcomes.append(_outcome(proc, caught, delay))
        # and once the kernel shows the handler set, whatever the machine's load: a document, always
        proc = subprocess.Popen([sys.executable, "-m", "tunectl", "--json", "--sysfs-root", str(tmp_path / "sys"),
                                 "rollback"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(tmp_path), cwd=REPO)
        while not _catches_sigterm(proc.pid):
            assert proc.poll() is None, proc.communicate()
            os.sched_yield()
        proc.send_signal(signal.SIGTERM)
        outcomes.append(_outcome(proc, True, None))
    finally:
        os.close(lock)
    assert outcomes[-1] == "document", outcomes


def _catches_sigterm(pid: int) -> bool:
    """SIGTERM has a handler in process `pid` (SigCgt of /proc/PID/status, a mask of signal numbers less one)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _outcome(proc: subprocess.Popen, caught: bool, delay: float | None) -> str:
    out, err = proc.communicate(timeout=120)
    if proc.returncode == -signal.SIGTERM:  # only before the handler was set
        assert not caught and out == "" and err == "", (delay, out, err)
        return "none"
    assert proc.returncode == 143, (delay, proc.returncode, err)
    assert _one_document(out, 143)["error"]["code"] == "terminated", (delay, out)
    assert err.endswith("tunectl: terminated\n") and "Traceback" not in err, (delay, err)
    return "document"


SWALLOWED = textwrap.dedent("""
    import fcntl, os, signal, sys, weakref
    from pathlib import Path
    from tunectl.system import lockfile, termination
    termination.stop_with_a_document()
    termination.noting_dropped_stops()

    class Module:
        pass

    held = weakref.ref(Module(), lambda ref: os.kill(os.getpid(), signal.SIGTERM))  # runs at once: dropped
    path = Path(sys.argv[1])
    fcntl.flock(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), fcntl.LOCK_EX)  # another run holds it
    try:
        lockfile.acquire(os.open(path, os.O_RDWR), path, "tunectl rollback", 5, None)
        print("acquired")
    except termination.Terminated as e:
        print("terminated", e.exit_code)
    except Exception as e:
        print(type(e).__name__)
""")


def test_a_stop_python_swallowed_is_raised_again_before_a_lock_wait(tmp_path: Path) -> None:
    # The handler's Terminated raised in a weakref callback (importlib's module-lock callback, while a command's
    # modules load) is printed as "Exception ignored" and dropped; the handler acts once, so `--json rollback`
    # then waited for a held lock for good (the random-moment test above timed out: 1 run in ~15 under load).
    # Python no longer prints it ("Exception ignored ... Terminated", a traceback): it is acted on, not ignored.
    proc = subprocess.run([sys.executable, "-c", SWALLOWED, str(tmp_path / "lock")], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=REPO, timeout=60)
    assert proc.stdout == "terminated 143\n" and proc.stderr == "", proc.stderr


def _child(tmp_path: Path, at: str, *argv: str, signum: int = signal.SIGTERM) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, at, str(int(signum)), str(tmp_path / "seen"), *argv],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=REPO, timeout=120)


def test_a_stop_python_dropped_while_the_command_loaded_is_its_document_not_the_result(tmp_path: Path) -> None:
    # Before, the dropped stop was picked up only at a lock wait: `profile show` took none, wrote its result and
    # exited 0 as if never stopped.
    proc = _child(tmp_path, "drop:tunectl.profile.cli", "--json", "profile", "show", "balanced")
    assert (tmp_path / "seen.dropped").read_text() == "Terminated\n"  # Python dropped it on the way
    assert proc.returncode == 143, proc.stderr
    assert _one_document(proc.stdout, 143)["error"]["code"] == "terminated"
    assert proc.stderr == "tunectl: terminated\n"  # no "Exception ignored", no traceback


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_python_dropped_before_apply_writes_is_raised_before_the_first_write(
        empty_fake_tree, tmp_path: Path, signum: int) -> None:
    # The journal's module loads just before apply journals and writes: a stop dropped there used to let apply
    # journal and write every value, then print its result (exit 0).
    for i in range(2):
        empty_fake_tree.add_loop(f"loop{i}", f"/img/{i}.img")
    (tmp_path / "p.yaml").write_text("name: b\nclasses:\n  loop:\n    scheduler: none\n    read_ahead_kb: 4096\n")
    queues = [empty_fake_tree.root / "block" / f"loop{i}" / "queue" for i in range(2)]
    before = [((q / "scheduler").read_text(), (q / "read_ahead_kb").read_text()) for q in queues]
    proc = _child(tmp_path, "drop:tunectl.tuning.journal", "--json", "--sysfs-root", str(empty_fake_tree.root),
                  "--udev-root", str(empty_fake_tree.udev_root), "--state-dir", str(tmp_path / "state"), "apply", "-p",
                  str(tmp_path / "p.yaml"), signum=signum)
    assert (tmp_path / "seen.dropped").read_text() == "Terminated\n"
    assert proc.returncode == 128 + signum, proc.stderr
    assert _one_document(proc.stdout, 128 + signum)["error"]["code"] == "terminated"
    assert [((q / "scheduler").read_text(), (q / "read_ahead_kb").read_text()) for q in queues] == before
    assert not (tmp_path / "state" / "journal.json").exists()


# The program under --json with its stdout a pipe nobody reads, filled before it starts: its document's first
# write blocks. `STUCK_SECONDS` (how long a started document's write may make no progress after a stop) is set
# by the test, through the module's constant: the real 2 s, or an hour where only a second stop may end it.
BLOCKED = textwrap.dedent("""
    import runpy, sys
    from tunectl.system import termination
    termination.STUCK_SECONDS = float(sys.argv.pop(1))
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")


def _full_pipe() -> tuple[int, int, bytes]:
    """A pipe filled to its capacity (F_GETPIPE_SZ): (read end, write end, what fills it)."""
    r, w = os.pipe()
    fill = b"x" * fcntl.fcntl(w, getattr(fcntl, "F_GETPIPE_SZ", 1032))
    os.set_blocking(w, False)
    assert os.write(w, fill) == len(fill)
    with pytest.raises(BlockingIOError):
        os.write(w, b"x")  # full: the next write blocks
    os.set_blocking(w, True)
    return r, w, fill


def _blocked(tmp_path: Path, stuck_seconds: float) -> tuple[subprocess.Popen, int, bytes]:
    """`profile show balanced --json` blocked in its document's write to a full pipe (a reader stuck)."""
    r, w, fill = _full_pipe()
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(stuck_seconds), "--json", "profile", "show",
                                 "balanced"], stdout=w, stderr=err, env=_env(tmp_path), cwd=REPO)
    os.close(w)
    _wait_for(proc, lambda: _in_pipe_write(proc.pid), "the document's write to block")
    return proc, r, fill


def _in_pipe_write(pid: int) -> bool:
    """Process `pid` sleeps in a pipe's write, waiting for room (the kernel's function: pipe_write, anon_pipe_write
    on newer kernels)."""
    with open(f"/proc/{pid}/wchan") as f:
        return f.read().endswith("pipe_write")


def _signals(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith(field + ":"))


def _taken_late(pid: int, signum: int) -> bool:
    """Process `pid` has taken `signum` (none pending) as a stop after its document started: it armed the alarm
    that bounds the write (SIGALRM caught), and is blocked in that write again."""
    pending = _signals(pid, "SigPnd") | _signals(pid, "ShdPnd")
    return (not pending >> (signum - 1) & 1 and _signals(pid, "SigCgt") >> (signal.SIGALRM - 1) & 1
            and _in_pipe_write(pid))


def _wait_for(proc: subprocess.Popen, condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} in {seconds} s"
        time.sleep(0.005)


def _gone(proc: subprocess.Popen, seconds: float) -> int:
    """The process's exit status once it has ended, which must be within `seconds`."""
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running {seconds} s later") from None


def _drain(r: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_second_stop_ends_a_process_whose_document_nobody_reads(tmp_path: Path, signum: int) -> None:
    # Before, once the document had started every stop was ignored: only SIGKILL ended a process whose reader was
    # stuck. The first stop lets the document finish (an hour here: only the second may end it); the second ends
    # the process by the signal (143, 129 in a shell), writing nothing more.
    proc, r, fill = _blocked(tmp_path, 3600)
    try:
        os.kill(proc.pid, signum)
        _wait_for(proc, lambda: _taken_late(proc.pid, signum), "first stop taken")
        assert proc.poll() is None  # the first lets the document finish
        os.kill(proc.pid, signum)
        assert _gone(proc, 30) == -signum
        assert _drain(r) == fill  # nothing more: no error document after the result, nor in its place
        assert (tmp_path / "err").read_text() == ""
    finally:
        os.close(r)


def test_one_stop_ends_a_process_whose_document_write_makes_no_progress(tmp_path: Path) -> None:
    # One stop only (`timeout` without -k, a service manager sends one): the write that has made no progress for
    # STUCK_SECONDS (the real 2 s) after it is given up, the process ends by the signal.
    from tunectl.system.termination import STUCK_SECONDS

    proc, r, fill = _blocked(tmp_path, STUCK_SECONDS)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        assert _gone(proc, STUCK_SECONDS + 60) == -signal.SIGTERM
        assert _drain(r) == fill and (tmp_path / "err").read_text() == ""
    finally:
        os.close(r)


def test_one_stop_lets_a_started_document_finish_for_its_reader(tmp_path: Path) -> None:
    # The reader comes back after the stop: it gets the whole result, one valid document, and its exit code.
    proc, r, fill = _blocked(tmp_path, 3600)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        _wait_for(proc, lambda: _taken_late(proc.pid, signal.SIGTERM), "the stop taken")
        out = _drain(r)
        assert _gone(proc, 60) == 0
    finally:
        os.close(r)
    assert out.startswith(fill)
    assert _one_document(out[len(fill):].decode(), 0)["format"] == "tunectl-profile-show"
    assert (tmp_path / "err").read_text() == ""


def test_the_alarm_ends_the_process_only_when_the_write_made_no_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader that reads, however slowly, gets the whole document: each alarm looks at write(2)'s bytes
    # (/proc/self/io wchar) and ends the process only when they did not grow since the last look. In-process,
    # with the alarm, the end and the byte counts stood in for.
    import types

    from tunectl.system import termination

    armed: list[float] = []
    ended: list[int] = []
    counts = iter([100, 180, 180, 180])
    monkeypatch.setattr(termination, "_signal", types.SimpleNamespace(
        SIGALRM=signal.SIGALRM, ITIMER_REAL=signal.ITIMER_REAL, signal=lambda sig, handler: None,
        setitimer=lambda which, seconds: armed.append(seconds)))
    monkeypatch.setattr(termination, "_written", lambda: next(counts))
    monkeypatch.setattr(termination, "_end", ended.append)
    monkeypatch.setattr(termination._Said, "done", True)  # the document has started
    monkeypatch.setattr(termination._Said, "late", 0)
    monkeypatch.setattr(termination._Said, "finished", False)  # still writing
    termination._stop(signal.SIGTERM, None)  # the first stop: the write may go on
    assert ended == [] and armed == [termination.STUCK_SECONDS]
    termination._look(signal.SIGALRM, None)  # 80 bytes written since: on
    assert ended == [] and len(armed) == 2
    termination._look(signal.SIGALRM, None)  # nothing since: the end, by the stop's signal
    assert ended == [signal.SIGTERM]
    termination._stop(signal.SIGHUP, None)  # a second stop: the end at once, by its own signal
    assert ended == [signal.SIGTERM, signal.SIGHUP]


@pytest.mark.sigint
@pytest.mark.parametrize("second", [False, True])
def test_ctrl_c_once_the_document_started_is_a_late_stop_not_a_second_document(tmp_path: Path, second: bool) -> None:
    # Before, Ctrl-C raised KeyboardInterrupt inside the document's write and main then wrote an `interrupted`
    # document: a reader that had part of the result got two documents (or the result's head and an error). Now
    # it is a stop like SIGTERM's once the document has started: the reader gets the one result and its exit code;
    # a second Ctrl-C ends the process at once by SIGINT (130 in a shell), nothing more written.
    proc, r, fill = _blocked(tmp_path, 3600)
    try:
        os.kill(proc.pid, signal.SIGINT)
        _wait_for(proc, lambda: _taken_late(proc.pid, signal.SIGINT), "Ctrl-C taken")
        if second:
            os.kill(proc.pid, signal.SIGINT)
            assert _gone(proc, 30) == -signal.SIGINT
            assert _drain(r) == fill
        else:
            out = _drain(r)
            assert _gone(proc, 60) == 0
            assert _one_document(out[len(fill):].decode(), 0)["format"] == "tunectl-profile-show"
        assert (tmp_path / "err").read_text() == ""
    finally:
        os.close(r)


# /proc/self/io unread (hidepid, a container without /proc): stood in for in the program by a `_written` that
# cannot tell, with a pipe of one page and a document of ~37 KB (a profile of 400 unknown classes: its error
# document), so the write blocks many times while a reader reads.
NO_PROC = textwrap.dedent("""
    import runpy, sys
    from tunectl.system import termination
    termination.STUCK_SECONDS = float(sys.argv.pop(1))
    termination._written = lambda: -1
    runpy.run_module("tunectl", run_name="__main__", alter_sys=True)
""")


def _blocked_without_proc(tmp_path: Path, stuck_seconds: float) -> tuple[subprocess.Popen, int, bytes]:
    big = tmp_path / "big.yaml"
    big.write_text("name: big\nclasses:\n" + "".join(f"  rotational{i}: {{read_ahead_kb: 1024}}\n" for i in range(400)))
    r, w = os.pipe()
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    fill = b"x" * fcntl.fcntl(w, getattr(fcntl, "F_GETPIPE_SZ", 1032))
    assert os.write(w, fill) == len(fill)
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", NO_PROC, str(stuck_seconds), "--json", "profile", "show",
                                 str(big)], stdout=w, stderr=err, env=_env(tmp_path), cwd=REPO)
    os.close(w)
    _wait_for(proc, lambda: _in_pipe_write(proc.pid), "the document's write to block")
    return proc, r, fill


def test_without_proc_a_slow_reader_that_reads_still_gets_the_whole_document(tmp_path: Path) -> None:
    # Before, with /proc/self/io unreadable the first look (STUCK_SECONDS after the stop) ended the process
    # whatever the reader did. Now the write loop's own count of bytes is the progress: a reader taking 1 KiB
    # every 50 ms (~2 s in all; a look every 0.5 s) gets the whole document.
    proc, r, fill = _blocked_without_proc(tmp_path, 0.5)
    got = []
    try:
        os.kill(proc.pid, signal.SIGTERM)
        _wait_for(proc, lambda: _taken_late(proc.pid, signal.SIGTERM), "the stop taken")
        while True:
            chunk = os.read(r, 1024)
            if not chunk:
                break
            got.append(chunk)
            time.sleep(0.05)
        code = _gone(proc, 60)
    finally:
        os.close(r)
    out = b"".join(got)
    assert out.startswith(fill) and len(out) > 8 * len(fill)
    doc = _one_document(out[len(fill):].decode(), code)
    assert code == doc["error"]["exit_code"] == 2 and (tmp_path / "err").read_text().startswith(str(tmp_path))


def test_without_proc_a_reader_that_does_not_read_is_given_up_after_two_looks(tmp_path: Path) -> None:
    proc, r, fill = _blocked_without_proc(tmp_path, 0.5)
    try:
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert _gone(proc, 60) == -signal.SIGTERM
        assert time.monotonic() - started >= 1.0  # two looks without progress, not one
        assert _drain(r) == fill
    finally:
        os.close(r)


def test_a_note_on_stderr_once_the_document_started_neither_counts_nor_finishes_it(monkeypatch, tmp_path: Path) -> None:
    # Both standard streams are guarded (a stderr whose reader went away must not end the command), but only stdout
    # carries the --json document: a note written to stderr while the document is being written went through the
    # document's counted write, marked it finished and disarmed a late stop's alarm, so a stuck stdout reader would
    # hold the process forever.
    from tunectl import cli
    from tunectl.system import termination

    monkeypatch.setattr(termination._Said, "done", True)  # the document has started
    monkeypatch.setattr(termination._Said, "finished", False)  # still writing
    monkeypatch.setattr(termination._Said, "sent", 0)
    with open(tmp_path / "err", "w") as raw:
        err = cli._Stderr(raw)
        err.write("tunectl: note: something\n")
        err.flush()
    assert (tmp_path / "err").read_text() == "tunectl: note: something\n"
    assert termination._Said.finished is False and termination._Said.sent == 0
    with open(tmp_path / "out", "w") as raw:
        cli._Stdout(raw).write("{}\n")
    assert termination._Said.finished is True and termination._Said.sent == 3
