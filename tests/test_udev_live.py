"""Generated udev rules on a real systemd-udevd and real loop devices (root only).

udevd: when `udevadm control --ping` fails, the session fixture starts
/lib/systemd/systemd-udevd itself, in the foreground under this process (not
--daemon), so it owns exactly that pid and its --debug log; at the end it stops
it with `udevadm control --exit` (and removes /run/udev if it created it). A
udevd that was already running is used as it is and left running (checks that
need its log are then skipped).

Safety: every rules file here is scoped to loop devices whose backing file lies
in this test's own directory (KERNEL=="loop*", TEST and ATTR{loop/backing_file}),
lives in /run/udev/rules.d under a name of its own, and is removed (with a
reload) before the loop devices are detached. No other device is ever touched.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.loopdev import active_scheduler, needs_root, restore, snapshot, sysfs_read, sysfs_write
from tunectl.cli import main
from tunectl.profile.resolve import load_profile
from tunectl.udev.lint import lint
from tunectl.udev.render import render

pytestmark = [pytest.mark.root, needs_root]

ROOT = Path(__file__).resolve().parent.parent
UDEVD = "/lib/systemd/systemd-udevd"
RUN_UDEV = Path("/run/udev")
RULES_DIR = RUN_UDEV / "rules.d"
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}

PROFILE = """\
name: udev-live
description: loop devices through generated udev rules
classes:
  loop:
    scheduler: [bfq, mq-deadline]
    iosched: {slice_idle: 0, low_latency: 0}
    queue: {add_random: 0}          # a queue limit: written only when it differs
devices:
  - match: {class: loop, rotational: true}
    scheduler: mq-deadline
    iosched: {read_expire: 150, write_expire: 1500, front_merges: 0}
    read_ahead_kb: 4096
  - match: {class: loop, rotational: false}
    read_ahead_kb: 258              # the kernel keeps 256
    queue: {nr_requests: 64}
"""
# What PROFILE means for a loop device, by its rotational flag.
EXPECTED = {
    "1": {"scheduler": "mq-deadline", "iosched/read_expire": "152", "iosched/write_expire": "1500",
          "iosched/front_merges": "0", "read_ahead_kb": "4096", "add_random": "0"},
    "0": {"scheduler": "bfq", "iosched/slice_idle": "0", "iosched/low_latency": "0", "read_ahead_kb": "256",
          "nr_requests": "64", "add_random": "0"},
}


def udevadm(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["udevadm", *args], capture_output=True, text=True, timeout=timeout, check=check, env=ENV)


def _ping() -> bool:
    return udevadm("control", "--ping", "--timeout=2", check=False).returncode == 0


@dataclass
class Udevd:
    log: Path | None  # set when this session started udevd

    def log_since(self, offset: int) -> str:
        if self.log is None:
            return ""
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log else 0


@pytest.fixture(scope="session")
def udevd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Udevd]:
    if _ping():
        yield Udevd(None)
        return
    if not os.access(UDEVD, os.X_OK):
        pytest.skip(f"{UDEVD} not installed (apt-get install udev)")
    log = tmp_path_factory.mktemp("udevd") / "udevd.log"
    runtime_existed = RUN_UDEV.exists()
    with open(log, "wb") as out:
        proc = subprocess.Popen([UDEVD, "--debug"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**ENV, "SYSTEMD_LOG_TARGET": "console"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not _ping():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"could not start {UDEVD}: {log.read_text()[-500:]}")
            time.sleep(0.1)
        yield Udevd(log)
    finally:
        udevadm("control", "--exit", check=False)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=5)
        if not runtime_existed and not _ping():
            shutil.rmtree(RUN_UDEV, ignore_errors=True)  # leave /run as we found it: no udev runtime directory


class Rules:
    """One rules file of this test in /run/udev/rules.d, removed (and udev reloaded) at the end."""

    def __init__(self, name: str) -> None:
        RULES_DIR.mkdir(parents=True, exist_ok=True)
        self.path = RULES_DIR / f"65-tunectl-test-{os.getpid()}-{name}.rules"

    def write(self, text: str) -> None:
        self.path.write_text(text)
        udevadm("control", "--reload")

    def remove(self) -> None:
        if self.path.exists():
            self.path.unlink()
            udevadm("control", "--reload")


@pytest.fixture
def rules(udevd: Udevd, request: pytest.FixtureRequest) -> Iterator[Rules]:
    r = Rules(request.node.name.replace("[", "-").replace("]", "").replace("/", "-"))
    try:
        yield r
    finally:
        r.remove()


@contextlib.contextmanager
def loops(directory: Path, count: int, rotational: list[int | None], rules_: Rules | None = None,
          prepare: dict[str, str] | None = None) -> Iterator[list[str]]:
    """Attach `count` loop devices to files in `directory`; give each back its pre-attach settings, then detach.

    A loop device keeps its queue settings across detach, so the settings are
    saved before attaching (when the rules cannot have touched it yet). `prepare`
    (queue attribute -> one value per device) is written just before the attach,
    so that the attach event itself meets it: attaching keeps queue settings.
    """
    directory.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    saved: dict[str, dict[str, str]] = {}
    try:
        for i in range(count):
            backing = directory / f"d{i}.img"
            with open(backing, "wb") as f:
                f.truncate(16 << 20)
            for _ in range(20):
                name = subprocess.run(["losetup", "-f"], capture_output=True, text=True, check=True,
                                      env=ENV).stdout.strip().rsplit("/", 1)[-1]
                before = snapshot(name) if Path(f"/sys/block/{name}/queue").is_dir() else None
                for attr, values in sorted((prepare or {}).items(), key=lambda kv: kv[0] != "scheduler"):
                    sysfs_write(name, f"queue/{attr}", values[i])
                if subprocess.run(["losetup", f"/dev/{name}", str(backing)], capture_output=True, env=ENV).returncode == 0:
                    break  # another process may take the free device between -f and the attach: try the next one
                if prepare and before is not None:
                    restore(name, before)
            else:
                raise RuntimeError("could not attach a loop device")
            names.append(name)
            if before is not None:
                saved[name] = before
        udevadm("settle", "--timeout=30")
        for name, rot in zip(names, rotational):
            if rot is not None:
                sysfs_write(name, "queue/rotational", str(rot))
        yield names
    finally:
        if rules_ is not None:
            # before restoring: no event of ours may re-tune the devices. A udevd that died under the test
            # fails the reload; the file is gone by then, and the devices must still be detached below.
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                rules_.remove()
        udevadm("settle", "--timeout=30", check=False)
        for name in names:
            if name in saved:
                restore(name, saved[name])
            subprocess.run(["losetup", "-d", f"/dev/{name}"], capture_output=True, env=ENV, check=False)


def change(*names: str) -> None:
    udevadm("trigger", "--action=change", "--settle", *[f"/dev/{n}" for n in names])


def scoped_rules(profile_text: str, tmp: Path, scope_dir: Path, tunectl: str | None = None) -> tuple[str, Path]:
    path = tmp / "profile.yaml"
    path.write_text(profile_text)
    profile = load_profile(str(path), [ROOT / "profiles"])
    text = render(profile, tunectl, only_loop_backing=f"{scope_dir}/*.img")
    assert lint(text) == []
    return text, path


def cli(*argv: str, state: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env={**ENV, "TUNECTL_STATE_DIR": str(state)}, stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def udev_properties(name: str) -> dict[str, str]:
    out = udevadm("info", "--query=property", f"/dev/{name}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _holds(name: str, expected: dict[str, str]) -> dict[str, tuple[str, str]]:
    snap = snapshot(name)
    return {k: (snap.get(k), v) for k, v in expected.items() if snap.get(k) != v}


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
            assert _holds(name, EXPECTED[rot]) == {}, name
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
            assert _holds(name, EXPECTED[rot]) == {}
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
