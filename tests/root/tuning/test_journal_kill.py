"""SIGKILL at random moments of `apply` and `rollback` on real loop devices (root only).

Each killed run must leave a journal that parses (or falls back cleanly to an
older generation), and a final rollback must bring back every original value.
Runs: TUNECTL_KILL_RUNS (default 60), in rounds of 10 with a rollback after each.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO
from tests.loopdev import loop_devices, snapshot
from tunectl.errors import StateError
from tunectl.system.state import StateStore, unseal

pytestmark = pytest.mark.root

RUNS = int(os.environ.get("TUNECTL_KILL_RUNS", "60"))
ROUND = 10
PROFILES = {
    "bfq": "name: kill-bfq\nclasses:\n  loop:\n    scheduler: bfq\n    read_ahead_kb: 2048\n"
           "    iosched: {slice_idle: 0, low_latency: 0}\n    queue: {nr_requests: 32}\n",
    "deadline": "name: kill-deadline\nclasses:\n  loop:\n    scheduler: mq-deadline\n    read_ahead_kb: 512\n"
                "    iosched: {read_expire: 150, front_merges: 0}\n    queue: {nomerges: 1}\n",
}


def start(argv: list[str], state: Path) -> subprocess.Popen:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(REPO), "TUNECTL_STATE_DIR": str(state)}
    return subprocess.Popen([sys.executable, "-m", "tunectl", *argv], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(argv: list[str], state: Path) -> None:
    proc = start(argv, state)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (argv, err)
    assert "warning" not in err, err


def journal_after_kill(state: Path) -> list[str]:
    """The warnings of reading the journal a killed run left; it must be usable."""
    from tunectl.tuning import journal

    store = StateStore(state)
    try:
        journal.load(store)
    except StateError as e:
        pytest.fail(f"journal unusable after SIGKILL: {e}")
    for warning in store.warnings:  # a fallback is acceptable only as a clean, explained one
        assert "falling back to" in warning, warning
    return store.warnings


@pytest.fixture
def loops(tmp_path: Path):
    with loop_devices(tmp_path, [{"rotational": 1}, {"rotational": 0}, {"rotational": 0, "sector_size": 4096},
                                 {"rotational": 1}]) as names:
        yield names


def apply_and_rollback(loops: list[str], tmp_path: Path) -> list[list[str]]:
    """The runs the tests race and kill: apply of two profiles, and rollback, on the test's loops."""
    for name, text in PROFILES.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return [["apply", "-p", str(tmp_path / "bfq.yaml"), *loops],
            ["apply", "-p", str(tmp_path / "deadline.yaml"), *loops],
            ["rollback", *loops]]


def test_sigkill_during_apply_and_rollback_never_loses_an_original(loops: list[str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    commands = apply_and_rollback(loops, tmp_path)
    originals = {n: snapshot(n) for n in loops}

    # How long an undisturbed run takes: kills land anywhere from interpreter start-up to the last write.
    started = time.perf_counter()
    finish(commands[0], state)
    finish(commands[2], state)
    longest = (time.perf_counter() - started) / 2 * 1.3
    assert {n: snapshot(n) for n in loops} == originals

    rng = random.Random(int(os.environ.get("TUNECTL_KILL_SEED", "9")))
    killed = fallbacks = 0
    for run in range(RUNS):
        argv = rng.choice(commands)
        proc = start(argv, state)
        deadline = rng.uniform(0.0, longest)
        time.sleep(deadline)  # the random moment itself, not a wait for a result
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        else:
            # It finished before the moment: a run takes at most `deadline` under the load now (the first two ran
            # under another). Later moments are drawn within it, so most runs are still killed mid-run when the
            # machine got faster since, instead of the count of kills depending on the load.
            longest = deadline
        _, err = proc.communicate(timeout=60)
        assert "internal error" not in err and "Traceback" not in err, err
        if proc.returncode >= 0:
            assert proc.returncode == 0, (argv, err)
        if state.exists():
            fallbacks += bool(journal_after_kill(state))
        if run % ROUND == ROUND - 1 or run == RUNS - 1:
            finish(commands[2], state)
            assert {n: snapshot(n) for n in loops} == originals, f"after run {run}"
            assert not [f for f in os.listdir(state) if f.startswith(".journal.json.")], os.listdir(state)
    assert killed >= RUNS // 2, f"only {killed} of {RUNS} runs were killed before they finished"
    print(f"\nSIGKILL: {RUNS} runs, {killed} killed mid-run, {fallbacks} generation fallbacks")


def test_concurrent_apply_and_rollback_keep_one_consistent_journal(loops: list[str], tmp_path: Path) -> None:
    """Rounds of six runs at once (a hot-plug apply racing an Ansible one): the lock serialises them, every
    save rotates intact generations, and a rollback after each round restores every original."""
    state = tmp_path / "state"
    commands = apply_and_rollback(loops, tmp_path)
    originals = {n: snapshot(n) for n in loops}
    rng = random.Random(9)
    for _ in range(int(os.environ.get("TUNECTL_CONCURRENT_ROUNDS", "5"))):
        procs = [start(rng.choice(commands), state) for _ in range(6)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and "warning" not in err, err
        assert journal_after_kill(state) == []
        for older in StateStore(state).generations("journal.json")[1:]:
            if older.exists():
                unseal(older.read_bytes())  # every kept generation is intact: raises otherwise
        finish(commands[2], state)
        assert {n: snapshot(n) for n in loops} == originals
