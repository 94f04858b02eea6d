"""Guest-side helpers: run commands, read sysfs and udev, run tunectl; record what was read back.

Runs inside the qemu guest as root (the host's root, read-only; /tmp and /run writable).
Every check stores what the guest read, never a verdict alone, so the host-side
assertions say what the kernel showed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[3]
TUNECTL = str(REPO / ".venv" / "bin" / "tunectl")


STARTED = time.monotonic()


LOG: list = []  # the open <group>.log in the shared directory, once main() has it


def log(text: str) -> None:
    """A line on the console and in SHARED/<group>.log (readable while the guest runs): where the time went."""
    line = f"[{time.monotonic() - STARTED:7.1f}s] {text}"
    print(line, file=sys.stderr, flush=True)
    for f in LOG:
        f.write(line + "\n")
        f.flush()


def sh(cmd: str, check: bool = False, env: dict | None = None, stdin: str | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess:
    log(cmd)
    try:
        proc = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env=env, input=stdin,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{cmd!r} did not finish in {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise RuntimeError(f"{cmd!r} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def active_scheduler(dev: str) -> str | None:
    text = read(f"/sys/block/{dev}/queue/scheduler")
    if text is None:
        return None
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]")
    return text


def queue_state(dev: str) -> dict[str, Any]:
    """What the kernel shows for a device's queue: scheduler, its knobs, read-ahead, nr_requests."""
    q = f"/sys/block/{dev}/queue"
    knobs = {}
    if os.path.isdir(f"{q}/iosched"):
        for knob in sorted(os.listdir(f"{q}/iosched")):
            knobs[knob] = read(f"{q}/iosched/{knob}")
    return {"scheduler": active_scheduler(dev), "schedulers": read(f"{q}/scheduler"), "iosched": knobs,
            "read_ahead_kb": read(f"{q}/read_ahead_kb"), "nr_requests": read(f"{q}/nr_requests")}


def udev_props(dev: str) -> dict[str, str]:
    out = sh(f"udevadm info --query=property --name=/dev/{dev}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def by_serial() -> dict[str, str]:
    """Kernel name of each whole disk by udev's ID_SERIAL_SHORT (or ID_SERIAL), for the test machine's serials."""
    names = {}
    for dev in sorted(os.listdir("/sys/block")):
        props = udev_props(dev)
        # scsi_id puts a disk's NAA id (its WWN) in ID_SERIAL_SHORT when it has one; the product serial is ID_SCSI_SERIAL.
        serial = props.get("ID_SCSI_SERIAL") or props.get("ID_SERIAL_SHORT") or props.get("ID_SERIAL")
        if serial:
            names[serial] = dev
        if dev.startswith("mmcblk"):
            names["sdcard"] = dev
    return names


def tunectl(args: str, env: dict | None = None) -> tuple[int, Any, str]:
    """Run tunectl with `args` (--json added); returns (exit code, parsed JSON or raw stdout, stderr)."""
    proc = sh(f"{TUNECTL} --json {args}", env=env)
    try:
        doc: Any = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        doc = proc.stdout
    return proc.returncode, doc, proc.stderr.strip()


def tunectl_env(state: str, **extra: str) -> dict:
    env = dict(os.environ, TUNECTL_STATE_DIR=state, TUNECTL_EXECUTABLE=TUNECTL, PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


# role in a guest group -> the fixture name of its recording in tests/data/recorded/<series>/
RECORDED = {"hdd": "scsi-hdd", "ssd": "scsi-ssd-wwn", "sata": "sata-ssd", "nvme": "nvme", "sd": "mmc",
            "virt": "virtio", "plainc": "dm-crypt-plain", "luksc": "dm-crypt-luks2", "vroot": "dm-verity",
            "vgt-lvt": "dm-lvm", "md": "md-raid1"}


def record(devs: dict[str, str | None], shared: Path) -> dict[str, str]:
    """scripts/record-sysfs for one device of each role, before tunectl touched any: fixture name -> device."""
    chosen = {fixture: devs[role] for role, fixture in RECORDED.items() if devs.get(role)}
    sh(f"{REPO / 'scripts' / 'record-sysfs'} {shared / 'recorded'} {' '.join(chosen.values())}", check=True)
    return chosen


def settle() -> None:
    sh("udevadm settle --timeout=120")


class Recorder:
    """Collects named results; an exception in one step is recorded, and the rest of the group goes on."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.results: dict[str, Any] = {"kernel": os.uname().release, "errors": {}}

    def __setitem__(self, key: str, value: Any) -> None:
        self.results[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        log(f"step {name}")
        try:
            value = fn()
        except Exception:  # recorded for the host-side assertion that reads this step
            self.results["errors"][name] = traceback.format_exc()
            return None
        self.results[name] = value
        return value

    def save(self) -> None:
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, sort_keys=True))
        tmp.replace(self.out)


def main(groups: dict[str, Callable[[Recorder, list[str]], None]]) -> None:
    group, shared = sys.argv[1], Path(sys.argv[2])
    rec = Recorder(shared / f"{group}.json")
    with open(shared / f"{group}.log", "w") as f:
        LOG.append(f)
        # Where a boot's time goes before its group: the guest's uptime now is the kernel's boot, virtme-ng's init
        # (systemd-tmpfiles, udev's coldplug and settle) and Python's start; the host's boot time minus this line's
        # uptime and the last line's stamp is qemu's start and the power-off.
        log(f"group {group} starts: the guest has been up {(read('/proc/uptime') or '?').split()[0]} s")
        try:
            groups[group](rec, sys.argv[3:])
        except Exception:
            rec.results["errors"]["group"] = traceback.format_exc()
        rec.save()
