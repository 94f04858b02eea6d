"""Group `classify`: every device class's identity against udev, and apply/verify/rollback with module schedulers."""

from __future__ import annotations

import os
from pathlib import Path

from common import Recorder, by_serial, queue_state, read, record, settle, sh, tunectl, tunectl_env, udev_props

SERIALS = {"nvme": "tcnvme01", "hdd": "tchdd01", "ssd": "tcssd01", "sata": "tcsata01", "virt": "tcvirt01",
           "sd": "sdcard"}


def modules_loaded() -> list[str]:
    text = read("/proc/modules") or ""
    names = {line.split()[0] for line in text.splitlines()}
    return sorted(names & {"bfq", "kyber_iosched"})


# read_ahead_kb set by hand before a queue-limit write: below every derived value, and above every one.
HAND_READ_AHEAD = (64, 16384)
LIMIT_WRITES = ("rotational", "max_sectors_kb")


def write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def read_ahead_generations(disks: dict[str, str]) -> dict[str, dict]:
    """What this kernel does to read_ahead_kb, on every disk and a fresh loop device (64 MiB file): the value it
    started with and the limits it derives it from; then, for each hand-set value and each queue-limit attribute,
    read_ahead_kb after writing that attribute its own value. Each device's read_ahead_kb is put back at the end."""
    sh("modprobe loop", check=True)  # virtme's initramfs loads no module it does not need
    Path("/tmp/ra.img").write_bytes(b"")
    os.truncate("/tmp/ra.img", 64 << 20)
    loop = os.path.basename(sh("losetup --find --show /tmp/ra.img", check=True).stdout.strip())
    settle()
    out = {}
    try:
        for role, dev in {**disks, "loop": loop}.items():
            q = f"/sys/block/{dev}/queue"
            default = read(f"{q}/read_ahead_kb") or ""
            seen = {"name": dev, "default": int(default), **{a: int(read(f"{q}/{a}") or -1) for a in
                    ("rotational", "optimal_io_size", "max_sectors_kb", "max_hw_sectors_kb")}, "after": {}}
            for hand in HAND_READ_AHEAD:
                for attr in LIMIT_WRITES:
                    write(f"{q}/read_ahead_kb", str(hand))
                    write(f"{q}/{attr}", read(f"{q}/{attr}") or "")
                    seen["after"][f"{hand}:{attr}"] = int(read(f"{q}/read_ahead_kb") or -1)
            write(f"{q}/read_ahead_kb", default)
            out[role] = seen
    finally:
        sh(f"losetup -d /dev/{loop}")
    return out


def profile_text(sd_model: str) -> str:
    return f"""name: vm-modules
description: schedulers built as modules, with knobs, and identity matches
classes:
  rotational:
    scheduler: bfq
    iosched: {{slice_idle: 0, low_latency: 0}}
    read_ahead_kb: 1024
  ssd:
    scheduler: kyber
    iosched: {{read_lat_nsec: 1000000}}
    read_ahead_kb: 256
  nvme:
    scheduler: kyber
    iosched: {{write_lat_nsec: 5000000}}
  mmc:
    scheduler: bfq
    iosched: {{back_seek_max: 8192}}
  virtio:
    scheduler: mq-deadline
    iosched: {{read_expire: 100}}
    queue: {{nr_requests: 64}}
devices:
  - match: {{serial: tcssd01}}
    read_ahead_kb: 384
  - match: {{model: "{sd_model}"}}
    read_ahead_kb: 640
"""


def run(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ.get("TUNECTL_VM_SHARED", "/tmp"))
    settle()
    names = rec.step("names", by_serial)
    disks = {role: names[serial] for role, serial in SERIALS.items() if serial in names}
    rec["disks"] = disks
    rec.step("udev", lambda: {role: udev_props(dev) for role, dev in disks.items()})
    rec.step("sysfs_identity", lambda: {role: {
        "device/serial": read(f"/sys/block/{dev}/device/serial"),
        "device/wwid": read(f"/sys/block/{dev}/device/wwid") or read(f"/sys/block/{dev}/wwid"),
        "device/model": read(f"/sys/block/{dev}/device/model"),
        "device/name": read(f"/sys/block/{dev}/device/name"),
        "serial": read(f"/sys/block/{dev}/serial"),
        "rotational": read(f"/sys/block/{dev}/queue/rotational")} for role, dev in disks.items()})
    rec["modules_at_boot"] = modules_loaded()
    rec.step("read_ahead_generations", lambda: read_ahead_generations(disks))  # before tunectl touches a device
    rec.step("recorded", lambda: record(disks, shared))
    before = rec.step("before", lambda: {role: queue_state(dev) for role, dev in disks.items()})
    state = "/tmp/tunectl-state"
    env = tunectl_env(state)
    code, doc, err = tunectl("status --all", env)
    rec["status"] = {"code": code, "stderr": err,
                     "devices": {d["name"]: d for d in (doc or {}).get("devices", [])} if isinstance(doc, dict) else doc}
    sd_model = read(f"/sys/block/{disks.get('sd', 'mmcblk0')}/device/name") or "none"
    profile = shared / "vm-modules.yaml"
    profile.write_text(profile_text(sd_model))
    devs = " ".join(disks.values())
    code, doc, err = tunectl(f"apply -p {profile} {devs}", env)
    rec["apply"] = {"code": code, "stderr": err}
    rec["modules_after_apply"] = modules_loaded()
    rec.step("after_apply", lambda: {role: queue_state(dev) for role, dev in disks.items()})
    code, doc, err = tunectl(f"verify -p {profile}", env)
    rec["verify"] = {"code": code, "stderr": err, "doc": doc}
    code, doc, err = tunectl("rollback", env)
    rec["rollback"] = {"code": code, "stderr": err}
    rec.step("after_rollback", lambda: {role: queue_state(dev) for role, dev in disks.items()})
    rec["before_is_recorded"] = before is not None
    rec["lsblk"] = sh("lsblk -J -o NAME,SERIAL,WWN,MODEL,TRAN,ROTA").stdout
