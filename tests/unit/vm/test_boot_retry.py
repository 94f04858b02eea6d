"""A boot that writes no results is reported (vng's exit code, its and qemu's stderr, the console) and retried once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.vm import machine

KERNEL = machine.Kernel("6.1.0-test-amd64", Path("/nonexistent/vmlinuz"))


@pytest.fixture
def fake_guest(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[int, str, str, dict | None]]:
    """Each boot attempt takes the next (exit code, stdout, stderr, results or None) of the returned list."""
    attempts: list[tuple[int, str, str, dict | None]] = []
    monkeypatch.setattr(machine, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(machine, "browser_image", lambda shared: shared / "browser.sqfs")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)  # compileall

    def run_guest(cmd: list[str], env: dict[str, str], group: str) -> tuple[SimpleNamespace, str, str]:
        code, out, err, results = attempts.pop(0)
        if results is not None:
            shared = Path(next(c for c in cmd if c.startswith("--rwdir=")).split("=", 1)[1])
            (shared / f"{group}.json").write_text(json.dumps(results))
        return SimpleNamespace(returncode=code), out, err

    monkeypatch.setattr(machine, "_run_guest", run_guest)
    return attempts


def test_a_boot_without_results_is_retried_once_and_recorded(fake_guest: list, tmp_path: Path) -> None:
    fake_guest += [(1, "", "qemu-system-x86_64: -drive ...: Could not open", None), (0, "ok", "", {"errors": {}})]
    boot = machine.boot(KERNEL, "classify", machine.Machine(), tmp_path / "images", tmp_path / "shared")
    assert boot.attempts == 2 and boot.results == {"errors": {}}
    assert "vng exited 1" in boot.failures[0] and "Could not open" in boot.failures[0]
    assert (tmp_path / "logs" / KERNEL.release / "classify.attempt1.failed").exists()


def test_a_boot_failing_twice_reports_both_attempts(fake_guest: list, tmp_path: Path) -> None:
    fake_guest += [(-9, "", "", None), (255, "[ 1.0] panic", "vng: qemu died", None)]
    with pytest.raises(RuntimeError) as failed:
        machine.boot(KERNEL, "classify", machine.Machine(), tmp_path / "images", tmp_path / "shared")
    text = str(failed.value)
    assert "attempt 1" in text and "vng exited -9" in text and "(empty)" in text
    assert "attempt 2" in text and "vng exited 255" in text and "qemu died" in text and "panic" in text
    assert not fake_guest


def test_vng_boots_the_guest_over_9p_without_trying_virtiofsd(tmp_path: Path) -> None:
    """vng's own account of the command a boot runs (--dry-run): the root and the shared directories over 9p,
    with no wait for a virtiofsd (each try cost a boot up to 3.1 s; Debian 12's never starts)."""
    kernels, vng = machine.kernels(), machine.vng()
    if not kernels or vng is None:
        pytest.skip("no VM kernel or no vng here (scripts/bootstrap --test)")
    cmd = machine.vng_command(kernels[0], [], tmp_path, (("/mnt/ro", tmp_path),), "true")
    cmd[-2:-2] = ["--dry-run", "--verbose"]
    env = {"PATH": f"{Path(vng).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "virtiofsd" not in done.stdout + done.stderr, done.stderr[-2000:]
    qemu = next(line for line in (done.stdout + done.stderr).splitlines() if "qemu-system-x86_64 " in line)
    assert "-device virtio-9p-pci,fsdev=virtfs" in qemu and "mount_tag=/dev/root" in qemu, qemu
    assert "virtme_initmount0_fstype=9p" in qemu and "virtme_initmount1_fstype=9p" in qemu, qemu
    assert " modprobe.blacklist=kvm,kvm_amd,kvm_intel,powernow_k8 " in qemu, qemu  # on the kernel's command line


def test_the_guest_kernel_is_told_not_to_load_kvm_or_cpufreq_modules(tmp_path: Path) -> None:
    """udev in the guest loads, for the emulated CPU, modules no test uses: kvm_amd (with kvm) cost a TCG boot
    3.2 s, powernow_k8 0.6 s. The kernel command line's blacklist, which udev's libkmod honours, skips them."""
    cmd = machine.vng_command(KERNEL, [], tmp_path, (), "true")
    appended = [a.split("=", 1)[1] for a in cmd[:cmd.index("--")] if a.startswith("--append=")]
    assert appended == ["modprobe.blacklist=kvm,kvm_amd,kvm_intel,powernow_k8"]
    # No module a guest group loads by name or checks for is blacklisted.
    guest = "".join(p.read_text() for p in (machine.REPO / "tests" / "vm" / "guest").glob("*.py"))
    loaded = set(re.findall(r"modprobe ([\w-]+)", guest)) | {"bfq", "kyber_iosched", "loop", "dm-verity"}
    assert loaded and not loaded & set(machine.GUEST_MODULE_BLACKLIST)


def test_a_retry_starts_from_the_disks_the_first_attempt_found(fake_guest: list, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed attempt leaves what its guest wrote on the disks (an md superblock: mdadm then refuses --create),
    so a retry gets them back as the boot found them: a machine's first boot empty disks, a later one its images."""
    images = tmp_path / "images"
    images.mkdir()
    disks = machine.Machine([machine.Disk("kept", 4, "virtio-blk-pci,drive={drive}"),
                             machine.Disk("new", 4, "virtio-blk-pci,drive={drive}")])
    (images / "kept.img").write_bytes(b"\0" * (3 << 20))  # an earlier boot of this machine wrote at 3 MiB
    with open(images / "kept.img", "r+b") as f:
        f.truncate(4 << 20)
        f.seek(3 << 20)
        f.write(b"earlier boot")
    seen = []
    real = machine._run_guest

    def scribble(cmd: list[str], env: dict[str, str], group: str) -> tuple:
        seen.append({p.name: p.read_bytes() for p in sorted(images.glob("*.img"))})
        for image in images.glob("*.img"):
            with open(image, "r+b") as f:
                f.seek(4096)
                f.write(b"md superblock")
        return real(cmd, env, group)

    monkeypatch.setattr(machine, "_run_guest", scribble)
    fake_guest += [(-9, "", "", None), (0, "ok", "", {"errors": {}})]
    boot = machine.boot(KERNEL, "stacks", disks, images, tmp_path / "shared")
    assert boot.attempts == 2
    assert seen[0] == seen[1] and set(seen[0]) == {"kept.img", "new.img"}
    assert seen[1]["kept.img"][3 << 20:(3 << 20) + 12] == b"earlier boot" and b"md superblock" not in seen[1]["kept.img"]
    assert seen[1]["new.img"] == b"\0" * (4 << 20)


def test_the_guest_runs_from_a_cached_view_of_the_checkout_the_venv_and_the_stdlib(tmp_path: Path) -> None:
    """The guest command mounts the second root export (cached_root_opts) and binds the checkout, the venv and
    the stdlib from it before Python starts; nested directories are bound once (their parent's bind has them)."""
    venv = tmp_path / "venv"
    venv.mkdir()
    dirs = machine.cached_dirs(venv)
    assert str(machine.REPO) in dirs and str(venv.resolve()) in dirs
    assert not any(a != b and a.startswith(b + "/") for a in dirs for b in dirs)
    assert str(machine.REPO / "sub") not in machine.cached_dirs(machine.REPO / "sub")
    opts = " ".join(machine.cached_root_opts())
    assert f"mount_tag={machine.CACHED_ROOT_TAG}" in opts and "readonly=on" in opts and "path=/," in opts


def test_the_guest_maps_libpython_from_the_cached_view(tmp_path: Path) -> None:
    """A shared-library Python (pyenv's, CI's venv) keeps itself in libpython, outside the stdlib's directory: its
    directory is cached too, unless it holds the kernel modules' link (/usr/lib), which a bind would hide."""
    venv = tmp_path / "venv"
    venv.mkdir()
    pyenv = tmp_path / "pyenv" / "lib"
    maps = ("55d0c0a00000-55d0c0a01000 r--p 00000000 00:1f 123 /usr/bin/python3.11\n"
            "7f1212796000-7f121288b000 r--p 00000000 00:1f 456 " + str(pyenv / "libpython3.11.so.1.0") + "\n"
            "7f1212c00000-7f1212c01000 rw-p 00000000 00:00 0 \n")
    assert machine.libpython_dir(maps) == str(pyenv)
    assert str(pyenv) in machine.cached_dirs(venv, maps)
    assert machine.libpython_dir("7f12-7f13 r--p 0 00:1f 7 /usr/lib/x86_64-linux-gnu/libc.so.6\n") is None
    without = machine.cached_dirs(venv, "")
    assert str(pyenv) not in without and str(machine.REPO) in without
    above_modules = os.path.dirname(os.path.realpath("/lib/modules"))  # /usr/lib on a merged-/usr system
    at_modules = f"7f12-7f13 r--p 0 00:1f 7 {above_modules}/libpython3.11.so.1.0\n"
    assert machine.cached_dirs(venv, at_modules) == without


def test_a_shared_or_read_only_directory_a_cached_bind_would_hide_is_refused(fake_guest: list, tmp_path: Path) -> None:
    """cached-root.sh binds the checkout, the venv and the stdlib after virtme-ng mounted --rwdir/--rodir: one of
    those at or under a bound directory would be hidden in the guest (the shared one under a --basetemp in the
    checkout). The boot refuses before it makes a directory or starts a guest (fake_guest has no attempt)."""
    inside = machine.REPO / "tmp-basetemp" / "shared"
    with pytest.raises(ValueError, match=f"shared or read-only directory {inside} is inside .*--basetemp"):
        machine.boot(KERNEL, "classify", machine.Machine(), tmp_path / "images", inside)
    assert not inside.parent.exists() and not (tmp_path / "images").exists()
    stdlib = sysconfig.get_paths()["stdlib"]
    with pytest.raises(ValueError, match=f"directory {stdlib}/site is inside"):
        machine.boot(KERNEL, "classify", machine.Machine(), tmp_path / "images", tmp_path / "shared",
                     rodirs=((f"{stdlib}/site", tmp_path),))
    assert machine.hidden_by_cached_root(("/work/x",), ("/work/x", "/work/x/a", "/work/xy", "/work", "/tmp/s")) == [
        "/work/x", "/work/x/a"]


def test_a_machine_gets_only_the_controllers_its_disks_sit_on(tmp_path: Path) -> None:
    """An idle controller costs every TCG boot its driver and udev's events (AHCI's six ports, the SD host's mmc
    core): the model machine, SCSI disks only, gets the SCSI controller alone; the standard one all three."""
    def devices(m: machine.Machine) -> list[str]:
        opts = m.qemu_opts(tmp_path, tmp_path)
        return [opts[i + 1].split(",")[0] for i, o in enumerate(opts) if o == "-device"]

    assert devices(machine.model_machine()) == ["virtio-scsi-pci", "scsi-hd", "scsi-hd"]
    standard = devices(machine.standard_machine())
    assert standard[:3] == ["virtio-scsi-pci", "ahci", "sdhci-pci"]
    assert devices(machine.Machine([machine.Disk("card", 4, "sd-card,drive={drive}")])) == ["sdhci-pci", "sd-card"]
    assert devices(machine.Machine([machine.Disk("v", 4, "virtio-blk-pci,drive={drive}")])) == ["virtio-blk-pci"]
