"""Generated udev rules on a real systemd-udevd and real loop devices (root only).

The daemon, the scoped rules files and their safety rules: tests/udevd.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.loopdev import active_scheduler, snapshot, sysfs_read, sysfs_write
from tests.udevd import (
    ENV,
    EXPECTED,
    PROFILE,
    ROOT,
    Rules,
    Udevd,
    change,
    holds,
    loops,
    scoped_rules,
    udev_properties,
)

pytestmark = pytest.mark.root

def cli(*argv: str, state: Path) -> tuple[int, str]:
    r = run_cli(*argv, env={**ENV, "TUNECTL_STATE_DIR": str(state)})
    return r.code, r.text


# --- the rules load cleanly ------------------------------------------------------------------------------------


def test_every_golden_rules_file_loads_in_udevd_without_complaint(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    if udevd.log is None:
        pytest.skip("udevd was already running; its log is not ours to read")
    golden = sorted((ROOT / "tests" / "golden" / "udev").glob("*.rules"))
    assert golden
    with loops(tmp_path / "scope", 1, [None], rules) as (name,):
        for g in golden:
            text = g.read_text()
            # Scope each file to nothing real before loading it: only its syntax is under test here.
            text = text.replace('TEST!="queue", GOTO="tunectl_end"\n',
                                'TEST!="queue", GOTO="tunectl_end"\nKERNEL!="tunectl-no-such-device", GOTO="tunectl_end"\n')
            offset = udevd.log_size()
            rules.write(text)
            change(name)  # udevd (re)reads rules on the next event
            log = udevd.log_since(offset)
            assert f"Reading rules file: {rules.path}" in log, g.name
            complaints = [line for line in log.splitlines() if str(rules.path) in line and "Reading rules file" not in line]
            assert complaints == [], f"{g.name}: {complaints}"


# --- hot-plug, equivalence, re-apply ---------------------------------------------------------------------------


@pytest.mark.parametrize("rotational", [None, 0, 1], ids=["as-attached", "rotational0", "rotational1"])
def test_hotplug_applies_the_profile(udevd: Udevd, rules: Rules, tmp_path: Path, rotational: int | None) -> None:
    scope = tmp_path / "scope"
    text, _ = scoped_rules(PROFILE, tmp_path, scope)
    rules.write(text)
    with loops(scope, 2, [rotational, rotational], rules) as names:
        if rotational is not None:
            # rotational is written after the attach event ran: a change event lets the rules see it.
            change(*names)
        for name in names:
            rot = sysfs_read(name, "queue/rotational")
            assert holds(name, EXPECTED[rot]) == {}, name
            props = udev_properties(name)
            assert props["TUNECTL_CLASS"] == "loop"
            assert props["TUNECTL_SCHEDULER"] == EXPECTED[rot]["scheduler"]


START_STATES = {
    "kyber": {"scheduler": "kyber", "read_ahead_kb": "64", "nr_requests": "32", "add_random": "1"},
    "deadline-tweaked": {"scheduler": "mq-deadline", "iosched/read_expire": "300", "iosched/fifo_batch": "8",
                         "read_ahead_kb": "512", "add_random": "0"},
    "bfq-tweaked": {"scheduler": "bfq", "iosched/slice_idle": "5", "iosched/strict_guarantees": "1", "nr_requests": "100"},
}


def _set_state(name: str, state: dict[str, str]) -> None:
    for attr, value in sorted(state.items(), key=lambda kv: (kv[0] != "scheduler", kv[0] == "read_ahead_kb")):
        sysfs_write(name, f"queue/{attr}", value)


@pytest.mark.parametrize("start", sorted(START_STATES))
def test_udev_event_and_apply_reach_byte_identical_state(udevd: Udevd, rules: Rules, tmp_path: Path, start: str) -> None:
    """The equivalence guarantee: same device, same start, `tunectl apply` vs a change event."""
    scope = tmp_path / "scope"
    text, profile = scoped_rules(PROFILE, tmp_path, scope)
    rules.write(text)
    with loops(scope, 3, [1, 0, 0], rules) as names:
        by_apply, by_udev = {}, {}
        for name, rot in zip(names, ["1", "0", "0"]):
            _set_state(name, dict(START_STATES[start], rotational=rot))
        code, out = cli("apply", "-p", str(profile), *names, "--json", state=tmp_path / "state")
        assert code == 0, out
        for name in names:
            by_apply[name] = snapshot(name)
        for name, rot in zip(names, ["1", "0", "0"]):
            _set_state(name, dict(START_STATES[start], rotational=rot))
            assert snapshot(name) != by_apply[name]
        change(*names)
        for name in names:
            by_udev[name] = snapshot(name)
        assert by_udev == by_apply
        for name, rot in zip(names, ["1", "0", "0"]):
            assert holds(name, EXPECTED[rot]) == {}
        code, out = cli("verify", "-p", str(profile), *names, "--json", state=tmp_path / "state")
        assert code == 0 and json.loads(out)["in_sync"] is True, out


def test_change_event_restores_a_scheduler_switched_by_hand(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    scope = tmp_path / "scope"
    text, _ = scoped_rules(PROFILE, tmp_path, scope)
    rules.write(text)
    with loops(scope, 2, [0, 1], rules) as names:
        change(*names)
        tuned = {n: snapshot(n) for n in names}
        for name in names:
            sysfs_write(name, "queue/scheduler", "kyber")
            sysfs_write(name, "queue/iosched/read_lat_nsec", "4000000")
            assert active_scheduler(name) == "kyber"
        change(*names)
        after = {n: snapshot(n) for n in names}
        assert after == tuned, {n: {k: (tuned[n].get(k), v) for k, v in after[n].items() if tuned[n].get(k) != v} for n in names}


def test_scheduler_the_device_lacks_is_skipped_and_verify_reports_it(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    """Every valid scheduler is built into this kernel and offered by loop devices, so the rendered
    file is edited to ask for one that does not exist: the guard rule cannot match, nothing is
    written for it, the rest applies, and `tunectl verify` against the profile finds the one drift."""
    scope = tmp_path / "scope"
    text, profile = scoped_rules("name: lacks\nclasses:\n  loop: {scheduler: kyber, read_ahead_kb: 1024}\n", tmp_path, scope)
    rules.write(text.replace("kyber", "nosuch-sched"))
    with loops(scope, 1, [None], rules) as (name,):
        _set_state(name, {"scheduler": "mq-deadline", "read_ahead_kb": "64"})
        offset = udevd.log_size()
        change(name)
        assert active_scheduler(name) == "mq-deadline"
        assert sysfs_read(name, "queue/read_ahead_kb") == "1024"
        props = udev_properties(name)
        assert props.get("TUNECTL_SCHEDULER_UNAVAILABLE") == "1" and props.get("TUNECTL_SCHEDULER_WANTED") == "nosuch-sched"
        if udevd.log is not None:
            assert "nosuch-sched" not in "".join(line for line in udevd.log_since(offset).splitlines() if "Failed" in line)
        code, out = cli("verify", "-p", str(profile), name, "--json", state=tmp_path / "state")
        drift = [s for s in json.loads(out)["settings"] if s["status"] in ("change", "unavailable")]
        assert code == 1
        assert [(s["attribute"], s["before"], s["after"]) for s in drift] == [("scheduler", "mq-deadline", "kyber")]


# --- ranges: the rules compare with digit globs, apply compares numbers --------------------------------------

RANGES = """\
name: udev-ranges
classes:
  loop:
    read_ahead_kb: {min: 4096}
    scheduler: bfq
    iosched: {slice_idle: {max: 4}, fifo_expire_sync: {min: 100}, back_seek_penalty: {min: 5, max: 10}}
    queue: {nr_requests: {min: 16, max: 64}}
"""


def test_hotplug_below_a_floor_is_raised_above_is_left_alone(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    scope = tmp_path / "scope"
    text, profile = scoped_rules(RANGES, tmp_path, scope)
    rules.write(text)
    with loops(scope, 2, [None, None], rules, prepare={"scheduler": ["mq-deadline"] * 2,
                                                       "read_ahead_kb": ["64", "16384"]}) as (low, high):
        assert sysfs_read(low, "queue/read_ahead_kb") == "4096"  # raised to the floor by the attach event
        assert sysfs_read(high, "queue/read_ahead_kb") == "16384"  # above the floor: left alone
        for name in (low, high):
            assert active_scheduler(name) == "bfq"
            assert [sysfs_read(name, f"queue/iosched/{k}") for k in ("slice_idle", "fifo_expire_sync", "back_seek_penalty")] \
                == ["4", "125", "5"]  # above the cap, inside (the kernel's default stays), below the floor
            assert udev_properties(name)["TUNECTL_QUEUE_READ_AHEAD_KB"] == "4096.."
        code, out = cli("verify", "-p", str(profile), low, high, "--json", state=tmp_path / "state")
        assert code == 0 and json.loads(out)["in_sync"] is True, out
        settings = {(s["device"], s["attribute"]): s for s in json.loads(out)["settings"]}
        assert settings[(high, "read_ahead_kb")]["before"] == 16384 and settings[(high, "read_ahead_kb")]["status"] == "ok"


RANGE_STARTS = {
    "below": {"scheduler": "bfq", "read_ahead_kb": "64", "nr_requests": "8", "iosched/slice_idle": "0",
              "iosched/fifo_expire_sync": "50", "iosched/back_seek_penalty": "1"},
    "inside": {"scheduler": "bfq", "read_ahead_kb": "8192", "nr_requests": "32", "iosched/slice_idle": "2",
               "iosched/fifo_expire_sync": "300", "iosched/back_seek_penalty": "7"},
    "above": {"scheduler": "bfq", "read_ahead_kb": "65536", "nr_requests": "128", "iosched/slice_idle": "20",
              "iosched/fifo_expire_sync": "900", "iosched/back_seek_penalty": "20"},
    "switch": {"scheduler": "kyber", "read_ahead_kb": "128", "nr_requests": "100"},
}


@pytest.mark.parametrize("start", sorted(RANGE_STARTS))
def test_ranges_udev_event_and_apply_reach_the_same_state(udevd: Udevd, rules: Rules, tmp_path: Path, start: str) -> None:
    scope = tmp_path / "scope"
    text, profile = scoped_rules(RANGES, tmp_path, scope)
    rules.write(text)
    with loops(scope, 2, [0, 1], rules) as names:
        for name in names:
            _set_state(name, RANGE_STARTS[start])
        code, out = cli("apply", "-p", str(profile), *names, "--json", state=tmp_path / "state")
        assert code == 0, out
        by_apply = {n: snapshot(n) for n in names}
        for name in names:
            _set_state(name, RANGE_STARTS[start])
        change(*names)
        assert {n: snapshot(n) for n in names} == by_apply
        code, out = cli("verify", "-p", str(profile), *names, "--json", state=tmp_path / "state")
        assert code == 0 and json.loads(out)["in_sync"] is True, out
        if start == "inside":  # nothing written: the values are as they were set
            assert all(by_apply[n][k] == v for n in names for k, v in RANGE_STARTS[start].items())


def _tunectl_wrapper(tmp: Path) -> Path:
    """A tunectl executable for udev's RUN: this checkout, this interpreter, a state dir of the test."""
    exe = tmp / "bin" / "tunectl"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\nexport TUNECTL_STATE_DIR={tmp}/runstate PYTHONPATH={ROOT}\n"
                   f"exec {os.path.realpath(sys.executable)} -m tunectl \"$@\"\n")
    exe.chmod(0o755)
    return exe


def test_below_run_starts_tunectl_for_the_stack(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    """There is no device-mapper or md in this kernel and a loop device has no slaves/, so the
    rule's TEST=="slaves/*/dev" guard is taken out to make the loop device's own event run it."""
    scope = tmp_path / "scope"
    exe = _tunectl_wrapper(tmp_path)
    text, profile = scoped_rules("name: below\nclasses:\n  loop:\n    read_ahead_kb: 512\n"
                                 "    below: {read_ahead_kb: 1024}\n", tmp_path, scope, str(exe))
    run_lines = [line for line in text.splitlines() if "RUN+=" in line]
    assert run_lines[0] == f'ENV{{TUNECTL_BELOW}}=="1", TEST=="slaves/*/dev", RUN+="{exe} apply -p {profile} --stack $kernel -q"'
    rules.write(text)
    with loops(scope, 1, [None], rules) as (name,):
        t0 = time.monotonic()
        change(name)
        plain = time.monotonic() - t0
        assert sysfs_read(name, "queue/read_ahead_kb") == "512"
        assert not (tmp_path / "runstate").exists(), "no RUN without slaves/"
        rules.write(text.replace('TEST=="slaves/*/dev", ', ""))
        sysfs_write(name, "queue/read_ahead_kb", "64")
        t0 = time.monotonic()
        change(name)
        with_run = time.monotonic() - t0
        assert (tmp_path / "runstate").is_dir(), "the RUN started tunectl"
        # what udev runs leaves the record of the last apply alone (the values it finds may be the rules' own)
        assert not (tmp_path / "runstate" / "active.json").exists()
        assert sysfs_read(name, "queue/read_ahead_kb") == "512"
        print(f"\nchange event incl. settle: {plain * 1000:.0f} ms plain, {with_run * 1000:.0f} ms with the below: RUN")


def test_udev_install_check_remove_on_this_machine(udevd: Udevd, tmp_path: Path) -> None:
    """The CLI against the real udevadm (reload, no trigger), into a directory udev does not read."""
    (tmp_path / "p.yaml").write_text(PROFILE)
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    state = tmp_path / "state"
    code, out = cli("udev", "install", "-p", str(tmp_path / "p.yaml"), "--rules-dir", str(rules_dir), "--json", state=state)
    doc = json.loads(out)
    assert code == 0 and doc["changed"] and doc["reloaded"], out
    assert (rules_dir / "65-tunectl.rules").stat().st_mode & 0o777 == 0o644
    assert cli("udev", "check", "-p", str(tmp_path / "p.yaml"), "--rules-dir", str(rules_dir), state=state)[0] == 0
    code, out = cli("udev", "remove", "--rules-dir", str(rules_dir), "--json", state=state)
    assert code == 0 and json.loads(out)["removed"] is True
    assert cli("udev", "check", "-p", str(tmp_path / "p.yaml"), "--rules-dir", str(rules_dir), state=state)[0] == 1
