"""Ranges {min, max} on real loop devices and the real kernel (root only): below, inside and above a range,
a knob range across a real scheduler switch, verify, rollback after a raise."""

from __future__ import annotations

import pytest

from tests.harness import run_cli
from tests.loopdev import active_scheduler, loop_devices, snapshot, sysfs_read, sysfs_write

pytestmark = pytest.mark.root

RA = "name: ra\nclasses:\n  loop: {read_ahead_kb: {min: 1024, max: 4 MiB}}\n"
# bfq's defaults after a switch (kernel 6.x): slice_idle 8, fifo_expire_sync 125, back_seek_penalty 2.
SWITCH = ("name: switch\nclasses:\n  loop:\n    scheduler: bfq\n"
          "    iosched: {slice_idle: {max: 4}, fifo_expire_sync: {min: 100}, back_seek_penalty: {min: 5}}\n")


def run(*argv: str, env: dict) -> tuple[int, dict]:
    r = run_cli(*argv, "--json", env=env)
    return r.code, r.doc if r.out else {"err": r.err}


@pytest.fixture
def env(tmp_path):
    for name, text in (("ra", RA), ("switch", SWITCH)):
        (tmp_path / f"{name}.yaml").write_text(text)
    return {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "RA": str(tmp_path / "ra.yaml"), "SWITCH": str(tmp_path / "switch.yaml")}


def test_below_inside_above_verify_and_rollback_after_a_raise(tmp_path, env):
    with loop_devices(tmp_path, [{}, {}, {}]) as names:
        below, inside, above = names
        originals = {}
        for name, ra in zip(names, ("64", "2048", "16384")):
            sysfs_write(name, "queue/read_ahead_kb", ra)
            originals[name] = snapshot(name)
        code, doc = run("plan", "-p", env["RA"], *names, env=env)
        plan = {s["device"]: (s["before"], s["after"], s["status"], s["range"]) for s in doc["settings"]}
        assert plan == {below: (64, 1024, "change", {"min": 1024, "max": 4096}),
                        inside: (2048, 2048, "ok", {"min": 1024, "max": 4096}),
                        above: (16384, 4096, "change", {"min": 1024, "max": 4096})}
        code, doc = run("apply", "-p", env["RA"], *names, env=env)
        assert code == 0 and doc["changed"] is True, doc
        assert [sysfs_read(n, "queue/read_ahead_kb") for n in names] == ["1024", "2048", "4096"]
        assert run("verify", "-p", env["RA"], *names, env=env)[0] == 0

        sysfs_write(inside, "queue/read_ahead_kb", "3072")  # moved, still inside: in sync
        assert run("verify", "-p", env["RA"], *names, env=env)[0] == 0
        sysfs_write(inside, "queue/read_ahead_kb", "512")  # below the floor: drift
        code, doc = run("verify", "-p", env["RA"], *names, env=env)
        assert code == 1
        assert [(s["device"], s["before"], s["after"]) for s in doc["settings"] if s["status"] == "change"] == \
            [(inside, 512, 1024)]
        sysfs_write(inside, "queue/read_ahead_kb", "2048")

        code, doc = run("rollback", *names, env=env)
        assert code == 0, doc
        assert {n: snapshot(n) for n in names} == originals  # 64 back after the raise, 16384 after the cap


def test_knob_range_across_a_real_scheduler_switch(tmp_path, env):
    with loop_devices(tmp_path, [{}]) as (name,):
        sysfs_write(name, "queue/scheduler", "mq-deadline")
        original = snapshot(name)
        code, doc = run("apply", "-p", env["SWITCH"], name, env=env)
        assert code == 0, doc
        outcome = {s["attribute"]: (s["status"], s["readback"]) for s in doc["settings"]}
        assert active_scheduler(name) == "bfq"
        assert outcome["iosched/slice_idle"] == ("changed", 4)  # the kernel's 8 is above the cap
        assert outcome["iosched/back_seek_penalty"] == ("changed", 5)  # the kernel's 2 is below the floor
        assert outcome["iosched/fifo_expire_sync"] == ("ok", 125)  # the kernel's default is inside: kept, not written
        assert sysfs_read(name, "queue/iosched/fifo_expire_sync") == "125"
        assert run("verify", "-p", env["SWITCH"], name, env=env)[0] == 0
        code, doc = run("apply", "-p", env["SWITCH"], name, env=env)
        assert doc["changed"] is False
        assert run("rollback", name, env=env)[0] == 0
        assert snapshot(name) == original
