"""Boot a Debian distro kernel under qemu (virtme-ng) with real block devices; run one guest group.

The guest's root is this machine's root, read-only, with systemd-udevd running; the
kernels are Debian's own packages, unpacked by ``scripts/bootstrap --test`` into
``$TUNECTL_VM_CACHE`` (default /opt/tunectl-vm: virtme-ng's guest hides /var/cache).
One boot runs one guest group (tests/vm/guest/<group>.py), which writes a JSON of
what it read back into the shared directory; the pytest modules assert on that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TUNECTL_VM_CACHE", "/opt/tunectl-vm"))
LOGS = Path(os.environ.get("TUNECTL_VM_LOGS", "/tmp/tunectl-vm-logs"))  # each boot's console and results, kept
BOOT_TIMEOUT = 1200  # seconds for one boot and its group under TCG on 2 shared cores (stacks took 814)

# The devices of a standard machine: one of every class tunectl classifies, with identities.
SSD_WWN = "0x5000c500a1b2c3d4"


@dataclass
class Disk:
    """One qemu block device backed by a sparse raw image."""

    name: str
    size_mib: int
    device: str  # the qemu -device, with {drive} for the drive id
    discard: bool = False


@dataclass
class Machine:
    disks: list[Disk] = field(default_factory=list)

    def qemu_opts(self, images: Path) -> list[str]:
        opts = ["-device", "virtio-scsi-pci,id=scsi0", "-device", "ahci,id=ahci0", "-device", "sdhci-pci"]
        for disk in self.disks:
            image = images / f"{disk.name}.img"
            if not image.exists():
                with open(image, "wb") as f:
                    f.truncate(disk.size_mib << 20)
            drive = f"if=none,id={disk.name},file={image},format=raw,cache=unsafe"
            if disk.discard:
                drive += ",discard=unmap"
            opts += ["-drive", drive, "-device", disk.device.format(drive=disk.name)]
        return opts


def standard_machine() -> Machine:
    """NVMe, SCSI HDD, SCSI SSD with a WWN (512e, io_opt), SATA SSD, SD card, virtio-blk."""
    return Machine([
        Disk("nvme", 256, "nvme,serial=tcnvme01,drive={drive}", discard=True),
        Disk("hdd", 256, "scsi-hd,bus=scsi0.0,drive={drive},rotation_rate=7200,serial=tchdd01"),
        Disk("ssd", 256, "scsi-hd,bus=scsi0.0,drive={drive},rotation_rate=1,serial=tcssd01,wwn=" + SSD_WWN
             + ",physical_block_size=4096,logical_block_size=512,min_io_size=4096,opt_io_size=65536", discard=True),
        Disk("sata", 256, "ide-hd,bus=ahci0.0,drive={drive},serial=tcsata01,model=TCSATA-SSD,rotation_rate=1"),
        Disk("sd", 256, "sd-card,drive={drive}"),
        Disk("virt", 256, "virtio-blk-pci,drive={drive},serial=tcvirt01"),
    ])


def persistent_machine() -> Machine:
    """The standard machine and a state disk (virtio-blk, serial tcstate01) that outlives a boot."""
    machine = standard_machine()
    machine.disks.append(Disk("state", 64, "virtio-blk-pci,drive={drive},serial=tcstate01"))
    return machine


MACHINES = {"standard": standard_machine, "persistent": persistent_machine}


@dataclass(frozen=True)
class Kernel:
    release: str
    vmlinuz: Path

    @property
    def series(self) -> str:
        return ".".join(self.release.split(".")[:2])


def kernels() -> list[Kernel]:
    """The kernels bootstrap unpacked, oldest series first (6.1, then 6.12)."""
    found = []
    if CACHE.is_dir():
        for entry in sorted(CACHE.iterdir()):
            vmlinuz = entry / "boot" / f"vmlinuz-{entry.name}"
            if vmlinuz.is_file() and (entry / "lib" / "modules" / entry.name / "modules.dep").is_file():
                found.append(Kernel(entry.name, vmlinuz))
    return sorted(found, key=lambda k: tuple(int(p) for p in k.series.split(".")))


def vng() -> str | None:
    """The virtme-ng launcher of this checkout's venv, else one on PATH."""
    local = REPO / ".venv" / "bin" / "vng"
    return str(local) if local.exists() else shutil.which("vng")


def cannot_start() -> str | None:
    """Why qemu cannot start a guest here at all, or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (scripts/bootstrap --test installs qemu-system-x86)"
    if not any(shutil.which(b) for b in ("busybox-static", "busybox.static", "busybox")):
        return "no busybox for virtme-ng's initramfs (scripts/bootstrap --test installs busybox-static)"
    if vng() is None:
        return "virtme-ng (vng) is not installed (scripts/bootstrap --test installs it into .venv)"
    return None


@dataclass
class Boot:
    kernel: Kernel
    group: str
    results: dict
    seconds: float
    console: str
    shared: Path


def browser_image(shared: Path) -> Path:
    """The browser case's image: squashfs with 4 KiB gzip blocks, built here (TCG would take minutes)."""
    image = shared / "browser.sqfs"
    if not image.exists():
        subprocess.run(["mksquashfs", "/usr/bin/python3.11", "/usr/lib/python3.11/email", str(image), "-b", "4096",
                        "-comp", "gzip", "-noappend", "-no-progress", "-quiet"], check=True, capture_output=True)
    return image


def boot(kernel: Kernel, group: str, machine: Machine, images: Path, shared: Path, args: tuple[str, ...] = (),
         rodirs: tuple[tuple[str, Path], ...] = ()) -> Boot:
    """Boot `kernel` with `machine`'s disks (images kept in `images`), run guest group `group`, return its results.

    `rodirs`: (guest path, host dir) mounted read-only in the guest before its udevd starts.
    """
    images.mkdir(parents=True, exist_ok=True)
    shared.mkdir(parents=True, exist_ok=True)
    out = shared / f"{group}.json"
    out.unlink(missing_ok=True)
    browser_image(shared)
    # The guest's root is read-only: a module without a current .pyc would be compiled again by every tunectl
    # run in the guest, tens of seconds each under TCG.
    subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(REPO / "tunectl"),
                    str(REPO / "tests" / "vm" / "guest")], check=True, capture_output=True)
    guest = f"{REPO}/.venv/bin/python {REPO}/tests/vm/guest/main.py {group} {shared} {' '.join(args)}"
    cmd = [vng(), "-r", str(kernel.vmlinuz), "--disable-kvm", "-m", "2G", "--cpus", "2", f"--rwdir={shared}",
           *(f"--rodir={guest_path}={host}" for guest_path, host in rodirs),
           f"--qemu-opts={' '.join(machine.qemu_opts(images))}", "--", guest]
    env = dict(os.environ, PATH=f"{REPO}/.venv/bin:{os.environ.get('PATH', '/usr/bin:/bin')}")
    started = time.monotonic()
    # vng's own session: on a timeout (or an interrupted pytest) qemu goes with it, never left running.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=BOOT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stderr += f"\n[host] guest group {group} killed after {BOOT_TIMEOUT} s"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    seconds = time.monotonic() - started
    console = stdout + stderr
    (shared / f"{group}.console").write_text(console)
    logs = LOGS / kernel.release
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{group}.console").write_text(console)
    for kept in (out, shared / f"{group}.log"):
        if kept.exists():
            shutil.copyfile(kept, logs / kept.name)
    if not out.exists():
        raise RuntimeError(f"guest group {group} on {kernel.release} wrote no results (exit {proc.returncode}):\n"
                           + console[-4000:])
    results = json.loads(out.read_text())
    return Boot(kernel, group, results, seconds, console, shared)
