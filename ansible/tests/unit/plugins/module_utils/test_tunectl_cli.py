# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tunectl_cli: how the modules read tunectl's --json answers, with run_command stubbed."""

from __future__ import annotations

import json

import pytest
from ansible_collections.tunectl.tunectl.plugins.module_utils.tunectl_cli import StepFailed, Tunectl, error_text

READS = {"tunectl-status": 1, "tunectl-apply": 1, "tunectl-error": 1}


class FakeModule:
    """Just what Tunectl calls: run_command, answering from a queue and recording each argv."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def run_command(self, argv, environ_update=None):
        self.calls.append((argv, environ_update))
        return self.answers.pop(0)


def test_a_profile_error_reads_as_tunectl_prints_it():
    doc = {"format": "tunectl-error", "version": 1, "error": {
        "diagnostics": [{"file": "/etc/tunectl/profiles/x.yaml", "line": 3, "column": 5,
                         "path": "classes.ssd.read_ahead_kb", "message": "must be an integer"}],
        "hint": "see tunectl-profile(5)"}}
    assert error_text(doc) == ("/etc/tunectl/profiles/x.yaml:3:5: classes.ssd.read_ahead_kb: must be an integer\n"
                               "hint: see tunectl-profile(5)")
    assert error_text({"format": "tunectl-error", "version": 1, "error": {"message": "no such profile"}}) == "no such profile"


def test_run_returns_the_document_and_keeps_stderr_as_warnings_once():
    status = {"format": "tunectl-status", "version": 1, "devices": []}
    module = FakeModule((1, json.dumps(status), "warning: sdz vanished\nwarning: sdz vanished\n"))
    tunectl = Tunectl(module, "/usr/sbin/tunectl", READS)
    assert tunectl.run(["status", "--all"], (0, 1)) == status
    argv, environ = module.calls[0]
    assert argv == ["/usr/sbin/tunectl", "status", "--all", "--json"]
    assert environ["LC_ALL"] == "C"
    assert tunectl.commands == ["/usr/sbin/tunectl status --all --json"]
    assert tunectl.warnings == ["warning: sdz vanished"]


def test_operands_after_double_dash_stay_operands_and_json_comes_before_them():
    module = FakeModule((0, json.dumps({"format": "tunectl-apply", "version": 1}), ""))
    Tunectl(module, "/usr/sbin/tunectl", READS).run(["apply", "-p", "x", "--", "-sdb"], (0,))
    assert module.calls[0][0] == ["/usr/sbin/tunectl", "apply", "-p", "x", "--json", "--", "-sdb"]


@pytest.mark.parametrize("answer, message", [
    ((2, "Traceback (most recent call last):", ""), "exited 2 without a JSON report: Traceback"),
    ((0, "", ""), "exited 0 without a JSON report: no output"),
    ((1, json.dumps({"format": "tunectl-error", "version": 1, "error": {"message": "cannot read /sys/block"}}), ""),
     "cannot read /sys/block"),
    ((3, json.dumps({"format": "tunectl-apply", "version": 1}), "stopped\n"), "exited 3: stopped"),
    ((0, json.dumps({"format": "tunectl-apply", "version": 2}), ""), "tunectl-apply version 2; this module reads version 1"),
    ((0, json.dumps({"format": "tunectl-bench", "version": 1}), ""), "tunectl-bench version 1; this module reads no such format"),
])
def test_run_fails_with_one_line_for_each_kind_of_refusal(answer, message):
    tunectl = Tunectl(FakeModule(answer), "tunectl", READS)
    with pytest.raises(StepFailed) as failed:
        tunectl.run(["apply", "-p", "default"], (0,))
    assert message in str(failed.value)
