"""A VM boot starts the kernel's uncompressed ELF (machine.boot_image): no guest decompresses its kernel under TCG."""

from __future__ import annotations

import lzma
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.vm import machine

ELF = b"\x7fELF" + bytes(range(256)) * 64


def bzimage(path: Path, payload: bytes, setup_sects: int = 3, offset: int = 0x1000) -> machine.Kernel:
    """A vmlinuz with the setup header's fields boot_image reads and `payload` where they say, plus the
    decompressor's 4-byte size after it (as a real bzImage has it)."""
    payload += struct.pack("<I", len(ELF))
    head = bytearray((setup_sects + 1) * 512 + offset)
    head[0x1F1] = setup_sects
    head[0x202:0x206] = b"HdrS"
    head[0x248:0x250] = struct.pack("<II", offset, len(payload))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(head) + payload + b"\0" * 512)
    return machine.Kernel("6.1.0-test-amd64", path)


def test_an_xz_kernel_boots_from_its_elf_made_once(tmp_path: Path) -> None:
    kernel = bzimage(tmp_path / "boot" / "vmlinuz-6.1.0-test-amd64", lzma.compress(ELF, format=lzma.FORMAT_XZ))
    image = machine.boot_image(kernel)
    assert image == tmp_path / "boot" / "vmlinux-6.1.0-test-amd64" and image.read_bytes() == ELF
    image.write_bytes(ELF + b"kept")  # not made again while it is newer than the vmlinuz
    assert machine.boot_image(kernel).read_bytes() == ELF + b"kept"
    os.utime(image, (1, 1))  # a vmlinuz newer than the ELF: made again
    assert machine.boot_image(kernel).read_bytes() == ELF
    assert sorted(p.name for p in image.parent.iterdir()) == ["vmlinux-6.1.0-test-amd64", "vmlinuz-6.1.0-test-amd64"]


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd here")
def test_a_zstd_kernel_boots_from_its_elf(tmp_path: Path) -> None:
    packed = subprocess.run(["zstd", "-q", "-c"], input=ELF, capture_output=True, check=True).stdout
    kernel = bzimage(tmp_path / "vmlinuz-6.12.0-test-amd64", packed, setup_sects=39, offset=0x3B5)
    assert machine.boot_image(kernel).read_bytes() == ELF


def test_a_kernel_boots_as_it_is_when_no_elf_can_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No setup header, a payload that is not xz or zstd, one that does not unpack to an ELF, one cut short (its
    start unpacks to a partial ELF, shorter than the size field says), a directory the ELF
    cannot be written to, a missing vmlinuz: the vmlinuz as it is (vng says what is wrong with it), nothing left."""
    plain = tmp_path / "a" / "vmlinuz-x"
    plain.parent.mkdir()
    plain.write_bytes(b"\0" * 4096)
    cases = [machine.Kernel("x", plain), bzimage(tmp_path / "b" / "vmlinuz-x", b"\x1f\x8b gzip"),
             bzimage(tmp_path / "c" / "vmlinuz-x", lzma.compress(b"not an ELF", format=lzma.FORMAT_XZ)),
             bzimage(tmp_path / "e" / "vmlinuz-x", lzma.compress(ELF, format=lzma.FORMAT_XZ)[:200]),  # cut short
             machine.Kernel("x", tmp_path / "none" / "vmlinuz-x")]
    for kernel in cases:
        assert machine.boot_image(kernel) == kernel.vmlinuz
    kernel = bzimage(tmp_path / "d" / "vmlinuz-x", lzma.compress(ELF, format=lzma.FORMAT_XZ))

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    assert machine.boot_image(kernel) == kernel.vmlinuz
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["vmlinuz-x"]


def pvh_entry(elf: bytes) -> bool:
    """Whether an ELF64 has the Xen note qemu's -kernel looks for to start it at its PVH entry
    (XEN_ELFNOTE_PHYS32_ENTRY, type 18)."""
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        at = offset
        while kind == 4 and at < offset + size:  # PT_NOTE
            namesz, descsz, note = struct.unpack_from("<III", elf, at)
            name = elf[at + 12:at + 12 + namesz]
            if name == b"Xen\0" and note == 18:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def test_the_vm_kernels_boot_from_an_elf_with_a_pvh_entry(tmp_path: Path) -> None:
    """Debian's 6.1 and 6.12 as bootstrap unpacked them: each boots from an ELF qemu can start at its PVH entry,
    and vng's command names it (it finds the release, hence the modules, from the ELF's banner)."""
    kernels = machine.kernels()
    if not kernels:
        pytest.skip("no VM kernel here (scripts/bootstrap --test)")
    for kernel in kernels:
        made = kernel.vmlinuz.with_name(f"vmlinux-{kernel.release}")
        if not made.is_file() and not os.access(kernel.vmlinuz.parent, os.W_OK):
            pytest.skip(f"{made} is not made yet and {kernel.vmlinuz.parent} is not writable here (a VM boot as "
                        "the cache's owner makes it)")
        image = machine.boot_image(kernel)
        assert image.name == f"vmlinux-{kernel.release}", image
        elf = image.read_bytes()
        assert elf.startswith(b"\x7fELF\x02") and pvh_entry(elf), image
        assert machine.vng_command(kernel, [], tmp_path, (), "true")[1:3] == ["-r", str(image)]
