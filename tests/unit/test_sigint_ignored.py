"""The sigint guard of tests/conftest.py: a pytest started with SIGINT ignored (a background job of a
non-interactive shell) errors each test marked sigint with one message that says why and what to do, and runs
the others as ever. Nothing is skipped, so a CI run started that way cannot pass without them."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.conftest import SIGINT_IGNORED_MESSAGE
from tests.harness import REPO

MARKED = "tests/unit/system/test_interrupts.py::test_handlers_and_mask_are_given_back_and_nothing_is_raised_when_no_stop_came"
UNMARKED = "tests/unit/system/test_interrupts.py::test_a_thread_tunectl_starts_blocks_the_stops_for_its_whole_life"


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_pytest_started_with_sigint_ignored_errors_the_sigint_tests_with_one_message() -> None:
    # Before, such a test failed by its own assertion (here: SIGINT's handler is SIG_IGN, not Python's default),
    # which does not say that the shell that started pytest is the cause.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", MARKED, UNMARKED],
                          capture_output=True, text=True, cwd=REPO, timeout=300, preexec_fn=_ignoring_sigint)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr  # errors: the run fails, CI sees it
    assert "1 passed, 1 error" in out, out
    name = MARKED.rpartition("::")[2]
    assert f"ERROR at setup of {name} _\n{SIGINT_IGNORED_MESSAGE}\n" in out, out
    assert f"\nERROR {MARKED}" in out, out
    assert "AssertionError" not in out and "Traceback" not in out, out
