"""Groups `reboot1` and `reboot2`: a machine's life across a reboot, on the same disk images.

Boot 1 puts an ext4 file system on the state disk (serial tcstate01), applies a
scoped profile with the state directory there, and installs the rules into the
directory that boot 2 mounts as /etc/udev/rules.d, so boot 2's udevd has them
from its first coldplug. Boot 2 reads what the rules did at boot, verifies
(the scope of boot 1's apply), and rolls back to boot 1's originals.
"""

from __future__ import annotations

import os
from pathlib import Path

from common import Recorder, by_serial, queue_state, read, settle, sh, tunectl, tunectl_env

__all__ = ["first", "second"]

PROFILE = """name: vm-reboot
description: a scoped profile with module schedulers, knobs and read-ahead
classes:
  rotational:
    scheduler: bfq
    iosched: {slice_idle: 0}
    read_ahead_kb: 1024
  nvme:
    scheduler: kyber
    read_ahead_kb: 512
  mmc:
    scheduler: bfq
    read_ahead_kb: 256
devices:
  - match: {serial: tcssd01}
    scheduler: kyber
    read_ahead_kb: 768
"""
SERIALS = {"nvme": "tcnvme01", "hdd": "tchdd01", "ssd": "tcssd01", "sata": "tcsata01", "virt": "tcvirt01",
           "sd": "sdcard"}
SCOPED = ("nvme", "hdd", "ssd", "sd")
PERSIST = "/tmp/persist"


def disks() -> dict[str, str]:
    names = by_serial()
    return {role: names[serial] for role, serial in SERIALS.items() if serial in names}


def states(found: dict[str, str]) -> dict:
    return {role: queue_state(dev) for role, dev in found.items()}


def mount_state(fresh: bool) -> str:
    dev = by_serial()["tcstate01"]
    if fresh:
        sh(f"mkfs.ext4 -q -F /dev/{dev}", check=True)
    os.makedirs(PERSIST, exist_ok=True)
    sh(f"mount /dev/{dev} {PERSIST}", check=True)
    return dev


def first(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ["TUNECTL_VM_SHARED"])
    rules_dir = shared / "rules.d"
    rules_dir.mkdir(exist_ok=True)
    settle()
    found = disks()
    rec["disks"] = found
    rec["before"] = states(found)
    rec["state_disk"] = mount_state(fresh=True)
    profile = shared / "vm-reboot.yaml"
    profile.write_text(PROFILE)
    env = tunectl_env(f"{PERSIST}/state")
    code, doc, err = tunectl(f"apply -p {profile} " + " ".join(found[r] for r in SCOPED), env)
    rec["apply"] = {"code": code, "stderr": err}
    rec["after_apply"] = states(found)
    code, doc, err = tunectl(f"udev install -p {profile} --rules-dir {rules_dir}", env)
    rec["udev_install"] = {"code": code, "stderr": err}
    rec["journal"] = read(f"{PERSIST}/state/journal.json")
    sh("sync")
    sh(f"umount {PERSIST}", check=True)


def second(rec: Recorder, args: list[str]) -> None:
    settle()
    found = disks()
    rec["disks"] = found
    rec["rules_present"] = os.path.exists("/etc/udev/rules.d/65-tunectl.rules")
    rec["at_boot"] = states(found)
    mount_state(fresh=False)
    env = tunectl_env(f"{PERSIST}/state")
    code, doc, err = tunectl("verify", env)
    rec["verify"] = {"code": code, "stderr": err, "scope": (doc or {}).get("scope") if isinstance(doc, dict) else doc}
    code, doc, err = tunectl("rollback", env)
    rec["rollback"] = {"code": code, "stderr": err}
    rec["after_rollback"] = states(found)
    rec["journal_after_rollback"] = read(f"{PERSIST}/state/journal.json")
    sh(f"umount {PERSIST}")
