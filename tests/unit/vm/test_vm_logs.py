"""Where the VM tier's boots keep their consoles and results: a boot outside CI that named no directory wrote into
/tmp/tunectl-vm-logs too, over the last CI run's per-group logs. Outside CI a run now keeps its own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.vm import machine


def test_ci_keeps_the_fixed_directory_and_a_run_outside_ci_gets_none_of_it() -> None:
    assert machine.logs_for({"CI": "true"}) == machine.CI_LOGS == Path("/tmp/tunectl-vm-logs")
    assert machine.logs_for({"CI": "1"}) == machine.CI_LOGS
    for outside in ({}, {"CI": ""}, {"CI": "false"}, {"CI": "0"}):
        assert machine.logs_for(outside) is None, outside  # a directory of the run's own
    for env in ({"TUNECTL_VM_LOGS": "/srv/logs"}, {"TUNECTL_VM_LOGS": "/srv/logs", "CI": "true"}):
        assert machine.logs_for(env) == Path("/srv/logs")


def test_a_run_outside_ci_makes_a_new_directory_once_and_keeps_it(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(machine, "CI_LOGS", tmp_path / "tunectl-vm-logs")
    monkeypatch.setattr(machine, "LOGS", None)
    monkeypatch.delenv("TUNECTL_VM_LOGS", raising=False)
    monkeypatch.delenv("CI", raising=False)
    first = machine.log_dir()
    assert first.parent == tmp_path and first.name.startswith("tunectl-vm-logs-") and first != machine.CI_LOGS
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o700
    assert machine.log_dir() == machine.LOGS == first  # one per run: every boot and the summary
    monkeypatch.setattr(machine, "LOGS", None)
    monkeypatch.setenv("CI", "true")
    assert machine.log_dir() == machine.CI_LOGS


def test_the_tier_summary_says_where_the_logs_are(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.vm import conftest

    class Reporter:
        lines: list[str] = []

        def section(self, title: str) -> None:
            self.lines.append(f"== {title}")

        def write_line(self, line: str) -> None:
            self.lines.append(line)

    monkeypatch.setattr(machine, "LOGS", None)
    conftest.pytest_terminal_summary(Reporter(), pytest.ExitCode.TESTS_FAILED)
    assert Reporter.lines == []  # no boot tried (qemu cannot start): nothing to say
    monkeypatch.setattr(machine, "LOGS", tmp_path / "tunectl-vm-logs-abc")
    monkeypatch.setattr(machine, "OWN_LOGS", True)
    monkeypatch.setattr(conftest, "BOOTS", [])  # a boot that failed both attempts: its consoles are there
    conftest.pytest_terminal_summary(Reporter(), pytest.ExitCode.TESTS_FAILED)
    assert Reporter.lines[1] == f"consoles and results kept in {tmp_path}/tunectl-vm-logs-abc/<release>/"


def own_logs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A run outside CI that booted a kernel: its own log directory, with a console in it."""
    monkeypatch.setattr(machine, "CI_LOGS", tmp_path / "tunectl-vm-logs")
    monkeypatch.setattr(machine, "LOGS", None)
    monkeypatch.setattr(machine, "OWN_LOGS", False)
    monkeypatch.delenv("TUNECTL_VM_LOGS", raising=False)
    monkeypatch.delenv("CI", raising=False)
    logs = machine.logs_here(machine.log_dir() / "6.1.0-1-amd64")
    (logs / "classify.console").write_text("booted\n")
    return machine.log_dir()


def test_a_passing_run_removes_its_own_log_directory_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    # a run's own /tmp/tunectl-vm-logs-XXXXXXXX was left behind by every run, passed or not
    logs = own_logs(monkeypatch, tmp_path)
    said = machine.passed_logs(True)
    assert not logs.exists() and said == f"consoles and results removed with {logs}: the run passed " \
                                         "(TUNECTL_VM_LOGS=DIR keeps them in DIR)", said
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_or_a_retried_boot_keeps_its_logs_and_says_where(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    logs = own_logs(monkeypatch, tmp_path)
    assert machine.passed_logs(False) == f"consoles and results kept in {logs}/<release>/"
    assert (logs / "6.1.0-1-amd64" / "classify.console").read_text() == "booted\n"
    (logs / "6.1.0-1-amd64" / "classify.attempt1.failed").write_text("attempt 1 wrote no results")
    assert machine.passed_logs(True) == f"consoles and results kept in {logs}/<release>/"  # the retry's evidence
    assert (logs / "6.1.0-1-amd64" / "classify.attempt1.failed").exists()


def test_a_named_log_directory_is_kept_after_a_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(machine, "LOGS", None)
    monkeypatch.setattr(machine, "OWN_LOGS", False)
    monkeypatch.setenv("TUNECTL_VM_LOGS", str(tmp_path / "kept"))
    logs = machine.log_dir()
    assert logs == tmp_path / "kept" and logs.is_dir()
    assert machine.passed_logs(True) == f"consoles and results kept in {logs}/<release>/" and logs.is_dir()


def test_the_named_log_directory_is_made_with_a_fixed_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        made = machine.logs_here(tmp_path / "tunectl-vm-logs")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o755 and made == tmp_path / "tunectl-vm-logs"


@pytest.mark.parametrize("planted", ["link", "others-write", "file"])
def test_a_named_log_directory_another_could_plant_is_refused(tmp_path: Path, planted: str) -> None:
    # /tmp/tunectl-vm-logs, CI's fixed name in a directory any user writes: a link there sent root's consoles and
    # results wherever it pointed; a directory another user may write, or made first, let them swap its files
    target = tmp_path / "elsewhere"
    target.mkdir()
    name = tmp_path / "tunectl-vm-logs"
    if planted == "link":
        name.symlink_to(target)
        found = f"{name}: a symbolic link (to {target})"
    elif planted == "others-write":
        name.mkdir()
        name.chmod(0o777)
        found = f"{name}: mode 0777: writable by others"
    else:
        name.write_text("")
        found = f"{name}: a regular file, not a directory"
    with pytest.raises(RuntimeError) as e:
        machine.logs_here(name)
    assert str(e.value).startswith(f"VM tier: log directory {name} cannot be used: {found}"), str(e.value)
    assert str(e.value).endswith("name another with TUNECTL_VM_LOGS"), str(e.value)
    assert list(target.iterdir()) == []


def test_the_boot_times_are_added_to_a_regular_file_of_ours_only(tmp_path: Path) -> None:
    # /tmp/tunectl-vm-times.jsonl, another fixed name in /tmp, was opened for append through any link
    times = tmp_path / "times.jsonl"
    machine.append_line(times, '{"group": "classify"}')
    machine.append_line(times, '{"group": "devices"}')
    assert times.read_text() == '{"group": "classify"}\n{"group": "devices"}\n'
    assert stat.S_IMODE(times.stat().st_mode) == 0o644
    target = tmp_path / "target"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    shared = tmp_path / "shared.jsonl"
    shared.write_text("")
    shared.chmod(0o666)
    linked = tmp_path / "linked.jsonl"
    os.link(target, linked)  # a second name of a file root may own: appending there writes the other
    for path, why in ((link, "a symbolic link"), (fifo, "a named pipe, not a regular file"),
                      (shared, "mode 0666: writable by others"),
                      (linked, "2 hard links: another name reaches the same file")):
        with pytest.raises(RuntimeError) as e:
            machine.append_line(path, "{}")
        assert str(e.value) == f"VM tier: cannot add to {path}: {why}; move it aside, or name another file with " \
                               "TUNECTL_VM_TIMES", str(e.value)
    assert target.read_text() == "" and shared.read_text() == ""
