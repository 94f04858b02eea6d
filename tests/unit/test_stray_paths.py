"""The session guard of tests/conftest.py: a test that creates a path outside its temporary directory, named as a
path that does not exist (/nonexistent...) or one of this machine's own tunectl paths, fails the session."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import stray_paths


def test_the_guarded_paths_are_found(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    assert stray_paths(tmp_path) == set()
    (tmp_path / "nonexistent").mkdir()
    (tmp_path / "nonexistent-dir").write_text("")
    (tmp_path / "var/lib/tunectl").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/tunectl").symlink_to("/nowhere")  # a link counts, even a dangling one
    assert stray_paths(tmp_path) == {str(tmp_path / p) for p in ("nonexistent", "nonexistent-dir",
                                                                 "var/lib/tunectl", "etc/tunectl")}


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str, **_markup: bool) -> None:
        self.lines.append(text)


def test_a_session_whose_test_makes_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks as pytest calls them, on a session object of their own (GUARD_ROOT: a root of the test's own)."""
    monkeypatch.setattr(conftest, "GUARD_ROOT", tmp_path)
    (tmp_path / "nonexistent-before").mkdir()  # there before the session: not its doing
    writer = _Writer()
    config = SimpleNamespace(stash=pytest.Stash(), get_terminal_writer=lambda: writer)
    clean = SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    conftest.pytest_sessionstart(clean)
    conftest.pytest_sessionfinish(clean, 0)
    assert clean.exitstatus == pytest.ExitCode.OK and writer.lines == []
    made = SimpleNamespace(config=SimpleNamespace(stash=pytest.Stash(), get_terminal_writer=lambda: writer),
                           exitstatus=pytest.ExitCode.OK)
    conftest.pytest_sessionstart(made)
    (tmp_path / "nonexistent").mkdir()  # what a test did
    conftest.pytest_sessionfinish(made, 0)
    assert made.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert writer.lines == ["tests created paths outside their temporary directories (remove them, and find the test "
                            f"that made them: use tmp_path): {tmp_path / 'nonexistent'}"]


def test_a_test_that_creates_or_writes_the_machines_state_is_named(tmp_path: Path) -> None:
    """The per-test guard (conftest `_machine_state_untouched`) on a root of its own: creating the state directory,
    a file in it, or writing one there is a change; reading is not."""
    from tests.conftest import machine_paths_changed, machine_state

    none = machine_state(tmp_path)
    assert none == ()
    state = tmp_path / "var/lib/tunectl"
    state.mkdir(parents=True)
    made = machine_state(tmp_path)
    assert machine_paths_changed(none, made) == [str(state)]
    (state / "lock").write_text("")
    locked = machine_state(tmp_path)
    assert str(state / "lock") in machine_paths_changed(made, locked)
    (state / "lock").read_text()
    assert machine_paths_changed(locked, machine_state(tmp_path)) == []
    with open(state / "lock", "a") as f:
        f.write("pid 1\n")
    assert machine_paths_changed(locked, machine_state(tmp_path)) == [str(state / "lock")]
