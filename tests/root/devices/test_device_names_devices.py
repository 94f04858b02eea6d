"""Every form of a device name on a real loop device, and the links root must not follow (root only).

A name is walked to its block device node and read by st_rdev, so any name of the node
works; a link is followed only when root owns it and every directory up to it is root's
and writable by no one else. nobody (through setpriv) plants the hostile links.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import run_process
from tests.loopdev import loop_devices

pytestmark = pytest.mark.root

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[str]:
    """A loop device with one GPT partition (loopNp1); the partition is deleted before the device is detached."""
    with loop_devices(tmp_path, [{"size_mb": 16}]) as (name,):
        node = f"/dev/{name}"
        try:
            subprocess.run(["parted", "-s", node, "mklabel", "gpt", "mkpart", "p1", "1MiB", "100%"], check=True,
                           capture_output=True, timeout=60)
            subprocess.run(["partx", "-u", node], check=False, capture_output=True, timeout=60)
            assert os.path.exists(f"/sys/block/{name}/{name}p1"), "the kernel made no partition"
            yield name
        finally:
            subprocess.run(["partx", "-d", node], check=False, capture_output=True, timeout=60)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A directory of root's in /run (root's, 0755, not writable by others): where root-made links are trusted."""
    d = Path(tempfile.mkdtemp(prefix="tunectl-devnames-", dir="/run"))
    try:
        d.chmod(0o755)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def status(tmp_path: Path, *refs: str) -> tuple[int, list[str], str]:
    done = run_process("--state-dir", str(tmp_path / "state"), "status", "-p", "default", "-o", "device", "-n",
                       *refs, timeout=120)
    return done.code, done.out.split(), done.err


def test_every_form_of_a_name_reaches_the_device(loop: str, run_dir: Path, tmp_path: Path) -> None:
    devnum = Path(f"/sys/block/{loop}/dev").read_text().strip()
    os.symlink(f"/dev/{loop}", run_dir / "disk")  # a link root made outside /dev (as /dev/VG/LV, /dev/mapper/NAME)
    os.symlink("disk", run_dir / "alias")  # and a link to that link
    (run_dir / "sub").mkdir(mode=0o755)
    os.symlink(f"../../../dev/{loop}p1", run_dir / "sub" / "part")
    os.mknod(run_dir / "node", stat.S_IFBLK | 0o600, os.makedev(*map(int, devnum.split(":"))))  # any node of it
    forms = [loop, f"/dev/{loop}", f"/dev/../dev/{loop}", f"/dev//{loop}/", f"/sys/block/{loop}",
             f"/sys/class/block/{loop}/", f"/sys/dev/block/{devnum}", devnum, f"{loop}p1", f"/dev/{loop}p1",
             f"/sys/block/{loop}/{loop}p1", str(run_dir / "disk"), str(run_dir / "alias"),
             str(run_dir / "sub" / "part"), f"{run_dir}/sub/../alias", str(run_dir / "node")]
    for ref in forms:
        code, out, err = status(tmp_path, ref)
        assert (code, out) == (0, [loop]), (ref, err)


@pytest.mark.parametrize("ref, words", [
    ("/dev/null", "/dev/null is a character device, not a block device"),
    ("/dev/tunectl-no-such-node", "/dev/tunectl-no-such-node: no such file or device node"),
    ("tunectl-no-such-name", "no block device 'tunectl-no-such-name'"),
    ("4095:4095", "no block device 4095:4095 (major:minor)"),
])
def test_what_is_no_block_device_is_refused_with_the_reason(tmp_path: Path, ref: str, words: str) -> None:
    done = run_process("--state-dir", str(tmp_path / "state"), "--json", "status", "-p", "default", ref)
    assert done.code == 2, done.err
    error = done.doc["error"]
    assert words in error["message"] and error["hint"] and error["code"] == "unknown-device", error


def test_a_link_loop_is_refused(run_dir: Path, tmp_path: Path) -> None:
    os.symlink("b", run_dir / "a")
    os.symlink("a", run_dir / "b")
    code, _, err = status(tmp_path, str(run_dir / "a"))
    assert code == 2 and "a symbolic link loop" in err, err


def test_a_link_nobody_made_is_never_followed(loop: str, run_dir: Path, tmp_path: Path) -> None:
    theirs = run_dir / "nobody"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    planted = theirs / "disk"
    subprocess.run([*AS_NOBODY, "ln", "-s", f"/dev/{loop}", str(planted)], check=True, timeout=30)
    assert os.lstat(planted).st_uid == NOBODY
    done = run_process("--state-dir", str(tmp_path / "state"), "--json", "plan", "-p", "default", str(planted))
    assert done.code == 2, done.err
    error = done.doc["error"]
    assert error["code"] == "untrusted-link" and error["where"] == str(planted), error
    assert f"{planted}: a symbolic link owned by nobody (uid {NOBODY}), not root" in error["message"], error
    assert "a user must not decide what root reads or writes" in error["hint"]
    # root's own link, but in nobody's directory: nobody could swap it for another; refused as well
    os.unlink(planted)
    os.symlink(f"/dev/{loop}", planted)
    code, _, err = status(tmp_path, str(planted))
    assert code == 2 and f"{theirs}: owned by nobody (uid {NOBODY}), not root" in err, err
    # and a node there (nobody cannot mknod, but a node may be moved or hard-linked in): refused
    os.unlink(planted)
    devnum = Path(f"/sys/block/{loop}/dev").read_text().strip()
    os.mknod(planted, stat.S_IFBLK | 0o600, os.makedev(*map(int, devnum.split(":"))))
    code, _, err = status(tmp_path, str(planted))
    assert code == 2 and "a device reached through a directory another user can change" in err, err


def test_a_node_in_tmp_is_refused_even_with_the_sticky_bit(loop: str, tmp_path: Path) -> None:
    """/tmp is root's and sticky, but anyone may create names in it: a node there is not root's choice."""
    with contextlib.ExitStack() as stack:
        d = Path(tempfile.mkdtemp(prefix="tunectl-devnames-"))
        stack.callback(shutil.rmtree, d, True)
        assert os.stat(d.parent).st_mode & 0o1777 == 0o1777, d.parent
        devnum = Path(f"/sys/block/{loop}/dev").read_text().strip()
        os.mknod(d / "node", stat.S_IFBLK | 0o600, os.makedev(*map(int, devnum.split(":"))))
        os.symlink(f"/dev/{loop}", d / "link")
        for ref in (d / "node", d / "link"):
            code, _, err = status(tmp_path, str(ref))
            assert code == 2 and f"{d.parent}: mode 1777: writable by others" in err, (ref, err)


def test_other_commands_take_the_same_names(loop: str, run_dir: Path, tmp_path: Path) -> None:
    os.symlink(f"/dev/{loop}", run_dir / "disk")
    for argv in (["plan", "-p", "default"], ["verify", "-p", "default"], ["align"], ["explain"]):
        for ref in (f"/dev/../dev/{loop}", str(run_dir / "disk")):
            done = run_process("--state-dir", str(tmp_path / "state"), "--json", *argv, ref, timeout=120)
            assert done.code in (0, 1), (argv, ref, done.err)
            assert loop in done.out, (argv, ref, done.out)
