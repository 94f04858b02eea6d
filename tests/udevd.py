"""A real systemd-udevd and scoped rules files for root tests (real loop devices).

udevd: when `udevadm control --ping` fails, the session fixture starts
/lib/systemd/systemd-udevd itself, in the foreground under this process (not
--daemon), so it owns exactly that pid and its --debug log; at the end it stops
it with `udevadm control --exit` (and removes /run/udev if it created it). A
udevd that was already running is used as it is and left running (checks that
need its log are then skipped).

Safety: every rules file is scoped to loop devices whose backing file lies in the
test's own directory (KERNEL=="loop*", TEST and ATTR{loop/backing_file}), lives in
/run/udev/rules.d under a name of its own, and is removed (with a reload) before
the loop devices are detached. No other device is ever touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import REPO
from tests.loopdev import restore, snapshot, sysfs_write
from tunectl.profile.resolve import load_profile
from tunectl.udev.lint import lint
from tunectl.udev.render import render

ROOT = REPO
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
    iosched: {read_expire: 160, write_expire: 1500, front_merges: 0}  # 160 ms: whole jiffies at any HZ
    read_ahead_kb: 4096
  - match: {class: loop, rotational: false}
    read_ahead_kb: 258              # the kernel keeps 256
    queue: {nr_requests: 64}
"""
# What PROFILE means for a loop device, by its rotational flag.
EXPECTED = {
    "1": {"scheduler": "mq-deadline", "iosched/read_expire": "160", "iosched/write_expire": "1500",
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


def udev_properties(name: str) -> dict[str, str]:
    out = udevadm("info", "--query=property", f"/dev/{name}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def holds(name: str, expected: dict[str, str]) -> dict[str, tuple[str, str]]:
    snap = snapshot(name)
    return {k: (snap.get(k), v) for k, v in expected.items() if snap.get(k) != v}
