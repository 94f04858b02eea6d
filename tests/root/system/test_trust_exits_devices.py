"""Issue #34: the exit codes a user other than root meets on the real /sys (a loop device of the test's own).

sysfs answers such a user EACCES (an attribute is root's 0644): that is "not
permitted" (4, as tunectl(8) says), with the default state directory or one of
their own; `rollback --check` writes nothing, so it needs no lock it cannot take.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness import REPO, run_cli
from tests.loopdev import attach, loop_devices, restore, snapshot, sysfs_read, sysfs_write

pytestmark = pytest.mark.root


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """tunectl as nobody, with the system's python3 (root's venv is not theirs to read)."""
    return subprocess.run(["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={REPO}", "python3", "-m", "tunectl",
                           *argv], capture_output=True, text=True, timeout=60, cwd="/")


def test_a_user_other_than_root_gets_exit_4_and_a_check_that_takes_no_lock(tmp_path: Path) -> None:
    own = Path(tempfile.mkdtemp(prefix="tunectl-nobody-", dir="/tmp"))
    try:
        profile = own / "loops.yaml"
        profile.write_text("name: loops\nclasses:\n  loop: {read_ahead_kb: 4096}\n")
        for path in (own, profile):
            os.chown(path, 65534, 65534)
        with loop_devices(tmp_path, [{"size_mb": 16, "read_ahead_kb": 128}]) as (dev,):
            before = sysfs_read(dev, "queue/read_ahead_kb")
            assert before != "4096"
            for state in ([], ["--state-dir", str(own / "state")]):
                done = as_nobody(*state, "apply", "-p", str(profile), dev)
                assert done.returncode == 4, (state, done.stdout + done.stderr)
                assert "Traceback" not in done.stderr
                assert sysfs_read(dev, "queue/read_ahead_kb") == before
            done = as_nobody("rollback", "--check", dev)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        subprocess.run(["rm", "-rf", str(own)], check=False)


@pytest.mark.parametrize("change", ["rename", "delete"])
def test_a_loop_device_whose_backing_file_changed_while_tuned_is_reported_and_rolled_back(tmp_path: Path,
                                                                                           change: str) -> None:
    """The journal keeps the backing file's inode and the loop's device number: a named loop device that matches an
    orphaned entry is the journalled device. verify says so (exit 1), rollback restores it; an old check writes
    nothing."""
    profile = tmp_path / "loops.yaml"
    profile.write_text("name: loops\nclasses:\n  loop: {read_ahead_kb: 4096}\n")
    env = dict(os.environ, TUNECTL_STATE_DIR=str(tmp_path / "state"))
    with loop_devices(tmp_path, [{"size_mb": 16, "read_ahead_kb": 128}]) as (dev,):
        before = sysfs_read(dev, "queue/read_ahead_kb")
        assert run_cli("apply", "-p", str(profile), dev, env=env).code == 0
        assert sysfs_read(dev, "queue/read_ahead_kb") == "4096" != before
        assert run_cli("verify", env=env).code == 0
        if change == "rename":
            os.rename(tmp_path / "loop0.img", tmp_path / "renamed.img")  # its identity (loop:PATH) is another now
        else:
            os.unlink(tmp_path / "loop0.img")  # loop:PATH (deleted)
        r = run_cli("verify", env=env)
        assert r.code == 1 and f"{dev} (loop:" in r.err and "is the loop device journalled as loop:" in r.err, \
            (r.code, r.out, r.err)
        r = run_cli("rollback", "--check", dev, env=env)
        assert r.code == 0 and "4096" in r.out and sysfs_read(dev, "queue/read_ahead_kb") == "4096", (r.out, r.err)
        r = run_cli("rollback", dev, env=env)
        assert r.code == 0, (r.out, r.err)
        assert sysfs_read(dev, "queue/read_ahead_kb") == before
        assert run_cli("rollback", "--check", dev, env=env).code == 0
        assert "loops" not in run_cli("verify", env=env).out  # nothing applied any more


def test_a_loop_device_whose_twin_was_detached_is_rolled_back_and_a_re_apply_keeps_its_originals(tmp_path: Path) -> None:
    """Two loop devices on one file are told apart by loop number; detaching one renames the other's identity.
    The journal's proof (inode, device number) finds its entry: apply keeps its originals, rollback restores."""
    profile = tmp_path / "loops.yaml"
    profile.write_text("name: loops\nclasses:\n  loop: {read_ahead_kb: 4096}\n")
    env = dict(os.environ, TUNECTL_STATE_DIR=str(tmp_path / "state"))
    with loop_devices(tmp_path, [{"size_mb": 16, "read_ahead_kb": 128}]) as (dev,):
        twin = attach(tmp_path / "loop0.img", {})
        kept = snapshot(twin)
        try:
            sysfs_write(twin, "queue/read_ahead_kb", "256")
            r = run_cli("apply", "-p", str(profile), dev, twin, env=env)
            assert r.code == 0 and sysfs_read(dev, "queue/read_ahead_kb") == "4096", (r.out, r.err)
        finally:
            restore(twin, kept)
            subprocess.run(["losetup", "-d", f"/dev/{twin}"], check=False, capture_output=True)
        r = run_cli("verify", env=env)
        assert r.code == 1 and "is the loop device journalled as loop:" in r.err, (r.code, r.out, r.err)
        assert run_cli("apply", "-p", str(profile), dev, env=env).code == 0  # its entry moves, originals kept
        assert run_cli("verify", env=env).code == 0
        r = run_cli("rollback", dev, env=env)
        assert r.code == 0, (r.out, r.err)
        assert sysfs_read(dev, "queue/read_ahead_kb") == "128"


def test_an_old_journal_without_the_proof_names_the_renamed_device_writes_nothing_and_exits_3(tmp_path: Path) -> None:
    """#34's last case: a journal from before the proof (no `loop:` inode and device number), whose loop device's
    backing file was renamed before any command re-saved it. Nothing proves the device is the journalled one, so
    nothing is written, but the rollback names it and does not exit 0 (the issue: "or at least reported with a
    non-zero exit")."""
    import json

    from tunectl.system.state import seal

    profile = tmp_path / "loops.yaml"
    profile.write_text("name: loops\nclasses:\n  loop: {read_ahead_kb: 4096}\n")
    state = tmp_path / "state"
    env = dict(os.environ, TUNECTL_STATE_DIR=str(state))
    with loop_devices(tmp_path, [{"size_mb": 16, "read_ahead_kb": 128}]) as (dev,):
        assert run_cli("apply", "-p", str(profile), dev, env=env).code == 0
        body = json.loads((state / "journal.json").read_text())
        payload = {k: v for k, v in body.items() if k not in ("version", "generation", "saved", "tunectl", "sha256")}
        [entry] = payload["devices"].values()
        assert entry.pop("loop"), entry  # the proof this version writes; an old journal has none
        (state / "journal.json").write_bytes(seal(payload, body["generation"]))
        os.rename(tmp_path / "loop0.img", tmp_path / "renamed.img")  # before any command could re-save the journal
        r = run_cli("rollback", dev, env=env)
        assert r.code == 3, (r.code, r.out, r.err)
        assert f"{dev} (loop:{tmp_path / 'renamed.img'}) was journalled as loop:{tmp_path / 'loop0.img'}" in r.err, r.err
        assert "nothing was restored on it" in r.err
        assert sysfs_read(dev, "queue/read_ahead_kb") == "4096"  # not proven the same device: not written
        r = run_cli("rollback", "--check", dev, env=env)
        assert r.code == 3 and "was journalled as" in r.err, (r.code, r.out, r.err)
