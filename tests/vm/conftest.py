"""The VM tier: Debian's distro kernels under qemu, one boot per group of scenarios (see tests/vm/machine.py).

Every test here is marked `vm`. They skip, saying why, only when qemu cannot start a
guest at all; a missing kernel cache is a set-up failure (run scripts/bootstrap --test).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.vm import machine

BOOTS: list[machine.Boot] = []
TIMES = Path(os.environ.get("TUNECTL_VM_TIMES", "/tmp/tunectl-vm-times.jsonl"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/vm/" in str(item.fspath):
            item.add_marker(pytest.mark.vm)


@pytest.fixture(scope="session")
def vm_kernels() -> dict[str, machine.Kernel]:
    """The unpacked kernels by series ("6.1", "6.12")."""
    why = machine.cannot_start()
    if why:
        pytest.skip(f"VM tier: {why}")
    found = {k.series: k for k in machine.kernels()}
    if "6.1" not in found:
        pytest.fail(f"VM tier: no Debian 6.1 kernel under {machine.CACHE}; run scripts/bootstrap --test", pytrace=False)
    return found


@pytest.fixture(scope="session")
def vm_boot(vm_kernels: dict[str, machine.Kernel], tmp_path_factory: pytest.TempPathFactory
            ) -> Callable[..., machine.Boot]:
    """`vm_boot(series, group)`: that group's results, booted once per session and kept for every test."""
    done: dict[tuple, machine.Boot] = {}

    def get(series: str, group: str, images: str | None = None, args: tuple[str, ...] = (),
            kind: str = "standard", rodirs: tuple[tuple[str, str], ...] = ()) -> machine.Boot:
        """`images`: a name shared by boots of one machine's life (the same disk images, in order)."""
        key = (series, group, images, args, kind, rodirs)
        if key not in done:
            if series not in vm_kernels:
                pytest.fail(f"VM tier: no Debian {series} kernel under {machine.CACHE}; run scripts/bootstrap --test",
                            pytrace=False)
            base = tmp_path_factory.getbasetemp() / f"vm-{series}"
            result = machine.boot(vm_kernels[series], group, machine.MACHINES[kind](),
                                  base / (images or f"images-{group}"), base / "shared", args,
                                  tuple((guest, Path(host)) for guest, host in rodirs))
            machine.append_line(TIMES, json.dumps({
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "kernel": result.kernel.release,
                "group": group, "args": list(args), "seconds": round(result.seconds, 1), "attempts": result.attempts}))
            done[key] = result
            BOOTS.append(result)
        return done[key]

    return get


def pytest_terminal_summary(terminalreporter, exitstatus: int) -> None:  # noqa: ANN001 (pytest's reporter type is private)
    logs = machine.passed_logs(exitstatus == pytest.ExitCode.OK)
    if logs is None:  # no boot was tried
        return
    terminalreporter.section("VM tier: boots and time per kernel")
    terminalreporter.write_line(logs)
    for release in dict.fromkeys(b.kernel.release for b in BOOTS):
        boots = [b for b in BOOTS if b.kernel.release == release]
        groups = ", ".join(f"{b.group} {b.seconds:.0f}s" + (f" (after {b.attempts - 1} retry)" if b.attempts > 1 else "")
                           for b in boots)
        terminalreporter.write_line(f"{release}: {len(boots)} boot(s), {sum(b.seconds for b in boots):.0f}s ({groups})")
        for b in boots:
            for failure in b.failures:  # a retried boot: what its failed attempt showed
                terminalreporter.write_line(f"  retried: {failure.splitlines()[0]}")
