"""scripts/test's layout: the locked environment in two runs (`--tier host`, then `--tier vm`) with Debian's pass
started as a background job beside the first, the way scripts/test starts it."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.harness import REPO
from tests.unit.test_sigint_ignored import MARKED

VM_TEST = "tests/vm/test_explain.py"
UNIT_TEST = "tests/unit/test_sigint_ignored.py"


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                           VM_TEST, UNIT_TEST], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_tiers_split_the_suite_between_the_vm_tier_and_the_rest() -> None:
    every, host, vm = _collected(), _collected("--tier", "host"), _collected("--tier", "vm")
    assert host and vm and sorted(host + vm) == sorted(every)
    assert all(t.startswith("tests/vm/") for t in vm), vm
    assert not any(t.startswith("tests/vm/") for t in host), host


def test_the_vm_tier_alone_collects_no_other_test() -> None:
    # pytest asks pytest_ignore_collect only about what it finds in directories, not about paths given to it: the
    # VM run of scripts/test names none, and collected (and deselected) the whole suite, ~30 s under load.
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--tier",
                           "vm", "tests"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", last), last


def test_debian_pass_started_as_scripts_test_starts_it_has_sigint_back() -> None:
    # A background job of a script starts with SIGINT ignored: the tests marked sigint would error
    # (tests/conftest.py). scripts/test gives the default back with `env --default-signal=INT`; run its launch
    # line, with pytest on one such test in place of scripts/test-debian, as a background job of a script.
    script = (REPO / "scripts" / "test").read_text()
    launch = re.search(r"^(.*) scripts/test-debian > \"\$debian_log\" 2>&1 &$", script, re.M)
    assert launch, "scripts/test no longer starts scripts/test-debian as this test expects"
    prefix = launch.group(1)
    assert "env --default-signal=INT" in prefix, prefix
    job = f"{prefix} {sys.executable} -m pytest -q -p no:cacheprovider {MARKED} & wait $!"
    proc = subprocess.run(["bash", "-c", job], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    # and the same job without it errors: the test above is what the launch line's env is for
    bare = job.replace("env --default-signal=INT ", "")
    proc = subprocess.run(["bash", "-c", bare], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 1 and "1 error" in proc.stdout, proc.stdout + proc.stderr


def test_debian_pass_starts_before_the_first_part_not_beside_the_vm_tier() -> None:
    # A TCG guest ran ~2x slower beside Debian's pass (nice 19 or not): it runs beside the first part only.
    script = (REPO / "scripts" / "test").read_text()
    debian = script.index('scripts/test-debian > "$debian_log"')
    host = script.index("--tier host")
    vm = script.index("--tier vm")
    assert debian < host < vm, "scripts/test starts Debian's pass after the first part's pytest run"
