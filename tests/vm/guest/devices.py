"""Group `devices`: the rules on hot-remove and rescan, alignment against parted, mounts with discard, preload.

On the standard machine: apply + rules for the HDD and the NVMe, then the SCSI disk
deleted and found again by a host scan and the NVMe removed from PCI and found again by
a bus rescan; rules removed and rollback. Then partitions on the 512e SSD with an
optimal I/O size, judged by `tunectl align` and by `parted align-check`; ext4 on the
SSD and on plain dm-crypt on the NVMe, `mounts fix --remount` with `discard: online`;
preload of files on the SSD's ext4, residency by util-linux fincore. Last, a dm device
created on the SD card after the rules: the scheduler its RUN sets below comes back on
udev remove + rollback (#34).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common import Recorder, by_serial, queue_state, read, settle, sh, tunectl, tunectl_env, udev_props

PROFILE = """name: vm-devices
description: rules across hotplug, and mount options with discard
classes:
  rotational: {scheduler: bfq, read_ahead_kb: 1024}
  nvme: {scheduler: kyber, read_ahead_kb: 512}
mounts:
  - match: {mountpoint: '/tmp/mnt/*'}
    options: [noatime]
    discard: online
"""
LATE_PROFILE = """name: vm-late-stack
description: below a dm device opened only after the rules were installed
classes:
  mmc: {read_ahead_kb: 256}
devices:
  - match: {class: dm}
    below: {scheduler: bfq}
"""
KEY = "0123456789abcdef0123456789abcdef"
# start and end sectors on the 512e SSD (4 KiB physical, 64 KiB optimal I/O): at 1 MiB (aligned), on a 4 KiB
# boundary that is no 64 KiB one, and on an odd sector
PARTS = [(2048, 133119), (133128, 264191), (264193, 395263)]


def state_of(dev: str) -> dict:
    s = queue_state(dev)
    return {"dev": dev, "scheduler": s["scheduler"], "read_ahead_kb": s["read_ahead_kb"]}


def scsi_host(dev: str) -> str:
    """hostN of a SCSI disk, from its device path (.../hostN/targetN:0:0/N:0:0:0)."""
    path = os.path.realpath(f"/sys/block/{dev}/device")
    return next(part for part in path.split("/") if part.startswith("host"))


def nvme_pci(dev: str) -> str:
    """The PCI address of an NVMe namespace's controller."""
    return os.path.basename(os.path.realpath(f"/sys/block/{dev}/device/device"))


def hotplug(rec: Recorder, disks: dict[str, str], profile: Path, env: dict) -> None:
    before = {role: state_of(disks[role]) for role in ("hdd", "nvme")}
    rec["hotplug_kernel"] = before
    code, _, err = tunectl(f"apply -p {profile} {disks['hdd']} {disks['nvme']}", env)
    rec["hotplug_apply"] = {"code": code, "stderr": err}
    rec["hotplug_applied"] = {role: state_of(disks[role]) for role in ("hdd", "nvme")}
    os.makedirs("/run/udev/rules.d", exist_ok=True)
    code, _, err = tunectl(f"udev install -p {profile} --rules-dir /run/udev/rules.d", env)
    rec["hotplug_install"] = {"code": code, "stderr": err}

    def scsi() -> dict:
        host = scsi_host(disks["hdd"])
        sh(f"echo 1 > /sys/block/{disks['hdd']}/device/delete", check=True)
        settle()
        gone = "tchdd01" not in by_serial()
        sh(f"echo '- - -' > /sys/class/scsi_host/{host}/scan", check=True)
        settle()
        dev = by_serial()["tchdd01"]
        return {"host": host, "gone": gone, "after": state_of(dev)}

    def nvme() -> dict:
        pci = nvme_pci(disks["nvme"])
        sh(f"echo 1 > /sys/bus/pci/devices/{pci}/remove", check=True)
        settle()
        gone = "tcnvme01" not in by_serial()
        sh("echo 1 > /sys/bus/pci/rescan", check=True)
        settle()
        dev = by_serial()["tcnvme01"]
        return {"pci": pci, "gone": gone, "after": state_of(dev)}

    rec.step("scsi_rescan", scsi)
    rec.step("nvme_rescan", nvme)
    names = by_serial()
    disks.update(hdd=names.get("tchdd01", disks["hdd"]), nvme=names.get("tcnvme01", disks["nvme"]))
    rec["hotplug_verify"] = tunectl(f"verify -p {profile}", env)[0]
    code, _, err = tunectl("udev remove --rules-dir /run/udev/rules.d", env)
    rec["hotplug_remove"] = {"code": code, "stderr": err}
    code, _, err = tunectl("rollback", env)
    rec["hotplug_rollback"] = {"code": code, "stderr": err}
    rec["hotplug_rolled_back"] = {role: state_of(disks[role]) for role in ("hdd", "nvme")}


def align(rec: Recorder, ssd: str, env: dict) -> dict:
    parts = " ".join(f"mkpart p{n} {start}s {end}s" for n, (start, end) in enumerate(PARTS, 1))
    sh(f"parted -s -a none /dev/{ssd} mklabel gpt {parts}", check=True)
    settle()
    topology = {k: read(f"/sys/block/{ssd}/queue/{k}") for k in
                ("logical_block_size", "physical_block_size", "minimum_io_size", "optimal_io_size")}
    code, doc, err = tunectl(f"align {ssd}", env)
    parted = {}
    for n in range(1, len(PARTS) + 1):
        parted[str(n)] = {kind: sh(f"parted -s /dev/{ssd} align-check {kind} {n}").returncode == 0
                          for kind in ("optimal", "minimal")}
    return {"topology": topology, "code": code, "stderr": err, "doc": doc, "parted": parted}


def mountinfo(target: str) -> list[str] | None:
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        f = line.split(" ")
        if f[4] == target:
            sep = f.index("-", 6)
            return f[5].split(",") + f[sep + 3].split(",")
    return None


def mounts(rec: Recorder, disks: dict[str, str], profile: Path, env: dict) -> dict:
    ssd, nvme = disks["ssd"], disks["nvme"]
    sh(f"cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 256 --key-file=- /dev/{nvme} plainn",
       check=True, stdin=KEY)
    settle()
    fs = {"ssd": (f"/dev/{ssd}1", "/tmp/mnt/ssd"), "crypt": ("/dev/mapper/plainn", "/tmp/mnt/crypt")}
    # in a directory only root may write: fix refuses to keep its original and backups in /tmp (others may write)
    fstab = Path("/tmp/tunectl-fstab/fstab")
    fstab.parent.mkdir(mode=0o700, exist_ok=True)
    fstab.write_text("".join(f"{src} {target} ext4 relatime 0 2\n" for src, target in fs.values()))
    for src, target in fs.values():
        sh(f"mkfs.ext4 -q -F {src}", check=True)
        os.makedirs(target, exist_ok=True)
        sh(f"mount -t ext4 -o relatime {src} {target}", check=True)
    dm = os.path.basename(os.path.realpath("/dev/mapper/plainn"))
    out: dict = {"discard_max_bytes": {name: read(f"/sys/block/{dev}/queue/discard_max_bytes")
                                       for name, dev in (("ssd", ssd), ("nvme", nvme), ("crypt", dm))}}
    code, doc, err = tunectl(f"mounts fix -p {profile} --fstab {fstab} --remount", env)
    out["fix"] = {"code": code, "stderr": err, "doc": doc}
    out["live"] = {name: mountinfo(target) for name, (_, target) in fs.items()}
    out["fstab"] = fstab.read_text()
    code, doc, err = tunectl(f"mounts check -p {profile} --fstab {fstab}", env)
    out["check"] = {"code": code, "stderr": err, "doc": doc}
    return out


def preload(env: dict) -> dict:
    root = Path("/tmp/mnt/ssd/app")
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for n, size in enumerate((3 << 20, 1 << 20, 200 << 10, 12 << 10)):
        p = root / f"f{n}"
        p.write_bytes(os.urandom(size))
        files.append(str(p))
    sh("sync", check=True)
    lst = "/tmp/app.list"
    code, _, err = tunectl(f"preload collect {root} -o {lst}", env)
    out: dict = {"collect": {"code": code, "stderr": err}, "sizes": {f: os.path.getsize(f) for f in files}}

    def fincore() -> dict[str, int]:
        text = sh(f"fincore --json --bytes -o RES,FILE {' '.join(files)}", check=True).stdout
        return {row["file"]: int(row["res"]) for row in json.loads(text)["fincore"]}

    sh("echo 3 > /proc/sys/vm/drop_caches", check=True)
    out["resident_before"] = fincore()
    code, doc, err = tunectl(f"preload replay --settle-timeout 10 {lst}", env)  # waited for: fincore at once
    out["replay"] = {"code": code, "stderr": err, "doc": doc}
    out["resident_after"] = fincore()
    return out


def late_stack(sd: str, shared: Path) -> dict:
    """#34: apply and the rules first, then a dm-linear device on the SD card, whose RUN (`apply --stack`, for
    `below:`) switches the card to bfq. `udev remove` then `rollback` must bring back the kernel's scheduler too,
    not only the read-ahead the rules themselves write. Its own state directory: nothing of the steps before."""
    profile = shared / "vm-late-stack.yaml"
    profile.write_text(LATE_PROFILE)
    state = "/tmp/tunectl-late"
    env = tunectl_env(state)
    out: dict = {"kernel": state_of(sd)}
    code, _, err = tunectl(f"apply -p {profile}", env)
    out["apply"] = {"code": code, "stderr": err, "after": state_of(sd)}
    code, _, err = tunectl(f"udev install -p {profile} --rules-dir /run/udev/rules.d", env)
    out["install"] = {"code": code, "stderr": err}
    settle()
    sectors = sh(f"blockdev --getsz /dev/{sd}", check=True).stdout.strip()
    sh(f"dmsetup create late --table '0 {sectors} linear /dev/{sd} 0'", check=True)
    settle()
    out["stacked"] = state_of(sd)
    out["udev"] = {k: v for k, v in udev_props(sd).items() if k.startswith("TUNECTL_ORIG_")}
    out["record"] = read(f"{state}/active.json")  # install keeps what below: sets there (no event reached the card)
    code, _, err = tunectl("udev remove --rules-dir /run/udev/rules.d", env)
    out["remove"] = {"code": code, "stderr": err}
    code, doc, err = tunectl("rollback", env)
    out["rollback"] = {"code": code, "stderr": err, "doc": doc}
    out["rolled_back"] = state_of(sd)
    out["journal"] = read(f"{state}/journal.json")
    sh("dmsetup remove late")
    return out


def run(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ["TUNECTL_VM_SHARED"])
    settle()
    names = by_serial()
    disks = {"hdd": names["tchdd01"], "nvme": names["tcnvme01"], "ssd": names["tcssd01"]}
    rec["disks"] = dict(disks)
    profile = shared / "vm-devices.yaml"
    profile.write_text(PROFILE)
    env = tunectl_env("/tmp/tunectl-state")
    rec.step("hotplug", lambda: hotplug(rec, disks, profile, env))
    rec.step("align", lambda: align(rec, disks["ssd"], env))
    rec.step("mounts", lambda: mounts(rec, disks, profile, env))
    rec.step("preload", lambda: preload(env))
    for target in ("/tmp/mnt/ssd", "/tmp/mnt/crypt"):
        sh(f"umount {target}")
    sh("cryptsetup close plainn")
    settle()
    rec.step("late_stack", lambda: late_stack(by_serial()["sdcard"], shared))
