"""`tunectl udev monitor` on a real systemd-udevd: loop devices attached while the monitor runs (root only)."""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import check_documents
from tests.loopdev import sysfs_read, sysfs_write
from tests.udevd import PROFILE, ROOT, loops, scoped_rules, udevadm

pytestmark = pytest.mark.root


class _Monitor:
    """`tunectl udev monitor --json` as a process; stdout lines arrive on a queue."""

    def __init__(self, profile: Path, state: Path) -> None:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "TUNECTL_STATE_DIR": str(state)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tunectl", "udev", "monitor", "--json", "-p", str(profile)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.lines: queue.Queue = queue.Queue()
        self.held: list[dict] = []
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self.proc.stderr.readline()  # printed once the netlink socket listens
        assert "following udev block events" in ready, ready + self.proc.stderr.read()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(check_documents(line)[0])

    def wait_for(self, device: str, want, timeout: float = 30) -> dict:
        """The first event of `device` that `want` accepts; other devices' events stay for later calls
        (udev runs events of different devices in parallel: loop1's may come before loop0's), and the same
        device's earlier events are dropped (a later call must not match an event older than this one)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            for i, doc in enumerate(self.held):
                if doc["device"] == device and doc not in seen:
                    seen.append(doc)
                    if want(doc):
                        self.held = [d for j, d in enumerate(self.held) if j > i or d["device"] != device]
                        return doc
            if time.monotonic() >= deadline:
                raise AssertionError(f"no matching event for {device} within {timeout} s; saw {seen}")
            with contextlib.suppress(queue.Empty):
                self.held.append(self.lines.get(timeout=max(0.05, deadline - time.monotonic())))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.mark.sigint  # the monitor runs until Ctrl-C
def test_monitor_reports_hotplugged_loops_in_sync_then_drift(udevd, rules, tmp_path: Path) -> None:
    scope = tmp_path / "scope"
    text, profile = scoped_rules(PROFILE, tmp_path, scope)
    rules.write(text)
    mon = _Monitor(profile, tmp_path / "state")
    try:
        with loops(scope, 2, [None, None], rules) as names:
            for name in names:
                # Attaching a loop device is a change event of an existing node (add when the node is new).
                # udev ran our rules before the event reached the monitor, so the device is already tuned.
                # An attach sends more than one event, and one sent before the backing file is set finds the
                # device outside the rules' scope (untuned, so "drift"): wait for the event after the tuning.
                doc = mon.wait_for(name, lambda d: d["action"] in ("add", "change") and d["status"] == "in-sync")
                assert doc["settings"] >= 3
            rules.remove()
            name = names[0]
            sysfs_write(name, "queue/read_ahead_kb", "8")
            udevadm("trigger", "--action=change", "--settle", f"/dev/{name}")
            # An attach can send more than one change event: earlier, in-sync ones may still be queued.
            doc = mon.wait_for(name, lambda d: d["action"] == "change" and d["status"] == "drift")
            drift = {d["attribute"]: d for d in doc["drift"]}
            assert drift["read_ahead_kb"]["before"] == 8
            assert int(sysfs_read(name, "queue/read_ahead_kb")) == 8  # the monitor only reports; it never writes
    finally:
        assert mon.stop() == 0
