"""The udevadm edge: is systemd-udevd running, reload its rules, send change events, verify a rules file.

Every call goes through the runner the caller gives (the Context's), so tests
record the calls instead of reaching this machine's udevd.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tunectl.system import runner

TRIGGER = ("udevadm", "trigger", "--action=change", "--subsystem-match=block", "--property-match=DEVTYPE=disk")
# Stacked devices once more, after every disk settled: their RUN of tunectl must come after the
# events of the disks below them, or a disk's own rules could overwrite its below: values.
TRIGGER_STACKED = TRIGGER + ("--sysname-match=dm-*", "--sysname-match=md*")
SETTLE = ("udevadm", "settle", "--timeout=180")


class Udevadm:
    def __init__(self, run: Callable[..., runner.Completed] = runner.run) -> None:
        self._run = run

    def running(self) -> bool:
        try:
            return self._run(["udevadm", "control", "--ping", "--timeout=5"], timeout=15, check=False).returncode == 0
        except runner.CommandError:
            return False

    def reload(self) -> None:
        self._run(["udevadm", "control", "--reload"], timeout=30)

    def trigger(self, stacked_again: bool, names: list[str] | None = None) -> None:
        """Change events to every block disk (`names`: to those kernel names only), then settle; with
        `stacked_again`, dm and md (of `names`) once more after."""
        if names is not None and not names:
            return
        only = () if names is None else tuple(f"--sysname-match={n}" for n in names)
        self._run(TRIGGER + only, timeout=60)
        self._run(SETTLE, timeout=190)
        stacked = [n for n in names or () if n.startswith(("dm-", "md"))]
        if stacked_again and (names is None or stacked):
            self._run(TRIGGER_STACKED if names is None else TRIGGER + tuple(f"--sysname-match={n}" for n in stacked),
                      timeout=60)
            self._run(SETTLE, timeout=190)

    def verify(self, text: str, file_name: str) -> str | None:
        """`udevadm verify` on the text when udevadm has it (systemd >= 254); the failure, or None."""
        try:
            version = int(self._run(["udevadm", "--version"], timeout=15).stdout.split()[0])
        except (runner.CommandError, ValueError, IndexError):
            return None
        if version < 254:
            return None
        import tempfile  # here, not at the top: plan and verify import this module and never verify rules

        with tempfile.TemporaryDirectory(prefix="tunectl-verify-") as tmp:
            path = Path(tmp) / file_name
            path.write_text(text)
            done = self._run(["udevadm", "verify", "--resolve-names=never", str(path)], timeout=30, check=False)
        if done.returncode != 0:
            return (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
        return None
