"""The lifecycle of #21 on real loop devices and a real systemd-udevd (root only, under the global lock).

scoped apply -> bare plan/apply -> udev install -> hot-plug -> rollback (refused, then --remove-rules)
-> change event -> verify. Asserted throughout: no device outside the scope is written (every other
block device of the machine is snapshotted first), and at the end every original is back.

udevd: when none answers `udevadm control --ping`, this module starts
/lib/systemd/systemd-udevd --daemon and stops it (`udevadm control --exit`) at
the end. The rules go to /run/udev/rules.d via --rules-dir and are scoped by the
record of intent to this test's own backing files; change events are sent only
to this test's loop devices (never `--trigger`, which reaches every disk).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopdev import needs_root, restore, snapshot, sysfs_read, sysfs_write
from tunectl.cli import main

pytestmark = [pytest.mark.root, needs_root]

UDEVD = "/lib/systemd/systemd-udevd"
RULES_DIR = Path("/run/udev/rules.d")
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
PROFILE = """\
name: intent-live
classes:
  loop:
    scheduler: mq-deadline
    iosched: {read_expire: 152}
    read_ahead_kb: 1024
"""
TUNED = {"scheduler": "mq-deadline", "iosched/read_expire": "152", "read_ahead_kb": "1024"}


def _udevadm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["udevadm", *args], capture_output=True, text=True, timeout=60, check=check, env=ENV)


def _ping() -> bool:
    return _udevadm("control", "--ping", "--timeout=2", check=False).returncode == 0


@pytest.fixture(scope="module")
def udevd() -> Iterator[None]:
    if _ping():
        yield
        return
    if not os.access(UDEVD, os.X_OK):
        pytest.skip(f"{UDEVD} not installed")
    runtime_existed = Path("/run/udev").exists()
    subprocess.run([UDEVD, "--daemon"], check=True, env=ENV, timeout=30)
    deadline = time.monotonic() + 15
    while not _ping():
        assert time.monotonic() < deadline, "systemd-udevd --daemon did not answer"
        time.sleep(0.1)
    try:
        yield
    finally:
        _udevadm("control", "--exit", check=False)
        if not runtime_existed and not _ping():
            shutil.rmtree("/run/udev", ignore_errors=True)


def _free_loop() -> str:
    return subprocess.run(["losetup", "-f"], capture_output=True, text=True, check=True, env=ENV).stdout.strip()[5:]


def _attach(name: str, backing: Path) -> None:
    subprocess.run(["losetup", f"/dev/{name}", str(backing)], check=True, env=ENV, capture_output=True)


def _detach(name: str) -> None:
    subprocess.run(["losetup", "-d", f"/dev/{name}"], env=ENV, capture_output=True, check=False)


def _everything() -> dict[str, dict[str, str]]:
    """Every block device's tunable queue state (other helpers' loops, vda, zram: all must stay as they are)."""
    out = {}
    for name in sorted(os.listdir("/sys/block")):
        if Path(f"/sys/block/{name}/queue/scheduler").exists():
            try:
                out[name] = snapshot(name)
            except (OSError, StopIteration):
                continue  # a device without a bracketed scheduler (none offered) or vanishing right now
    return out


class Cli:
    def __init__(self, state: Path) -> None:
        self.env = {**ENV, "TUNECTL_STATE_DIR": str(state)}

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), env=self.env, stdout=out, stderr=err)
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), err.getvalue()
        return code, out.getvalue(), err.getvalue()


def _tuned(name: str) -> dict[str, str]:
    return {k: v for k, v in snapshot(name).items() if k in TUNED}


def test_lifecycle_scope_rules_hotplug_rollback(udevd: None, tmp_path: Path) -> None:
    rules = RULES_DIR / "65-tunectl.rules"
    RULES_DIR.mkdir(parents=True, exist_ok=True)
    assert not rules.exists(), f"{rules} exists: another test or tunectl left it"
    images = tmp_path / "img"
    images.mkdir()
    for i in range(3):
        with open(images / f"d{i}.img", "wb") as f:
            f.truncate(16 << 20)
    (tmp_path / "p.yaml").write_text(PROFILE)
    cli = Cli(tmp_path / "state")
    names: list[str] = []
    saved: dict[str, dict[str, str]] = {}
    try:
        for i in range(3):
            name = _free_loop()
            saved[name] = snapshot(name)
            _attach(name, images / f"d{i}.img")
            names.append(name)
        a, b, c = names
        _udevadm("settle", "--timeout=30")
        # A non-default knob on a: mq-deadline's read_expire back to 300 at the end, not to the kernel's 500.
        sysfs_write(a, "queue/scheduler", "mq-deadline")
        sysfs_write(a, "queue/iosched/read_expire", "300")
        before = _everything()
        others = {n: s for n, s in before.items() if n not in names}

        # 1. scoped apply
        code, _, err = cli("apply", "-p", str(tmp_path / "p.yaml"), a, b)
        assert code == 0, err
        assert _tuned(a) == TUNED and _tuned(b) == TUNED and snapshot(c) == before[c]

        # 2. bare plan and apply: the record's profile and scope, nothing else
        code, out, _ = cli("plan", "--json")
        doc = json.loads(out)
        assert code == 0 and {s["device"] for s in doc["settings"]} == {a, b}, doc
        code, _, err = cli("apply")
        assert code == 0, err
        assert snapshot(c) == before[c]

        # 3. udev install: scoped rules, originals journalled first
        code, out, err = cli("udev", "install", "--rules-dir", str(RULES_DIR), "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert len(doc["scope"]) == 2 and doc["path"] == str(rules)
        assert cli("udev", "check", "--rules-dir", str(RULES_DIR))[0] == 0

        # 4. hot-plug: b's file detached and attached to a fresh loop device; udev tunes it on its add event
        _detach(b)
        d = _free_loop()
        saved[d] = snapshot(d)
        restore(d, before[b])  # so that d's originals are the journalled ones of b's file
        d_before = snapshot(d)
        _attach(d, images / "d1.img")
        names.append(d)
        _udevadm("settle", "--timeout=30")
        assert d_before["read_ahead_kb"] != TUNED["read_ahead_kb"]
        assert _tuned(d) == TUNED, "the scoped rules did not tune the hot-plugged device"
        props = _udevadm("info", "--query=property", f"/dev/{d}").stdout
        assert f"TUNECTL_ORIG_READ_AHEAD_KB={d_before['read_ahead_kb']}" in props, props
        # an event on c (out of scope) changes nothing
        _udevadm("trigger", "--action=change", f"/sys/block/{c}")
        _udevadm("settle", "--timeout=30")
        assert snapshot(c) == before[c]

        # 5. rollback: refused while the rules are installed, then with --remove-rules
        code, _, err = cli("rollback")
        assert code == 2 and "--remove-rules" in err and rules.exists()
        code, _, err = cli("rollback", "--remove-rules")
        assert code == 0, err
        assert not rules.exists()

        # 6. an event after the rollback puts nothing back
        for name in (a, d):
            _udevadm("trigger", "--action=change", f"/sys/block/{name}")
        _udevadm("settle", "--timeout=30")

        # 7. verify: nothing applied
        code, out, _ = cli("verify")
        assert code == 0 and out.startswith("nothing applied"), out

        assert snapshot(a) == before[a]
        assert sysfs_read(a, "queue/iosched/read_expire") == "300"
        assert snapshot(d) == d_before
        assert snapshot(c) == before[c]
        after = _everything()
        assert {n: after.get(n) for n in others} == others, "a device outside the scope was written"
    finally:
        if rules.exists():
            rules.unlink()
            _udevadm("control", "--reload", check=False)
        _udevadm("settle", "--timeout=30", check=False)
        for name in names:
            _detach(name)
        for name, snap in saved.items():
            restore(name, snap)
