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
    conftest.pytest_terminal_summary(Reporter())
    assert Reporter.lines == []  # no boot tried (qemu cannot start): nothing to say
    monkeypatch.setattr(machine, "LOGS", tmp_path / "tunectl-vm-logs-abc")
    monkeypatch.setattr(conftest, "BOOTS", [])  # a boot that failed both attempts: its consoles are there
    conftest.pytest_terminal_summary(Reporter())
    assert Reporter.lines[1] == f"consoles and results kept in {tmp_path}/tunectl-vm-logs-abc/<release>/"
