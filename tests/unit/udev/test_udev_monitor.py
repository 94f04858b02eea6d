"""`tunectl udev monitor`: the event loop on a fake tree, and the real thing on a real udevd (root)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, all_topologies
from tests.loopdev import sysfs_read, sysfs_write
from tests.tuning_helpers import Tunectl
from tests.udevd import PROFILE, ROOT, loops, scoped_rules, udevadm
from tunectl.cli import Output
from tunectl.udev.cli import monitor
from tunectl.udev.monitor import BlockEvent

LOOP_PROFILE = """\
name: monitor-test
classes:
  ssd: {read_ahead_kb: 256}
  rotational: {scheduler: mq-deadline, read_ahead_kb: 4096}
"""


def _run(tree: FakeTree, tmp: Path, events: list, count: int | None = None, as_json: bool = True) -> tuple[int, str, str]:
    (tmp / "p.yaml").write_text(LOOP_PROFILE)
    tun = Tunectl(tree, tmp / "state")
    out, err = io.StringIO(), io.StringIO()
    args = Namespace(profile=str(tmp / "p.yaml"), count=count)
    code = monitor(tun.ctx, args, Output(out, err, as_json, False, 0), events=events)
    return code, out.getvalue(), err.getvalue()


def test_one_json_object_per_event_with_drift_named(fake_tree: FakeTree, tmp_path: Path) -> None:
    events = [BlockEvent("add", "sda", 1), BlockEvent("change", "sdb", 2), BlockEvent("remove", "sda", 3),
              BlockEvent("add", "zram0", 4), BlockEvent("add", "sdz", 5)]
    code, out, err = _run(fake_tree, tmp_path, events)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(d["device"], d["action"]) for d in lines] == [("sda", "add"), ("sdb", "change"), ("zram0", "add"),
                                                            ("sdz", "add")]  # remove is not a tuning event
    sda, sdb, zram, gone = lines
    assert sda["status"] == "drift" and not sda["in_sync"]
    assert {d["attribute"] for d in sda["drift"]} >= {"read_ahead_kb"}
    assert all(d["device"] == "sda" for d in sda["drift"])
    assert sdb["status"] == "drift" and [d["after"] for d in sdb["drift"]] == [256]
    assert zram["status"] == "not-tuned" and zram["in_sync"]
    assert gone["status"] == "vanished"
    assert "following udev block events, profile monitor-test" in err


def test_in_sync_after_apply_and_count_stops_early(fake_tree: FakeTree, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(LOOP_PROFILE)
    tun = Tunectl(fake_tree, tmp_path / "state")
    assert tun("apply", "-p", str(tmp_path / "p.yaml"), "sda", "sdb").code == 0
    events = [BlockEvent("add", "sda"), BlockEvent("change", "sdb"), BlockEvent("change", "sda")]
    code, out, _ = _run(fake_tree, tmp_path, events, count=2, as_json=False)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert "sda" in lines[0] and "in sync (2 settings)" in lines[0]
    assert "sdb" in lines[1] and "in sync (1 setting)" in lines[1]


def test_human_line_names_each_drifted_setting(fake_tree: FakeTree, tmp_path: Path) -> None:
    code, out, _ = _run(fake_tree, tmp_path, [BlockEvent("add", "sdb")], as_json=False)
    assert code == 0
    assert "sdb" in out and "drift: read_ahead_kb" in out and "-> 256" in out


@pytest.mark.parametrize("argv, code, message", [
    (["udev", "monitor", "--count", "0"], 2, "--count must be at least 1"),
    (["udev", "monitor", "--count", "x"], 2, "invalid int value"),
    (["udev", "monitor", "-p", "no-such-profile"], 2, "not found"),
])
def test_bad_input(fake_tree: FakeTree, tmp_path: Path, argv: list[str], code: int, message: str) -> None:
    result = Tunectl(fake_tree, tmp_path / "state")(*argv)
    assert result.code == code
    assert message in result.err
    assert "internal error" not in result.err and "Traceback" not in result.err


def test_a_fake_sysfs_root_is_refused_for_real_events(tmp_path: Path) -> None:
    tree = FakeTree.create(tmp_path)
    all_topologies(tree)
    env = {"PATH": os.environ.get("PATH", ""), "TUNECTL_SYSFS_ROOT": str(tree.root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", "tunectl", "udev", "monitor"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert "is not /sys" in proc.stderr


# --- the real thing: a real systemd-udevd, loop devices attached while the monitor runs -------------------------


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
            self.lines.put(json.loads(line))

    def wait_for(self, device: str, want, timeout: float = 30) -> dict:
        """The first event of `device` that `want` accepts; other devices' events stay for later calls
        (udev runs events of different devices in parallel: loop1's may come before loop0's)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            for i, doc in enumerate(self.held):
                if doc["device"] == device and doc not in seen:
                    seen.append(doc)
                    if want(doc):
                        return self.held.pop(i)
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


@pytest.mark.root
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
                doc = mon.wait_for(name, lambda d: d["action"] in ("add", "change"))
                assert doc["status"] == "in-sync", doc
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
