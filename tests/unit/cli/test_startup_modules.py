"""What a command does not import: each module is paid for at every start, and the VM tier's TCG guests run
tunectl 74 times a CI run, at 5-18 s each (benchmarks/startup.py times each command against the bare
interpreter). The modules below were loaded by every write (secrets, for a temp file's name: OpenSSL's hashlib,
hmac, random), by an apply or rollback switching two schedulers (concurrent.futures: logging, queue), by every
command that starts a program (shutil.which: zlib, bz2, lzma), and by every command (tunectl.record declared its
records by dataclasses, which imports inspect, ast, dis, tokenize). A first check of a profile in the plain YAML
most profiles are written in loaded PyYAML and jsonschema (5-9 s of each VM group in its guest): CHECKER_LIBRARIES
stay unloaded for a valid one, and load for a profile the schema refuses, whose diagnostics are jsonschema's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakesys import ALL_SCHEDULERS, FakeTree, scheduler_line
from tests.harness import REPO, run_process
from tunectl.system.runner import which

NEVER = {"secrets", "hashlib", "_hashlib", "hmac", "random", "concurrent.futures", "logging", "shutil", "dataclasses",
         "inspect"}
CHECKER_LIBRARIES = {"jsonschema", "referencing", "yaml"}
PROFILE = """name: two
classes:
  rotational: {scheduler: bfq, read_ahead_kb: 1024}
  nvme: {scheduler: kyber, read_ahead_kb: 512}
mounts:
  - match: {mountpoint: '/srv/*'}
    options: [noatime]
"""


def _imported(tree: FakeTree, tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[set[str], dict]:
    """The modules `tunectl --json ARGV` imported on `tree`, and its document."""
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPROFILEIMPORTTIME": "1", **(env or {})}  # imports on stderr
    result = run_process("--json", "--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root),
                         "--state-dir", str(tmp_path / "state"), *argv, env=full)
    assert result.code == 0, result.err
    imported = {line.rpartition("|")[2].strip() for line in result.lines if line.startswith("import time:")}
    assert "tunectl.cli" in imported  # the lines are there to read
    return imported, result.doc


def _kernel_lines(tree: FakeTree) -> None:
    """A process writes a fake tree's scheduler file as a plain file ("bfq"): the kernel's line put back."""
    for name in ("sda", "nvme0n1"):
        path = tree.devdir(name) / "queue" / "scheduler"
        text = path.read_text()
        if "[" not in text:
            path.write_text(scheduler_line(ALL_SCHEDULERS, text.strip()))


def test_apply_and_rollback_switching_two_schedulers_load_no_openssl_executor_nor_shutil(
        empty_fake_tree: FakeTree, tmp_path: Path) -> None:
    tree = empty_fake_tree
    tree.add_disk("sda", rotational=True)
    tree.add_disk("nvme0n1", bus="nvme")
    (tmp_path / "two.yaml").write_text(PROFILE)
    (tmp_path / "fstab").write_text("/dev/sda1 /srv/data ext4 defaults 0 2\n")
    profile = ["-p", str(tmp_path / "two.yaml")]
    for argv in (("apply", *profile), ("rollback",)):  # the first checks the profile: its verdict kept
        imported, _ = _imported(tree, tmp_path, *argv)
        assert not (NEVER | CHECKER_LIBRARIES) & imported, (argv, (NEVER | CHECKER_LIBRARIES) & imported)
        _kernel_lines(tree)
    for argv in (("apply", *profile), ("rollback",)):
        imported, doc = _imported(tree, tmp_path, *argv)
        switched = {s["device"] for s in doc["settings"] if s["attribute"] == "scheduler" and s["status"] == "changed"}
        assert switched == {"sda", "nvme0n1"}, doc["settings"]  # two devices written at once: in threads
        assert not NEVER & imported, (argv, NEVER & imported)
        _kernel_lines(tree)
    imported, doc = _imported(tree, tmp_path, "mounts", "fix", *profile, "--fstab", str(tmp_path / "fstab"))
    assert doc["changed"] and not NEVER & imported, NEVER & imported  # a write of the fstab


def test_a_profile_the_schema_refuses_is_still_told_by_jsonschema(empty_fake_tree: FakeTree, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(PROFILE.replace("read_ahead_kb: 512", "read_ahead_kb: 99999"))
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPROFILEIMPORTTIME": "1"}
    result = run_process("--sysfs-root", str(empty_fake_tree.root), "--state-dir", str(tmp_path / "state"),
                         "plan", "-p", str(tmp_path / "bad.yaml"), env=full)
    assert result.code == 2, result.err
    assert "99999 is out of range: allowed 0 to 65536 KiB" in result.err
    imported = {line.rpartition("|")[2].strip() for line in result.lines if line.startswith("import time:")}
    assert "jsonschema" in imported and "yaml" not in imported  # Debian 12's jsonschema 4.10 has no referencing


@pytest.mark.skipif(shutil.which("parted") is None, reason="parted is not installed")
def test_align_reading_two_tables_at_once_loads_no_executor(empty_fake_tree: FakeTree, tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for name in ("sda", "sdb"):
        empty_fake_tree.add_disk(name, partitions=[(2048, 38912)])
        image = tmp_path / "dev" / name  # the disk's node: an image with a GPT, which parted reads as a disk
        with open(image, "wb") as f:
            f.truncate(32 << 20)
        subprocess.run(["parted", "-s", str(image), "mklabel", "gpt", "mkpart", "a", "1MiB", "20MiB"], check=True,
                       capture_output=True)
    imported, doc = _imported(empty_fake_tree, tmp_path, "align", "sda", "sdb",
                              env={"TUNECTL_DEV_ROOT": str(tmp_path / "dev")})
    assert [d["table"] for d in doc["disks"]] == ["gpt", "gpt"]
    assert not NEVER & imported, NEVER & imported


def test_udev_install_loads_no_shutil() -> None:
    """Installing rules needs root (not a unit test's): its module is what loaded shutil, for which()."""
    code = "import sys, tunectl.udev.install, tunectl.system.runner; print(sorted(set(sys.modules).intersection(NEVER)))"
    done = subprocess.run([sys.executable, "-c", f"NEVER = {sorted(NEVER)!r}\n{code}"], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("name", ["sh", "ls", "no-such-program-here", "bin/sh", "./x", "sub", "plain"])
def test_which_finds_what_shutil_which_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Empty entries (the working directory), repeated ones, a directory and a file that is not executable on the
    way, a name with a directory part."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "x").write_text("#!/bin/sh\n")
    (tmp_path / "x").chmod(0o755)
    (tmp_path / "plain").write_text("not a program\n")
    (tmp_path / "bin").mkdir()
    os.symlink("/bin/sh", tmp_path / "bin" / "sh")
    monkeypatch.chdir(tmp_path)
    for path in ("", ":", f"{tmp_path}:/usr/bin:/bin", f"/nonexistent::{tmp_path}/sub:/bin:/bin", f"{tmp_path}/bin"):
        assert which(name, path) == shutil.which(name, path=path), (name, path)
