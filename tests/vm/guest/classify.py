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
