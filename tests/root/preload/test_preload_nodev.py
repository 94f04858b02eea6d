"""The replay's look before each open, on a real nodev mount (the unit tests fake the mount flag).

A listed name that a named pipe or a device node replaced since collect: on a mount that allows devices it is
looked at (not followed) and refused unopened; in a root-only directory on a nodev mount the look is left out,
and then the kernel refuses to open a device node at all (EACCES, its driver never sees it) and a named pipe
opens at once (O_NONBLOCK) and is refused by the fstat before any read. Which names were opened is watched with
inotify (IN_OPEN) on the directory. The list's device is flash (rotational 0): no inode pass looks first.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.attacker import Opens
from tests.harness import run_process
from tests.loopdev import loop_devices

pytestmark = pytest.mark.root

FILES = ["a", "b", "pipe", "node", "c"]


@contextmanager
def nodev_mount(mnt: Path, *source: str) -> Iterator[Callable[[str], None]]:
    """`source` (mount's arguments before the mount point) mounted nodev at `mnt` (made here), and remount(options)
    while it stands; unmounted however the caller ends (lazily when still busy)."""
    mnt.mkdir()
    subprocess.run(["mount", "-o", "nodev", *source, str(mnt)], check=True, capture_output=True)
    try:
        def remount(options: str) -> None:
            subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], check=True, capture_output=True)

        yield remount
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        if os.path.ismount(mnt):  # still busy: detach it (a loop device then goes when it is let go)
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


@pytest.fixture
def mounted(tmp_path: Path):
    """(mount point, remount(options)) of a fresh ext4 on a flash loop device of its own, mounted nodev; the
    mount is undone and the device detached however the test ends."""
    with loop_devices(tmp_path, [{"rotational": 0, "size_mb": 32}]) as (name,):
        dev = f"/dev/{name}"
        subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
        with nodev_mount(tmp_path / "mnt", "-t", "ext4", dev) as remount:
            yield tmp_path / "mnt", remount


def _replay(lst: Path, watch: Opens) -> tuple[dict, list[str]]:
    """The replay as its own process (a named pipe opened blocking would hang it: the timeout fails the test),
    its document and the names opened in the watched directory meanwhile."""
    watch.take()
    done = run_process("--json", "preload", "replay", str(lst), timeout=60)
    assert done.code == 0, done.err  # changed files are reported, not an error (exit 0)
    return done.doc, watch.take()


def test_a_pipe_or_device_node_swapped_in_on_a_real_nodev_mount_is_never_read(tmp_path: Path, mounted) -> None:
    mnt, remount = mounted
    d = mnt / "d"
    d.mkdir(mode=0o755)
    for name in FILES:
        (d / name).write_bytes(os.urandom(8192))
    os.sync()
    lst = tmp_path / "d.list"
    done = run_process("-q", "preload", "collect", str(d), "-o", str(lst))
    assert done.code == 0, done.err
    os.unlink(d / "pipe")
    os.mkfifo(d / "pipe", 0o644)
    os.unlink(d / "node")
    os.mknod(d / "node", 0o644 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers: harmless were it opened
    assert os.statvfs(d).f_flag & os.ST_NODEV
    watch = Opens(d)
    try:
        doc, opened = _replay(lst, watch)
        skipped = {s["path"]: s for s in doc["skipped"]}
        assert doc["files"] == 3 and set(skipped) == {str(d / "pipe"), str(d / "node")}, doc
        assert all(s["status"] == "changed" for s in skipped.values()), skipped
        assert "character device" in skipped[str(d / "node")]["reason"], skipped
        # the look was left out: the pipe was opened (at once, O_NONBLOCK) and refused by the fstat; the
        # device node's open was refused by the kernel (nodev), so it never opened either
        assert sorted(opened) == ["a", "b", "c", "pipe"], opened

        remount("dev")  # the same directory on a mount that allows devices: the look stays
        assert not os.statvfs(d).f_flag & os.ST_NODEV
        doc, opened = _replay(lst, watch)
        skipped = {s["path"]: s for s in doc["skipped"]}
        assert doc["files"] == 3 and set(skipped) == {str(d / "pipe"), str(d / "node")}, doc
        assert "named pipe" in skipped[str(d / "pipe")]["reason"], skipped
        assert "character device" in skipped[str(d / "node")]["reason"], skipped
        assert sorted(opened) == ["a", "b", "c"], opened  # neither the pipe nor the node was opened
    finally:
        watch.close()
