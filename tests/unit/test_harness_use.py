"""Tests run tunectl through the harness (tests/harness.py: `run_cli` in-process, `run_process` as a process of its
own), which fails on a traceback or an internal error and checks every --json document against its schema. A test
that calls `main(...)` or starts `python -m tunectl` itself skips both: the few that must are named here, with why."""

from __future__ import annotations

import re

from tests.harness import REPO

DIRECT = re.compile(r'"-m", "tunectl"|(?<![\w.])main\((\[|list\()')

# file -> why it runs tunectl by hand
ALLOWED = {
    "tests/harness.py": "the harness itself",
    "tests/unit/cli/test_exit_codes.py": "asserts the internal-error path and --propagate's traceback",
    "tests/unit/profile/test_profile_fuzz.py": "--propagate: any exception on fuzzed input must escape to the fuzzer",
    "tests/unit/cli/test_tables.py": "a stdout that claims to be a terminal (colour)",
    "tests/unit/cli/test_termination.py": "a process signalled at chosen moments (Popen, an import hook)",
    "tests/unit/mounts/test_fstab_lifecycle.py": "a process killed mid-write (Popen)",
    "tests/unit/mounts/test_mounts_crash.py": "a process killed mid-write",
    "tests/unit/system/test_trust_modes.py": "a process whose reads are measured from outside (Popen)",
    "tests/root/bench/test_bench_devices.py": "a bench interrupted mid-run (Popen)",
    "tests/root/system/test_trust_exits_devices.py": "nobody with the system's python3 (root's venv is not theirs)",
    "tests/root/tuning/test_journal_kill.py": "a process killed mid-write (Popen)",
    "tests/root/udev/test_udev_monitor_udevd.py": "a monitor left running while udevd sends events (Popen)",
    "tests/unit/test_python_floor.py": "another interpreter (the declared floor, Python 3.9), not the harness's",
}


def test_tests_run_tunectl_through_the_harness() -> None:
    found = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
             if DIRECT.search(p.read_text(errors="replace")) and "/vm/" not in str(p) and "/package/" not in str(p)}
    found.discard("tests/unit/test_harness_use.py")
    assert found <= set(ALLOWED), f"run tunectl through tests.harness (run_cli or run_process): {sorted(found - set(ALLOWED))}"
    assert set(ALLOWED) <= found, f"now on the harness: take them out of ALLOWED: {sorted(set(ALLOWED) - found)}"
