"""Group `stacks`: below: through dm-verity, LUKS2, plain dm-crypt and LVM on md; the udev rules against them.

Builds: sda1 -> plain dm-crypt; nvme0n1 -> LUKS2; mmcblk0p1 (squashfs, 4 KiB gzip blocks)
+ mmcblk0p2 (hashes) -> dm-verity, mounted; sdc + vda -> md0 (raid1) -> LVM. Then
apply/verify, the rules, change events on disks below (parted, tunectl align, a
trigger on an md member), a stacked device's own event, a stack created after the
rules, and udev remove + rollback.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from common import Recorder, by_serial, queue_state, read, record, settle, sh, tunectl, tunectl_env, udev_props

PROFILE = """name: vm-below
description: module schedulers per class; mq-deadline below every dm stack
classes:
  rotational: {scheduler: bfq}
  ssd: {scheduler: kyber}
  nvme: {scheduler: kyber}
  mmc: {scheduler: bfq}
  virtio: {scheduler: kyber}
  dm:
    read_ahead_kb: 2048
    queue: {nr_requests: 256}
  md:
    read_ahead_kb: 1024
    queue: {nr_requests: 256}
devices:
  - match: {class: dm, dm_type: [verity, crypt, lvm]}
    below: {scheduler: mq-deadline}
"""
KEY = "0123456789abcdef0123456789abcdef"


def dm_names() -> dict[str, str]:
    """dm-N by device-mapper name."""
    out = {}
    for dev in os.listdir("/sys/block"):
        name = read(f"/sys/block/{dev}/dm/name")
        if name:
            out[name] = dev
    return out


def md_name() -> str | None:
    return next((d for d in sorted(os.listdir("/sys/block")) if d.startswith("md")), None)


def build(disks: dict[str, str], shared: Path) -> dict:
    """The four stacks; returns the verity root hash and what each command said."""
    out: dict = {}
    sda, nvme, sd, sdc, vda = disks["hdd"], disks["nvme"], disks["sd"], disks["sata"], disks["virt"]
    sh(f"parted -s /dev/{sda} mklabel gpt mkpart plain 1MiB 100%", check=True)
    sh(f"parted -s /dev/{sd} mklabel gpt mkpart data 1MiB 200MiB mkpart hash 200MiB 100%", check=True)
    settle()
    sh(f"cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 256 --key-file=- /dev/{sda}1 plainc",
       check=True, stdin=KEY)
    sh(f"cryptsetup luksFormat -q --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file=- /dev/{nvme}",
       check=True, stdin=KEY)
    sh(f"cryptsetup open --key-file=- /dev/{nvme} luksc", check=True, stdin=KEY)
    # the browser case: squashfs with 4 KiB gzip blocks on dm-verity on the SD card
    img = shared / "browser.sqfs"  # built by the host (tests/vm/machine.py)
    sh(f"dd if={img} of=/dev/{sd}p1 bs=1M conv=fsync status=none", check=True)
    fmt = sh(f"veritysetup format /dev/{sd}p1 /dev/{sd}p2 --data-blocks={(img.stat().st_size + 4095) // 4096}",
             check=True).stdout
    root_hash = next(line.split(":", 1)[1].strip() for line in fmt.splitlines() if line.startswith("Root hash"))
    out["root_hash"] = root_hash
    out["squashfs_bytes"] = img.stat().st_size
    sh(f"veritysetup open /dev/{sd}p1 vroot /dev/{sd}p2 {root_hash}", check=True)
    os.makedirs("/tmp/sq", exist_ok=True)
    sh("mount -t squashfs -o ro /dev/mapper/vroot /tmp/sq", check=True)
    sh(f"mdadm --create /dev/md0 --run --quiet --level=1 --raid-devices=2 --metadata=1.2 --assume-clean /dev/{sdc} /dev/{vda}",
       check=True)
    lvm = "--config 'devices {use_devicesfile=0}'"
    sh(f"pvcreate -q {lvm} /dev/md0 && vgcreate -q {lvm} vgt /dev/md0 && lvcreate -q {lvm} -L 64M -n lvt vgt", check=True)
    settle()
    return out


def stack_state(disks: dict[str, str]) -> dict:
    names = dm_names()
    devs = dict(disks)
    for dm in ("plainc", "luksc", "vroot", "vgt-lvt"):
        if dm in names:
            devs[dm] = names[dm]
    md = md_name()
    if md:
        devs["md"] = md
    return {role: dict(queue_state(dev), dev=dev, mq=os.path.isdir(f"/sys/block/{dev}/mq")) for role, dev in devs.items()}


def journal(state: str) -> dict | None:
    text = read(f"{state}/journal.json")
    return json.loads(text) if text else None


def originals(state: str) -> dict:
    """identity -> attribute -> original value, from the journal."""
    doc = journal(state) or {}
    return {identity: {attr: v.get("original") if isinstance(v, dict) else v
                       for attr, v in (entry.get("attributes") or entry.get("originals") or {}).items()}
            for identity, entry in doc.get("devices", {}).items()}


def schedulers(disks: dict[str, str]) -> dict[str, str | None]:
    return {role: queue_state(dev)["scheduler"] for role, dev in disks.items()}


def align_on_stacks(disks: dict[str, str], env: dict) -> dict:
    """`tunectl align` named on every stack and the disk under plain dm-crypt, then on every disk, with the kernel's
    block events watched; then root's own parted on the same devices (after the watch: it opens them for writing)."""
    named = [f"/dev/mapper/{n}" for n in ("plainc", "luksc", "vroot", "vgt-lvt")] + ["/dev/md0", f"/dev/{disks['hdd']}"]
    sentinel = disks["ssd"]  # under no stack: its change events mark where the watch starts and where it ends
    watch = Path("/tmp/align-events")

    def lines() -> list[str]:
        return [line for line in watch.read_text().splitlines() if line.startswith("KERNEL[")]

    def mark() -> None:
        """A change event on the sentinel, seen by the monitor: every event before it was seen too (one netlink
        socket, in order). Triggered again until seen: the monitor may not listen yet."""
        seen = sum(line.endswith(f"/{sentinel} (block)") for line in lines())
        deadline = time.monotonic() + 120
        while sum(line.endswith(f"/{sentinel} (block)") for line in lines()) == seen:
            if time.monotonic() > deadline:
                raise RuntimeError(f"udevadm monitor never showed a change event on {sentinel}: {watch.read_text()}")
            sh(f"udevadm trigger --action=change /dev/{sentinel}", check=True)
            time.sleep(1)  # the event's way to the monitor; the loop ends on seeing it, not on the sleep

    with open(watch, "w") as log:
        monitor = subprocess.Popen(["udevadm", "monitor", "--kernel", "--subsystem-match=block"], stdout=log,
                                   stderr=subprocess.STDOUT)
    out: dict = {"named_devices": named}
    try:
        mark()
        start = len(lines())
        code, doc, err = tunectl(f"align {' '.join(named)}", env)
        out["named"] = {"code": code, "doc": doc, "stderr": err}
        code, doc, err = tunectl("align", env)
        out["all"] = {"code": code, "doc": doc, "stderr": err}
        mark()
        out["events"] = [line for line in lines()[start:] if not line.endswith(f"/{sentinel} (block)")]
    finally:
        monitor.terminate()
        monitor.wait()
    out["root_parted"] = {dev: sh(f"parted -m -s {dev} unit s print").stdout.splitlines()[1:2] for dev in named}
    return out


def run(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ["TUNECTL_VM_SHARED"])
    settle()
    names = by_serial()
    disks = {"hdd": names["tchdd01"], "nvme": names["tcnvme01"], "sd": names["sdcard"], "sata": names["tcsata01"],
             "virt": names["tcvirt01"], "ssd": names["tcssd01"]}
    rec["disks"] = disks
    rec["kernel_before"] = rec.step("kernel_before", lambda: stack_state(disks))
    rec.step("build", lambda: build(disks, shared))
    rec.step("built", lambda: stack_state(disks))
    rec["dm"] = dm_names()
    rec["md"] = md_name()
    rec.step("recorded", lambda: record({**disks, **rec["dm"], "md": rec["md"]}, shared))
    stacked = [rec["dm"][n] for n in ("plainc", "luksc", "vroot", "vgt-lvt") if n in rec["dm"]] + [rec["md"] or "md0"]
    rec.step("nr_requests_write", lambda: {dev: sh(f"echo 128 > /sys/block/{dev}/queue/nr_requests").stderr.strip()
                                           for dev in stacked})
    profile = shared / "vm-below.yaml"
    profile.write_text(PROFILE)
    state = "/tmp/tunectl-state"
    env = tunectl_env(state)
    rec.step("align", lambda: align_on_stacks(disks, env))
    code, doc, err = tunectl("status --all", env)
    rec["status"] = {"code": code, "stderr": err,
                     "devices": {d["name"]: d for d in doc.get("devices", [])} if isinstance(doc, dict) else doc}
    code, doc, err = tunectl(f"plan -p {profile}", env)
    rec["plan"] = {"code": code, "stderr": err, "doc": doc}
    code, doc, err = tunectl(f"apply -p {profile}", env)
    rec["apply"] = {"code": code, "stderr": err, "doc": doc}
    rec.step("after_apply", lambda: stack_state(disks))
    rec["verify_after_apply"] = tunectl(f"verify -p {profile}", env)[0]
    rec["originals_after_apply"] = originals(state)
    rec["active_after_apply"] = read(f"{state}/active.json")

    # The rules, then change events on the disks below the stacks.
    # The browser stack before any tuning: where do requests merge, which schedulers does bench sweep.
    code, doc, err = tunectl("bench /tmp/sq/python3.11 --read-ahead 16,128,1024 --runs 1 --size 2M --seed 1", env)
    rec["bench"] = {"code": code, "stderr": err, "doc": doc}

    os.makedirs("/run/udev/rules.d", exist_ok=True)
    code, doc, err = tunectl(f"udev install -p {profile} --rules-dir /run/udev/rules.d", env)
    rec["udev_install"] = {"code": code, "stderr": err}
    rec["rules"] = read("/run/udev/rules.d/65-tunectl.rules")
    # udev install journals the originals of what its rules will change, before the file exists (#21)
    rec["originals_after_install"] = originals(state)
    rec["active_after_install"] = read(f"{state}/active.json")  # and records the rules it installed
    events = {}
    # Each event's disk is first moved off its value by hand (no event): only the rules can bring it back.
    for label, moved, cmd in (
            ("parted_print_sda", "hdd", f"parted -s /dev/{disks['hdd']} print"),
            # align reads the table with parted unable to open anything for writing: no change event of its own
            # (the moved NVMe stays moved, `after_command`); the change event after it is udev's own
            ("align_nvme", "nvme", f"{env['TUNECTL_EXECUTABLE']} align {disks['nvme']}"),
            ("change_md_member", "sata", f"udevadm trigger --action=change /dev/{disks['sata']}"),
            ("change_sd", "sd", f"udevadm trigger --action=change /dev/{disks['sd']}"),
            ("change_lv", "virt", f"udevadm trigger --action=change /dev/{rec['dm'].get('vgt-lvt', 'dm-3')}")):
        sh(f"echo none > /sys/block/{disks[moved]}/queue/scheduler", check=True)
        events[label] = {"moved": moved, "moved_to": queue_state(disks[moved])["scheduler"]}
        sh(cmd, env=env)
        settle()
        events[label]["after_command"] = queue_state(disks[moved])["scheduler"]
        if label == "align_nvme":
            sh(f"udevadm trigger --action=change /dev/{disks[moved]}", check=True)
            settle()
        events[label].update(schedulers=schedulers(disks), verify=tunectl(f"verify -p {profile}", env)[0],
                             originals=originals(state), active=read(f"{state}/active.json"))
    rec["events"] = events

    # A stack created after the rules: the verity device closed and opened again, its disk moved off mq-deadline first.
    def reopen() -> dict:
        sh("umount /tmp/sq", check=True)
        sh("veritysetup close vroot", check=True)
        sh(f"echo none > /sys/block/{disks['sd']}/queue/scheduler", check=True)
        settle()
        moved = queue_state(disks["sd"])["scheduler"]
        sh(f"veritysetup open /dev/{disks['sd']}p1 vroot /dev/{disks['sd']}p2 {rec['build']['root_hash']}", check=True)
        settle()
        dev = dm_names()["vroot"]
        return {"moved": moved, "dev": dev, "sd": queue_state(disks["sd"]), "dm": queue_state(dev), "udev": udev_props(dev),
                "verify": tunectl(f"verify -p {profile}", env)[0]}
    rec.step("new_stack", reopen)

    code, doc, err = tunectl("udev remove --rules-dir /run/udev/rules.d", env)
    rec["udev_remove"] = {"code": code, "stderr": err}
    code, doc, err = tunectl("rollback", env)
    rec["rollback"] = {"code": code, "stderr": err, "doc": doc}
    rec.step("after_rollback", lambda: stack_state(disks))
