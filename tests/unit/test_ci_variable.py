"""The `CI` variable read one way by every test helper that asks (`tests.ci.in_ci`): the VM tier's log directory
(`machine.logs_for`) took "true" or "1" in any case, the data pass's requirement (`need_datapass`) only "true", so a
CI that sets CI=1 kept the fixed VM logs but skipped the data pass tests its build should have failed."""

from __future__ import annotations

import pytest

from tests.preload_helpers import need_datapass
from tests.vm import machine


@pytest.mark.parametrize(("value", "ci"), [("1", True), ("TRUE", True), ("true", True), ("false", False),
                                            ("", False), (None, False)])
def test_the_vm_logs_and_the_data_pass_read_ci_alike(value: str | None, ci: bool) -> None:
    environ = {} if value is None else {"CI": value}
    assert (machine.logs_for(environ) == machine.CI_LOGS) is ci
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as outcome:  # a skip never passes unseen
        need_datapass(None, environ)
    assert outcome.type is (pytest.fail.Exception if ci else pytest.skip.Exception), outcome.value
