"""Boot a Debian distro kernel under qemu (virtme-ng) with real block devices; run one guest group.

The guest's root is this machine's root, read-only, with systemd-udevd running; the
kernels are Debian's own packages, unpacked by ``scripts/bootstrap --test`` into
``$TUNECTL_VM_CACHE`` (default /opt/tunectl-vm: virtme-ng's guest hides /var/cache).
One boot runs one guest group (tests/vm/guest/<group>.py), which writes a JSON of
what it read back into the shared directory; the pytest modules assert on that.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.ci import in_ci
from tests.vm import diskmodel

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TUNECTL_VM_CACHE", "/opt/tunectl-vm"))
CI_LOGS = Path("/tmp/tunectl-vm-logs")  # a CI run's: where its per-group consoles and results are looked for
LOGS: Path | None = None  # where this run's boots keep each console and results: chosen at its first boot (`log_dir`)


def logs_for(environ: Mapping[str, str]) -> Path | None:
    """Where a run's boots keep their consoles and results: TUNECTL_VM_LOGS when set; in CI (`in_ci`: CI=true,
    as CI services set it, and .ci/run) the fixed CI_LOGS; else None: a directory of the run's own (`log_dir`). A boot from
    a worktree wrote into CI_LOGS too, over the last CI run's per-group logs."""
    if environ.get("TUNECTL_VM_LOGS"):
        return Path(environ["TUNECTL_VM_LOGS"])
    if in_ci(environ):
        return CI_LOGS
    return None


OWN_LOGS = False  # LOGS is a directory made for this run alone (`log_dir`): removed when the run passes


def log_dir() -> Path:
    """This run's log directory (`logs_for`), chosen once: outside CI a new one (/tmp/tunectl-vm-logs-XXXXXXXX,
    mode 0700), which the tier's summary names and removes when the run passes (`passed_logs`). A named one
    (TUNECTL_VM_LOGS, CI's fixed CI_LOGS in /tmp, where any user may make that name first) is used only as a
    directory owned by root or this user that no other may write, reached through no link another user owns,
    the last name not a link at all; it is created with mode 0755 when missing (`logs_here`)."""
    global LOGS, OWN_LOGS
    if LOGS is None:
        named = logs_for(os.environ)
        if named is None:
            LOGS, OWN_LOGS = Path(tempfile.mkdtemp(prefix=f"{CI_LOGS.name}-", dir=CI_LOGS.parent)), True
        else:
            LOGS = logs_here(named)
    return LOGS


def logs_here(path: Path) -> Path:
    """`path` as a log directory root may write into (`log_dir`): created with mode 0755 when missing, else checked
    (owner, mode, a directory, no link); RuntimeError saying what, where and what to do when it cannot be used."""
    from tunectl.system import trust

    try:
        trust.ensure_dir(path, 0o755)
    except trust.Untrusted as e:
        raise RuntimeError(f"VM tier: log directory {path} cannot be used: {e.message}; {e.hint}, or name another "
                           "with TUNECTL_VM_LOGS") from None
    except OSError as e:
        raise RuntimeError(f"VM tier: log directory {path} cannot be used: {e.filename or path}: "
                           f"{e.strerror or e}; name another with TUNECTL_VM_LOGS") from None
    return path


def passed_logs(passed: bool) -> str | None:
    """At the run's end: this run's own log directory (`log_dir`) removed when the run `passed` and no boot needed a
    retry; what the tier's summary says of the logs (None: no boot was tried). A failed run keeps them, and says
    where; a named directory (CI's, TUNECTL_VM_LOGS) is always kept."""
    if LOGS is None:
        return None
    if passed and OWN_LOGS and not any(LOGS.glob("*/*.failed")):
        shutil.rmtree(LOGS)
        return f"consoles and results removed with {LOGS}: the run passed (TUNECTL_VM_LOGS=DIR keeps them in DIR)"
    return f"consoles and results kept in {LOGS}/<release>/"


def append_line(path: Path, line: str) -> None:
    """`line` added to `path` (the boots' times, TUNECTL_VM_TIMES: a fixed name in /tmp by default), created with
    mode 0644 when missing, never through a link, and only a regular file owned by root or this user that no other
    may write, with no other name (a hard link); RuntimeError saying what, where and what to do otherwise. Its
    directory is the caller's choice (/tmp, root's and sticky, by default), not checked here."""
    from tunectl.system import trust

    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        with contextlib.suppress(OSError):
            if e.errno == errno.ENXIO:  # a named pipe no one reads, a socket: say what stands there
                why = trust.irregular(os.lstat(path).st_mode)
        raise RuntimeError(f"VM tier: cannot add to {path}: {why}; move it aside, or name another file with "
                           "TUNECTL_VM_TIMES") from None
    with open(fd, "a", closefd=True) as f:
        st = os.fstat(fd)
        why = trust.problem(st) if stat.S_ISREG(st.st_mode) else trust.irregular(st.st_mode)
        if not why and st.st_nlink != 1:  # a hard link planted at the name: another file of root's, appended to
            why = f"{st.st_nlink} hard links: another name reaches the same file"
        if why:
            raise RuntimeError(f"VM tier: cannot add to {path}: {why}; move it aside, or name another file with "
                               "TUNECTL_VM_TIMES")
        f.write(line + "\n")


BOOT_ATTEMPTS = 2  # a boot that writes no results (seen once: an empty console) is retried once
BOOT_TIMEOUT = 1200  # seconds for one boot and its group under TCG on 2 shared cores (stacks took 814)

# The devices of a standard machine: one of every class tunectl classifies, with identities.
SSD_WWN = "0x5000c500a1b2c3d4"


@dataclass
class Disk:
    """One qemu block device backed by a sparse raw image (`images`/<name>.img, kept across a machine's boots).

    `model`: a disk model of tests/vm/diskmodel.py (``"hdd-7200"``, ``"sd-a1"``): the image is then served
    by nbdkit on the host (tests/vm/nbdmodel.py) for the boot's lifetime and attached through qemu's NBD
    block backend, so every request costs the model's time in real time, outside the guest's TCG.
    """

    name: str
    size_mib: int
    device: str  # the qemu -device, with {drive} for the drive id
    discard: bool = False
    model: str | None = None

    def image(self, images: Path) -> Path:
        image = images / f"{self.name}.img"
        if not image.exists():
            with open(image, "wb") as f:
                f.truncate(self.size_mib << 20)
        return image


# A disk's controller: its -device, and which disk -device strings sit on it. The SATA disk keeps an AHCI of its own
# (ahci0) beside the one q35 always has (ICH9, 00:1f.2): moved onto that one (bus=ide.0), six idle ports fewer to
# probe, six alternated pairs of `classify` boots on 6.1 had the guest at its script 0.4-17.8 s later, never sooner
# (medians 32.0 s against 26.5 s of uptime; whole boots 66.8 s against 54.5 s), so the second controller stays. The
# host's load differed within pairs (0.7-4.7): that shows no gain, not that ide.0 costs those seconds.
CONTROLLERS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("virtio-scsi-pci,id=scsi0", lambda device: "bus=scsi0." in device),
    ("ahci,id=ahci0", lambda device: "bus=ahci0." in device),
    ("sdhci-pci", lambda device: device.startswith("sd-card,")),
)


@dataclass
class Machine:
    disks: list[Disk] = field(default_factory=list)

    def controllers(self) -> list[str]:
        """The qemu -device of each controller a disk of this machine sits on (CONTROLLERS), in CONTROLLERS' order.

        Only those: an idle controller still costs every boot its driver's load and udev's events for its ports
        under TCG (the AHCI's six ports, the SD host's mmc core), and the model machine has SCSI disks only."""
        return [device for device, on in CONTROLLERS if any(on(disk.device) for disk in self.disks)]

    def qemu_opts(self, images: Path, sockets: Path | None = None) -> list[str]:
        """qemu's options for the controllers and the disks; a model disk's drive is the NBD socket
        `sockets`/<name>.sock."""
        opts = [opt for device in self.controllers() for opt in ("-device", device)]
        for disk in self.disks:
            image = disk.image(images)
            if disk.model:
                if sockets is None:
                    raise ValueError(f"disk {disk.name}: a model disk is served by serve_models()")
                drive = f"driver=nbd,server.type=unix,server.path={sockets / (disk.name + '.sock')},if=none,id={disk.name}"
            else:
                drive = f"if=none,id={disk.name},file={image},format=raw,cache=unsafe"
            if disk.discard:
                drive += ",discard=unmap"
            opts += ["-drive", drive, "-device", disk.device.format(drive=disk.name)]
        return opts


NBD_START_TIMEOUT = 30  # seconds for nbdkit (and Python in it) to listen


@contextlib.contextmanager
def serve_models(machine: Machine, images: Path, shared: Path) -> Iterator[Path]:
    """nbdkit for each model disk of `machine` while the block runs; yields the directory of their sockets.

    Each disk's requests are logged to `shared`/<name>.requests (emptied here; see requests()), nbdkit's
    own messages to `images`/<name>.nbdkit.log. Every nbdkit is stopped on the way out, also on errors.
    """
    sockets = Path(tempfile.mkdtemp(prefix="tunectl-nbd-"))  # short: a unix socket path has 108 bytes at most
    procs: list[subprocess.Popen] = []
    try:
        for disk in machine.disks:
            if not disk.model:
                continue
            log = shared / f"{disk.name}.requests"
            log.write_text("")
            pidfile = sockets / f"{disk.name}.pid"
            with open(images / f"{disk.name}.nbdkit.log", "w") as err:
                procs.append(subprocess.Popen(
                    ["nbdkit", "--foreground", "--exit-with-parent", "-P", str(pidfile),
                     "--unix", str(sockets / f"{disk.name}.sock"), "python", str(REPO / "tests" / "vm" / "nbdmodel.py"),
                     f"file={disk.image(images)}", f"model={disk.model}", f"log={log}"],
                    stdin=subprocess.DEVNULL, stdout=err, stderr=err))
            deadline = time.monotonic() + NBD_START_TIMEOUT
            while not pidfile.exists():  # nbdkit writes it once it listens
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nbdkit for model disk {disk.name} ({disk.model}) did not start: "
                                       + (images / f"{disk.name}.nbdkit.log").read_text()[-2000:])
                time.sleep(0.05)
        yield sockets
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(sockets, ignore_errors=True)


@dataclass(frozen=True)
class Request:
    """One request a model disk served (a line of <name>.requests; times in seconds, the host's monotonic clock)."""

    arrival: float
    op: str  # "r", "w", "f"
    offset: int
    length: int
    how: str  # "cache", "stream", "seek" (HDD reads), "sd", "write", "flush"
    start: float
    done: float
    replied: float  # when the plugin woke to answer: replied - done is the host's oversleep


def requests(log: Path, start: int = 0, end: int | None = None) -> list[Request]:
    """The requests logged in `log` between byte offsets `start` and `end` (a guest's marks: its size then)."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read(None if end is None else end - start).decode()
    out = []
    for line in text.splitlines():
        arrival, op, offset, length, how, begin, done, *replied = line.split()
        out.append(Request(float(arrival), op, int(offset), int(length), how, float(begin), float(done),
                           float(replied[0]) if replied else float(done)))
    return out


def step_requests(boot: Boot, step: str, log: str) -> list[Request]:
    """The requests model disk `log` (e.g. "mhdd") served during guest step `step` (a guest's rec["marks"])."""
    marks = boot.results["marks"][step]
    return requests(boot.shared / f"{log}.requests", marks["before"][log], marks["after"][log])


def step_modelled(boot: Boot, step: str, log: str = "mhdd", model: str = "hdd-7200") -> tuple[int, float]:
    """The reads model disk `log` served during guest step `step`, and the seconds model `model` takes for them
    one after the other with a real machine's host cost (diskmodel.replay): the disk's account, without TCG.
    The disk's size is the guest's rec["queue"]["size"]. Read it before the next boot of the machine empties the log."""
    reqs = [r for r in step_requests(boot, step, log) if r.op == "r"]
    return len(reqs), diskmodel.replay(model, boot.results["queue"]["size"], [(r.op, r.offset, r.length) for r in reqs])


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


MODEL_HDD_SERIAL, MODEL_SD_SERIAL = "tcmhdd01", "tcmsd01"


def model_machine() -> Machine:
    """Disks that behave like disks, served by the models of tests/vm/diskmodel.py (requests logged in
    SHARED/<disk>.requests): disk "mhdd", a 7200 rpm SATA HDD (1 GiB scsi-hd, rotation_rate=7200, serial
    tcmhdd01), and disk "msd", an SD card of class A1 (512 MiB scsi-hd, rotation_rate=1, serial tcmsd01).

    The SD card is not an sd-card: qemu 7.2's (hw/sd/sd.c) hands the block layer one 512-byte block at a time,
    each its own NBD request, so the model would charge a command's cost per 512 bytes and request size could
    not decide throughput. On scsi-hd the guest's requests arrive whole; the guest classifies the card as an
    SSD, not mmc. A real card (no command queue) takes one request at a time, so the next ones wait in the
    scheduler and merge: give the guest's disk the same with `echo 1 > /sys/block/sdX/device/queue_depth`
    (guest/models.py: `like_a_card()`). A Disk with model="sd-a1" on an sd-card device still works, at that cost.
    """
    return Machine([
        Disk("mhdd", 1024, f"scsi-hd,bus=scsi0.0,drive={{drive}},rotation_rate=7200,serial={MODEL_HDD_SERIAL}",
             model="hdd-7200"),
        Disk("msd", 512, f"scsi-hd,bus=scsi0.0,drive={{drive}},rotation_rate=1,serial={MODEL_SD_SERIAL}",
             model="sd-a1"),
    ])


MACHINES = {"standard": standard_machine, "persistent": persistent_machine, "model": model_machine}


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


# The bzImage's setup header (the kernel's Documentation/arch/x86/boot.rst): setup_sects at 0x1f1, "HdrS" at 0x202,
# and where the compressed kernel lies: its offset from the protected-mode code ((setup_sects + 1) * 512), its length.
_SETUP_SECTS, _HDRS, _PAYLOAD_OFFSET, _PAYLOAD_LENGTH = 0x1F1, 0x202, 0x248, 0x24C
_DECOMPRESSORS = ((b"\xfd7zXZ\x00", ("xz", "-dcq")), (b"\x28\xb5\x2f\xfd", ("zstd", "-dcq")))


def boot_image(kernel: Kernel) -> Path:
    """What `kernel` boots from: its uncompressed ELF, boot/vmlinux-<release> beside the vmlinuz, made here once
    (again when the vmlinuz is newer) from the vmlinuz's payload with xz or zstd, as Debian's 6.1 and 6.12 compress it.

    qemu starts that ELF at its PVH entry (Debian's kernels have CONFIG_PVH), so no boot spends its first seconds
    in the decompressor under TCG (66 MB out of 8 MB of xz for 6.1): host seconds minus the guest's uptime at its
    script were 4.8-7.6 s this way against 9.8-11.8 s from the vmlinuz (two pairs of boots, load 5-7.6). The payload
    is the kernel's own ELF (its relocations follow it; qemu loads the ELF's segments only): the same code the
    decompressor would have placed and jumped to, without KASLR, which no test relies on. The vmlinuz itself when
    it has no such payload, xz or zstd is missing or the ELF cannot be written (vng then says what it lacks)."""
    elf = kernel.vmlinuz.with_name(kernel.vmlinuz.name.replace("vmlinuz", "vmlinux", 1))
    try:
        if elf.is_file() and elf.stat().st_mtime >= kernel.vmlinuz.stat().st_mtime:
            return elf
        data = kernel.vmlinuz.read_bytes()
    except OSError:
        return kernel.vmlinuz
    if len(data) < _PAYLOAD_LENGTH + 4 or data[_HDRS:_HDRS + 4] != b"HdrS":
        return kernel.vmlinuz
    start = (data[_SETUP_SECTS] + 1) * 512 + int.from_bytes(data[_PAYLOAD_OFFSET:_PAYLOAD_OFFSET + 4], "little")
    payload = data[start:start + int.from_bytes(data[_PAYLOAD_LENGTH:_PAYLOAD_LENGTH + 4], "little")]
    tool = next((cmd for magic, cmd in _DECOMPRESSORS if payload.startswith(magic)), None)
    if tool is None or shutil.which(tool[0]) is None:
        return kernel.vmlinuz
    # The payload ends in the decompressor's 4-byte size field (the kernel's size_append: what it unpacks to), after
    # the stream: xz and zstd may warn of it and exit non-zero after writing the whole stream, so the output is
    # judged by that size, not by the exit code. A cut or damaged payload is never kept as the ELF.
    out = subprocess.run(tool, input=payload, capture_output=True, check=False).stdout
    if not out.startswith(b"\x7fELF") or len(out) != int.from_bytes(payload[-4:], "little"):
        return kernel.vmlinuz
    part = elf.with_name(f".{elf.name}.{os.getpid()}")
    try:
        part.write_bytes(out)
        os.replace(part, elf)
    except OSError:
        part.unlink(missing_ok=True)
        return kernel.vmlinuz
    return elf


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
    attempts: int = 1  # a boot that wrote no results is tried once more (BOOT_ATTEMPTS)
    failures: tuple[str, ...] = ()  # what each failed attempt showed


def browser_image(shared: Path) -> Path:
    """The browser case's image: squashfs with 4 KiB gzip blocks, built here (TCG would take minutes)."""
    image = shared / "browser.sqfs"
    if not image.exists():
        subprocess.run(["mksquashfs", "/usr/bin/python3.11", "/usr/lib/python3.11/email", str(image), "-b", "4096",
                        "-comp", "gzip", "-noappend", "-no-progress", "-quiet"], check=True, capture_output=True)
    return image


def _run_guest(cmd: list[str], env: dict[str, str], group: str) -> tuple[subprocess.Popen, str, str]:
    """Run vng to the end: (its process, stdout, stderr)."""
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
    return proc, stdout, stderr


MODEL_BROWSER_MIB = 4  # the browser binary of the SD calibration, scaled down from 180 MB for TCG


def model_browser(shared: Path, mib: int = MODEL_BROWSER_MIB) -> str:
    """The SD calibration's browser: `mib` MiB of a large ELF library as the binary (mbrowser.bin), squashfs
    with 4 KiB gzip blocks holding it (mbrowser.sqfs), its dm-verity hash tree (mbrowser.verity); built here,
    where TCG would take minutes. Returns the verity root hash (also in mbrowser.roothash)."""
    roothash = shared / "mbrowser.roothash"
    if roothash.exists() and (shared / "mbrowser.bin").stat().st_size == mib << 20:
        return roothash.read_text().strip()
    libs = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("lib*.so*"), key=lambda p: p.stat().st_size, reverse=True)
    with open(shared / "mbrowser.bin", "wb") as out:
        for lib in libs:  # the biggest first: one real binary's mix of code and data where it is large enough
            left = (mib << 20) - out.tell()
            if left <= 0:
                break
            with open(lib, "rb") as f:
                out.write(f.read(left))
    sqfs = shared / "mbrowser.sqfs"
    subprocess.run(["mksquashfs", str(shared / "mbrowser.bin"), str(sqfs), "-b", "4096", "-comp", "gzip",
                    "-noappend", "-no-progress", "-quiet"], check=True, capture_output=True)
    fmt = subprocess.run(["veritysetup", "format", str(sqfs), str(shared / "mbrowser.verity")], check=True,
                         capture_output=True, text=True).stdout
    root = next(line.split(":", 1)[1].strip() for line in fmt.splitlines() if line.startswith("Root hash"))
    roothash.write_text(root + "\n")
    return root


# Modules the guest's udev would load for the emulated CPU that no test uses: kvm_amd (with kvm, ccp, irqbypass)
# took 3.2 s of a boot under TCG at load 4, powernow_k8 0.6 s (`modprobe` timed in a guest). Likewise for the q35
# machine's and virtme-ng's devices no test touches, `modprobe` of each timed in a guest (host load 2-3.7, after
# `modprobe -r`, 2 rounds): pcspkr 0.9 s, i2c_i801 0.8-1.6, lpc_ich 0.5-0.7 (it and i2c_i801 add iTCO_wdt with
# iTCO_vendor_support, ~1.3 s in the boot's log), i6300esb (virtme-ng's watchdog, never opened) 0.6-1.3, serio_raw
# 1.3-1.6, psmouse 1.6-1.8, evdev 0.6-0.7, qemu_fw_cfg 1.0, button 0.6. libkmod, which udev's module loading uses,
# skips what the kernel command line's modprobe.blacklist names; an explicit modprobe still works.
GUEST_MODULE_BLACKLIST = ("kvm", "kvm_amd", "kvm_intel", "powernow_k8", "pcspkr", "i2c_i801", "lpc_ich", "iTCO_wdt",
                          "iTCO_vendor_support", "i6300esb", "serio_raw", "psmouse", "evdev", "qemu_fw_cfg", "button")


def vng_command(kernel: Kernel, qemu_opts: list[str], shared: Path, rodirs: tuple[tuple[str, Path], ...],
                guest: str) -> list[str]:
    """virtme-ng's command line for one boot: `kernel` under TCG, the host's root read-only and `shared` read-write
    over 9p, `rodirs` read-only, the disks' `qemu_opts`, then the command `guest`.

    --force-9p: without it vng first tries virtiofsd for the root and for each shared directory, waiting up to
    3.1 s for each before it falls back to 9p. Debian 12's virtiofsd (QEMU's C one) never starts with vng's
    arguments, so every boot paid 6-9 s for the same 9p guest (the qemu command line is identical either way).
    --append: the kernel command line's module blacklist (GUEST_MODULE_BLACKLIST)."""
    return [vng(), "-r", str(boot_image(kernel)), "--disable-kvm", "--force-9p", "-m", "2G", "--cpus", "2",
            f"--append=modprobe.blacklist={','.join(GUEST_MODULE_BLACKLIST)}",
            f"--rwdir={shared}", *(f"--rodir={guest_path}={host}" for guest_path, host in rodirs),
            f"--qemu-opts={' '.join(qemu_opts)}", "--", guest]


CACHED_ROOT_TAG = "tunectlroot"


def cached_root_opts() -> list[str]:
    """qemu's options exporting the host's root read-only a second time (9p tag CACHED_ROOT_TAG), for
    tests/vm/guest/cached-root.sh to mount with cache=loose."""
    return ["-fsdev", "local,id=tunectlroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", f"virtio-9p-pci,fsdev=tunectlroot,mount_tag={CACHED_ROOT_TAG}"]


def libpython_dir(maps: str) -> str | None:
    """The directory of the libpython a process maps (`maps`: its /proc/<pid>/maps), or None: an interpreter built
    with --enable-shared (pyenv's, as CI's venv has) keeps nearly all of itself in libpython3.X.so (23 MB), not in
    the standard library's directory; Debian's python3 has it linked in."""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libpython"):
            return os.path.dirname(fields[5])
    return None


def cached_dirs(venv: Path, maps: str | None = None) -> tuple[str, ...]:
    """What the guest reads through the cached root: this checkout, `venv` (it may live outside the checkout: a
    worktree's link), the standard library of the Python running this (the venv's, as scripts/test runs it) and the
    directory of the libpython it maps (`libpython_dir` of `maps`, by default this process's /proc/self/maps).
    Every guest Python maps libpython. On the uncached root each of its page faults is a 9p round trip while no
    other process holds it mapped (a Python started from a shell: `python -c pass` 6-7 s at load 5, 2.6-3 s with
    its directory cached, in one guest, 2 rounds each way); a group's tunectl runs mostly share the pages main.py
    keeps mapped, so a boot saves about one such start (main.py's own). Not all of /usr: virtme-ng's overlays over
    /usr and /lib hold the guest's /lib/modules link, which a bind over /usr (or /usr/lib) would hide, so a
    directory at or above it is left out. A directory inside another one listed is left out (its bind would be a
    no-op)."""
    if maps is None:
        with open("/proc/self/maps") as f:
            maps = f.read()
    found = {str(REPO), os.path.realpath(venv), os.path.realpath(sysconfig.get_paths()["stdlib"])}
    lib = libpython_dir(maps)
    if lib is not None:
        found.add(os.path.realpath(lib))
    modules = os.path.realpath("/lib/modules")
    dirs: list[str] = []
    for d in sorted(found):
        if d == modules or modules.startswith(d.rstrip("/") + "/"):
            continue
        if not any(d == kept or d.startswith(kept + "/") for kept in dirs):
            dirs.append(d)
    return tuple(dirs)


def hidden_by_cached_root(cached: tuple[str, ...], mounts: tuple[str, ...]) -> list[str]:
    """The guest paths of `mounts` (virtme-ng's --rwdir/--rodir) a bind of cached-root.sh would hide: at or under
    one of the `cached` directories. cached-root.sh binds those after virtme-ng mounted its directories, so the
    guest would see the host's directory from the cached root (read-only, and cached: what the host writes there
    during the boot may never show) instead of the mount."""
    return [m for m in mounts
            if any(p == d or p.startswith(d.rstrip("/") + "/") for p in {m, os.path.realpath(m)} for d in cached)]


def _keep_images(images: Path) -> Path:
    """A copy of the disk images in `images` as a boot finds them (none: a machine's first boot), for a retry.

    A failed attempt leaves on its disks whatever the guest wrote before it stopped: md superblocks, LUKS and LVM
    headers, partition tables. The retry has to start from the disks the first attempt had (mdadm refuses
    --create on a member with a superblock, so a retried stacks boot could never pass). Sparse copies: a few MB."""
    kept = images.with_name(images.name + ".before")
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    for image in sorted(images.glob("*.img")):
        _sparse_copy(image, kept / image.name)
    return kept


def _restore_images(images: Path, kept: Path) -> None:
    """The disk images back as `_keep_images` copied them; images it did not find are deleted (made empty again)."""
    for image in images.glob("*.img"):
        image.unlink()
    for image in kept.glob("*.img"):
        _sparse_copy(image, images / image.name)


def _sparse_copy(source: Path, target: Path) -> None:
    """`source`'s data extents (SEEK_DATA/SEEK_HOLE) copied into a new sparse `target` of the same size."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        at = 0
        while at < size:
            try:
                at = os.lseek(src.fileno(), at, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after `at`
                break
            end = os.lseek(src.fileno(), at, os.SEEK_HOLE)
            src.seek(at)
            dst.seek(at)
            while at < end:
                chunk = src.read(min(end - at, 1 << 20))
                dst.write(chunk)
                at += len(chunk)
        dst.truncate(size)


def boot(kernel: Kernel, group: str, machine: Machine, images: Path, shared: Path, args: tuple[str, ...] = (),
         rodirs: tuple[tuple[str, Path], ...] = ()) -> Boot:
    """Boot `kernel` with `machine`'s disks (images kept in `images`), run guest group `group`, return its results.

    `rodirs`: (guest path, host dir) mounted read-only in the guest before its udevd starts.
    """
    cached = cached_dirs(REPO / ".venv")
    hidden = hidden_by_cached_root(cached, (str(shared.absolute()), *(guest for guest, _ in rodirs)))
    if hidden:
        raise ValueError(f"guest group {group}: the guest's shared or read-only directory {', '.join(hidden)} "
                         f"is inside {', '.join(cached)}, which tests/vm/guest/cached-root.sh binds over it from "
                         "the cached root, so the guest would not see it: put it outside those (pytest's "
                         "--basetemp for the shared directory)")
    images.mkdir(parents=True, exist_ok=True)
    shared.mkdir(parents=True, exist_ok=True)
    out = shared / f"{group}.json"
    out.unlink(missing_ok=True)
    before = _keep_images(images)
    browser_image(shared)
    if any(d.model == "sd-a1" for d in machine.disks):
        model_browser(shared)
    # The guest's root is read-only: a module without a current .pyc would be compiled again by every tunectl
    # run in the guest, tens of seconds each under TCG.
    subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(REPO / "tunectl"),
                    str(REPO / "tests" / "vm" / "guest")], check=True, capture_output=True)
    # Python's start-up under TCG is 9p round trips on virtme-ng's uncached root (`import jsonschema, yaml`
    # ~1,900 file calls): the guest runs with the checkout, the venv and the stdlib from a cache=loose mount
    # (tests/vm/guest/cached-root.sh). It cannot serve stale files: the cache is this boot's guest kernel's
    # and starts empty, and the host writes none of those trees during a boot (it compiled them just above).
    # `shared`, which host and guest both write while the guest runs, stays on virtme-ng's uncached mount.
    guest = (f"{REPO}/tests/vm/guest/cached-root.sh {CACHED_ROOT_TAG} {' '.join(cached)} -- "
             f"{REPO}/.venv/bin/python {REPO}/tests/vm/guest/main.py {group} {shared} {' '.join(args)}")
    env = dict(os.environ, PATH=f"{REPO}/.venv/bin:{os.environ.get('PATH', '/usr/bin:/bin')}")
    failures: list[str] = []
    logs = logs_here(log_dir() / kernel.release)
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        if attempt > 1:
            _restore_images(images, before)
        started = time.monotonic()
        with serve_models(machine, images, shared) as sockets:
            cmd = vng_command(kernel, machine.qemu_opts(images, sockets) + cached_root_opts(), shared, rodirs, guest)
            proc, stdout, stderr = _run_guest(cmd, env, group)
        seconds = time.monotonic() - started
        console = stdout + stderr
        (shared / f"{group}.console").write_text(console)
        (logs / f"{group}.console").write_text(console)
        # what the model disks served, kept beside the results: the calibration's evidence
        for kept in (out, shared / f"{group}.log", *(shared / f"{d.name}.requests" for d in machine.disks if d.model)):
            if kept.exists():
                shutil.copyfile(kept, logs / kept.name)
        if out.exists():
            results = json.loads(out.read_text())
            return Boot(kernel, group, results, seconds, console, shared, attempt, tuple(failures))
        failures.append(f"attempt {attempt} of guest group {group} on {kernel.release} wrote no results after "
                        f"{seconds:.0f} s: vng exited {proc.returncode}\n"
                        f"--- vng's and qemu's stderr (last 3000 characters):\n{stderr[-3000:] or '(empty)'}\n"
                        f"--- the guest's console (last 2000 characters):\n{stdout[-2000:] or '(empty)'}")
        (logs / f"{group}.attempt{attempt}.failed").write_text(failures[-1])
    raise RuntimeError("\n\n".join(failures) + f"\n(consoles kept in {logs})")
