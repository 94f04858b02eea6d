"""apply / verify / rollback on real loop devices and the real kernel (root only)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fakesys import jiffies_to_msecs, msecs_to_jiffies
from tests.harness import run_cli, run_process
from tests.loopdev import active_scheduler, loop_devices, snapshot, sysfs_read, sysfs_write

pytestmark = pytest.mark.root
NOBODY = 65534

PROFILE = """\
name: loop-it
description: integration test profile
classes:
  loop:
    scheduler: [mq-deadline, bfq]
    read_ahead_kb: "1 MiB"
    iosched: {read_expire: 150, write_expire: 1500, front_merges: 0}
devices:
  - match: {class: loop, rotational: false}
    read_ahead_kb: 258      # not a multiple of 4 KiB: the kernel keeps 256
"""


# 150 ms as the kernel shows it back: rounded up to whole jiffies (152 at HZ=250, 150 at HZ=100, 300, 1000).
READ_EXPIRE_150 = {str(jiffies_to_msecs(msecs_to_jiffies(150, hz), hz)) for hz in (100, 250, 300, 1000)}


def run(*argv: str, env: dict) -> tuple[int, dict | str]:
    r = run_cli(*argv, env=env)
    return r.code, (r.doc if "--json" in argv else r.text)


@pytest.fixture
def loops(tmp_path):
    specs = [{"rotational": 1}, {"rotational": 0}, {"rotational": 0, "sector_size": 4096}]
    with loop_devices(tmp_path, specs) as names:
        yield names


@pytest.fixture
def env(tmp_path):
    (tmp_path / "p.yaml").write_text(PROFILE)
    return {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "PROFILE": str(tmp_path / "p.yaml")}


def test_apply_verify_drift_rollback(loops, env):
    originals = {n: snapshot(n) for n in loops}
    code, doc = run("apply", "-p", env["PROFILE"], *loops, "--json", env=env)
    assert code == 0, doc
    assert doc["changed"] is True
    hdd, ssd, ssd4k = loops
    for name in loops:
        assert active_scheduler(name) == "mq-deadline"
        assert sysfs_read(name, "queue/iosched/read_expire") in READ_EXPIRE_150  # whole jiffies, whatever HZ
        assert sysfs_read(name, "queue/iosched/write_expire") == "1500"
        assert sysfs_read(name, "queue/iosched/front_merges") == "0"
    assert sysfs_read(hdd, "queue/read_ahead_kb") == "1024"
    assert sysfs_read(ssd, "queue/read_ahead_kb") == "256"
    assert sysfs_read(ssd4k, "queue/logical_block_size") == "4096"

    code, doc = run("verify", "-p", env["PROFILE"], *loops, "--json", env=env)
    assert code == 0 and doc["in_sync"] is True, doc

    code, doc = run("apply", "-p", env["PROFILE"], *loops, "--json", env=env)
    assert code == 0 and doc["changed"] is False and doc["writes"] == 0

    sysfs_write(ssd, "queue/read_ahead_kb", "64")
    code, doc = run("verify", "-p", env["PROFILE"], *loops, "--json", env=env)
    assert code == 1
    drift = [s for s in doc["settings"] if s["status"] == "change"]
    assert [(s["device"], s["attribute"], s["before"], s["after"]) for s in drift] == [(ssd, "read_ahead_kb", 64, 258)]

    code, doc = run("rollback", *loops, "--json", env=env)
    assert code == 0, doc
    for name in loops:
        assert snapshot(name) == originals[name]
    code, doc = run("rollback", *loops, "--json", env=env)
    assert code == 0 and doc["changed"] is False


def test_knobs_survive_scheduler_round_trip_in_rollback(loops, env):
    """Original bfq knobs come back: the kernel resets them when the scheduler switches."""
    name = loops[0]
    sysfs_write(name, "queue/scheduler", "bfq")
    sysfs_write(name, "queue/iosched/slice_idle", "3")
    before = snapshot(name)
    assert run("apply", "-p", env["PROFILE"], name, "--json", env=env)[0] == 0
    assert active_scheduler(name) == "mq-deadline"
    assert run("rollback", name, "--json", env=env)[0] == 0
    assert snapshot(name) == before


def test_console_script_runs_as_a_process(loops, env):
    done = run_process("plan", "-p", env["PROFILE"], loops[0], "--json", env=env)
    assert done.code == 0, done.err
    doc = done.doc
    assert {s["attribute"] for s in doc["settings"]} >= {"scheduler", "read_ahead_kb", "iosched/read_expire"}


def test_apply_as_another_user_exits_4_and_records_nothing(loops, env):
    """A user other than root meets sysfs files 0644 root's (EACCES on open): exit 4, no journal and no record
    of intent in its state directory, the devices untouched (#33)."""
    for name in loops:  # a loop device keeps its scheduler after detach: make sure the profile's is a change here
        sysfs_write(name, "queue/scheduler", "none")
    originals = {n: snapshot(n) for n in loops}
    home = Path(tempfile.mkdtemp(prefix="tunectl-nobody-"))
    try:
        home.chmod(0o755)
        (home / "p.yaml").write_text(PROFILE)
        (home / "state").mkdir(mode=0o700)
        os.chown(home / "state", NOBODY, NOBODY)
        done = run_process("apply", "-p", str(home / "p.yaml"), *loops, "--json",
                           prefix=["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"],
                           env={**env, "TUNECTL_STATE_DIR": str(home / "state"), "PYTHONDONTWRITEBYTECODE": "1"})
        assert done.code == 4, (done.out, done.err)
        doc = done.doc
        statuses = {o["attribute"]: o["status"] for o in doc["settings"] if o["status"] != "ok"}
        assert statuses["scheduler"] == statuses["read_ahead_kb"] == "not-permitted", doc
        assert "changed" not in statuses.values(), doc
        kept = sorted(p.name for p in (home / "state").iterdir())
        assert not [n for n in kept if n.startswith(("journal", "active"))], kept  # the lock, a validation cache
        assert {n: snapshot(n) for n in loops} == originals
    finally:
        shutil.rmtree(home)


@pytest.mark.parametrize("nr_requests_by_hand", [False, True])
def test_rollback_says_async_depth_changed_only_when_it_differs(tmp_path, nr_requests_by_hand: bool):
    # The kernel quirk: mq-deadline resets async_depth whenever nr_requests is written (to the new depth on 6.18,
    # 3/4 of it before). A rollback wrote async_depth again whenever nr_requests was journalled and said
    # "changed" (- -> 256) though nr_requests was already back and async_depth had not moved.
    p = tmp_path / "depth.yaml"
    p.write_text("name: depth\nclasses:\n  loop: {scheduler: mq-deadline, queue: {nr_requests: 32}, "
                 "iosched: {async_depth: 16}}\n")
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with loop_devices(tmp_path, [{"rotational": 0, "scheduler": "mq-deadline"}]) as (name,):
        nr, depth = sysfs_read(name, "queue/nr_requests"), sysfs_read(name, "queue/iosched/async_depth")
        code, doc = run("apply", "-p", str(p), name, "--json", env=env)
        assert code == 0 and sysfs_read(name, "queue/iosched/async_depth") == "16", doc
        if nr_requests_by_hand:
            sysfs_write(name, "queue/nr_requests", nr)
            assert sysfs_read(name, "queue/iosched/async_depth") == depth  # reset by the kernel: the original
        code, doc = run("rollback", name, "--json", env=env)
        assert code == 0, doc
        assert (sysfs_read(name, "queue/nr_requests"), sysfs_read(name, "queue/iosched/async_depth")) == (nr, depth)
        got = {s["attribute"]: s for s in doc["settings"]}
        assert got["iosched/async_depth"]["status"] == ("ok" if nr_requests_by_hand else "changed"), got
        assert got["iosched/async_depth"]["before"] == (int(depth) if nr_requests_by_hand else 16)
        assert [s["attribute"] for s in doc["settings"] if s["status"] == "changed"] == \
            [s["attribute"] for s in doc["settings"] if s["before"] != s["after"]]


DEPTH_PROFILE = ("name: depth\nclasses:\n  loop: {scheduler: mq-deadline, queue: {nr_requests: 32}, "
                 "iosched: {async_depth: 16}}\n")


def _queue_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queue attributes tunectl writes from now on (in this process), in order."""
    from tunectl.system.sysfs import Sysfs

    writes: list[str] = []
    real = Sysfs.write

    def write(self: Sysfs, rel: str, value: str) -> None:
        writes.append(rel.split("/queue/", 1)[1])
        real(self, rel, value)

    monkeypatch.setattr(Sysfs, "write", write)
    return writes


def test_rollback_restores_async_depth_again_only_after_an_nr_requests_write_it_makes(tmp_path, monkeypatch):
    # Only restores that are written disturb async_depth (mq-deadline resets it on an nr_requests write): with
    # nr_requests put back by hand, the kernel's reset put async_depth back too, and nothing is left to do.
    p = tmp_path / "depth.yaml"
    p.write_text(DEPTH_PROFILE)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with loop_devices(tmp_path, [{"rotational": 0, "scheduler": "mq-deadline"}]) as (name,):
        nr, depth = sysfs_read(name, "queue/nr_requests"), sysfs_read(name, "queue/iosched/async_depth")
        assert run("apply", "-p", str(p), name, "--json", env=env)[0] == 0
        sysfs_write(name, "queue/nr_requests", nr)
        assert sysfs_read(name, "queue/iosched/async_depth") == depth
        code, doc = run("rollback", name, "--check", "--json", env=env)
        assert code == 0, doc
        got = {s["attribute"]: s["status"] for s in doc["settings"]}
        assert got["nr_requests"] == got["iosched/async_depth"] == "ok" and doc["changed"] is False, doc
        code, text = run("rollback", name, "--print", env=env)
        assert code == 0 and "async_depth" not in text, text
        writes = _queue_writes(monkeypatch)
        assert run("rollback", name, "--json", env=env)[0] == 0
        assert writes == []


@pytest.mark.parametrize("original", ["the kernel's", "set by hand"])
def test_rollback_writes_async_depth_only_when_the_kernels_reset_did_not_restore_it(tmp_path, monkeypatch,
                                                                                    original: str):
    # The nr_requests restore makes mq-deadline reset async_depth (to the new depth on 6.18, 3/4 of it before):
    # looked at again just before its own write, async_depth already at its original is not written.
    p = tmp_path / "depth.yaml"
    p.write_text(DEPTH_PROFILE)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with loop_devices(tmp_path, [{"rotational": 0, "scheduler": "mq-deadline"}]) as (name,):
        nr, depth = sysfs_read(name, "queue/nr_requests"), sysfs_read(name, "queue/iosched/async_depth")
        if original == "set by hand":  # not what the reset gives back on this kernel
            depth = str(int(depth) - 1)
            sysfs_write(name, "queue/iosched/async_depth", depth)
            assert sysfs_read(name, "queue/iosched/async_depth") == depth
        assert run("apply", "-p", str(p), name, "--json", env=env)[0] == 0
        writes = _queue_writes(monkeypatch)
        code, doc = run("rollback", name, "--json", env=env)
        assert code == 0, doc
        assert (sysfs_read(name, "queue/nr_requests"), sysfs_read(name, "queue/iosched/async_depth")) == (nr, depth)
        assert writes == ["nr_requests"] + (["iosched/async_depth"] if original == "set by hand" else []), writes
        got = {s["attribute"]: s for s in doc["settings"]}["iosched/async_depth"]
        assert (got["status"], got["before"], got["after"]) == ("changed", 16, int(depth)), got
