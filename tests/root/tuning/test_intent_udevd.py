"""The lifecycle of #21 on real loop devices and a real systemd-udevd (root only, under the global lock).

scoped apply -> bare plan/apply -> udev install -> hot-plug -> rollback (refused, then --remove-rules)
-> change event -> verify. Asserted throughout: no device outside the scope is written (every other
block device of the machine is snapshotted first), and at the end every original is back.

udevd: the session fixture of tests/udevd.py. The rules go to /run/udev/rules.d via --rules-dir and
are scoped by the record of intent to this test's own backing files; change events are sent only to
this test's loop devices (never `--trigger`, which reaches every disk).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness import CliResult, run_cli
from tests.loopdev import restore, snapshot, sysfs_read, sysfs_write
from tests.udevd import ENV, RULES_DIR, Udevd, udevadm

pytestmark = pytest.mark.root

PROFILE = """\
name: intent-live
classes:
  loop:
    scheduler: mq-deadline
    iosched: {read_expire: 160}  # whole jiffies at HZ 100, 250, 300 and 1000: read back as written
    read_ahead_kb: 1024
"""
TUNED = {"scheduler": "mq-deadline", "iosched/read_expire": "160", "read_ahead_kb": "1024"}


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

    def __call__(self, *argv: str) -> CliResult:
        return run_cli(*argv, env=self.env)


def _tuned(name: str) -> dict[str, str]:
    return {k: v for k, v in snapshot(name).items() if k in TUNED}


def test_lifecycle_scope_rules_hotplug_rollback(udevd: Udevd, tmp_path: Path) -> None:
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
        udevadm("settle", "--timeout=30")
        # A non-default knob on a: mq-deadline's read_expire back to 300 at the end, not to the kernel's 500.
        sysfs_write(a, "queue/scheduler", "mq-deadline")
        sysfs_write(a, "queue/iosched/read_expire", "300")
        before = _everything()
        others = {n: s for n, s in before.items() if n not in names}

        # 1. scoped apply
        r = cli("apply", "-p", str(tmp_path / "p.yaml"), a, b)
        assert r.code == 0, r.err
        assert _tuned(a) == TUNED and _tuned(b) == TUNED and snapshot(c) == before[c]

        # 2. bare plan and apply: the record's profile and scope, nothing else
        r = cli("plan", "--json")
        assert r.code == 0 and {s["device"] for s in r.doc["settings"]} == {a, b}, r.out
        r = cli("apply")
        assert r.code == 0, r.err
        assert snapshot(c) == before[c]

        # 3. udev install: scoped rules, originals journalled first
        r = cli("udev", "install", "--rules-dir", str(RULES_DIR), "--json")
        assert r.code == 0, r.err
        assert len(r.doc["scope"]) == 2 and r.doc["path"] == str(rules) and r.doc["journalled"] == 0  # apply wrote them: in sync
        assert cli("udev", "check", "--rules-dir", str(RULES_DIR)).code == 0

        # 4. hot-plug: b's file detached and attached to a fresh loop device; udev tunes it on its add event
        _detach(b)
        d = _free_loop()
        saved[d] = snapshot(d)
        restore(d, before[b])  # so that d's originals are the journalled ones of b's file
        d_before = snapshot(d)
        _attach(d, images / "d1.img")
        names.append(d)
        udevadm("settle", "--timeout=30")
        assert d_before["read_ahead_kb"] != TUNED["read_ahead_kb"]
        assert _tuned(d) == TUNED, "the scoped rules did not tune the hot-plugged device"
        props = udevadm("info", "--query=property", f"/dev/{d}").stdout
        assert f"TUNECTL_ORIG_READ_AHEAD_KB={d_before['read_ahead_kb']}" in props, props
        # an event on c (out of scope) changes nothing
        udevadm("trigger", "--action=change", f"/sys/block/{c}")
        udevadm("settle", "--timeout=30")
        assert snapshot(c) == before[c]

        # 5. rollback: refused while the rules are installed, then with --remove-rules
        r = cli("rollback")
        assert r.code == 2 and "--remove-rules" in r.err and rules.exists()
        r = cli("rollback", "--remove-rules")
        assert r.code == 0, r.err
        assert not rules.exists()

        # 6. an event after the rollback puts nothing back
        for name in (a, d):
            udevadm("trigger", "--action=change", f"/sys/block/{name}")
        udevadm("settle", "--timeout=30")

        # 7. verify: nothing applied
        r = cli("verify")
        assert r.code == 0 and r.out.startswith("nothing applied"), r.out

        assert snapshot(a) == before[a]
        assert sysfs_read(a, "queue/iosched/read_expire") == "300"
        assert snapshot(d) == d_before
        assert snapshot(c) == before[c]
        after = _everything()
        assert {n: after.get(n) for n in others} == others, "a device outside the scope was written"
    finally:
        if rules.exists():
            rules.unlink()
            udevadm("control", "--reload", check=False)
        udevadm("settle", "--timeout=30", check=False)
        for name in names:
            _detach(name)
        for name, snap in saved.items():
            restore(name, snap)
