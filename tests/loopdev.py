"""Real loop devices for root-only tests: created per test, always detached afterwards."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tunectl.attributes import QUEUE
from tunectl.system.blockio import BLKFLSBUF


def sysfs_read(name: str, attr: str) -> str:
    return Path(f"/sys/block/{name}/{attr}").read_text().strip()


def sysfs_write(name: str, attr: str, value: str) -> None:
    Path(f"/sys/block/{name}/{attr}").write_text(value)


def active_scheduler(name: str) -> str:
    text = sysfs_read(name, "queue/scheduler")
    return next(t[1:-1] for t in text.split() if t.startswith("["))


def snapshot(name: str) -> dict[str, str]:
    """Every attribute tunectl may manage on this device, as the kernel shows it."""
    q = Path(f"/sys/block/{name}/queue")
    snap = {"scheduler": active_scheduler(name)}
    for attr in QUEUE:  # all 13: a rollback that forgot io_poll or write_cache must show
        if (q / attr).exists():
            snap[attr] = (q / attr).read_text().strip()
    iosched = q / "iosched"
    if iosched.is_dir():
        for knob in sorted(os.listdir(iosched)):
            snap[f"iosched/{knob}"] = (iosched / knob).read_text().strip()
    return snap


def restore(name: str, snap: dict[str, str]) -> None:
    """Put back what snapshot() saw: a loop device keeps its queue settings after detach."""
    q = Path(f"/sys/block/{name}/queue")
    for attr, value in sorted(snap.items(), key=lambda kv: (kv[0] != "scheduler", kv[0] == "read_ahead_kb")):
        with contextlib.suppress(OSError):
            (q / attr).write_text(value)


# <linux/loop.h>: LOOP_CTL_REMOVE deletes a detached loop device, so the next one is made fresh.
LOOP_CTL_REMOVE = 0x4C81


def cannot_discard_for_good(name: str) -> bool:
    """True when a loop device's discard was switched off by hand and stays off.

    Kernel quirk (seen on 6.18): writing 0 to queue/discard_max_bytes sets a user limit that
    outlives detach and the next attach, and with it discard_granularity reads 0, so no value
    but 0 can be written back. Only deleting the device clears it.
    """
    return sysfs_read(name, "queue/discard_max_bytes") == "0" and sysfs_read(name, "queue/discard_max_hw_bytes") != "0"


def stale_partitions(name: str) -> list[str]:
    """Partitions a freshly attached (unpartitioned) loop device still shows from an earlier life.

    Partitions outlive `losetup -d` unless `partx -d` ran first; a test that crashed in between
    leaves /sys/block/loopN/loopNpM behind, and discovery would see a disk that is not there.
    """
    return sorted(entry.name for entry in Path(f"/sys/block/{name}").iterdir() if entry.name.startswith(f"{name}p"))


def remove_loop_device(name: str) -> None:
    """Delete a detached loop device (best effort: it may still be open for a moment)."""
    with contextlib.suppress(OSError):
        fd = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, LOOP_CTL_REMOVE, int(name[len("loop"):]))
        finally:
            os.close(fd)


def attach(backing: Path, spec: dict) -> str:
    """losetup -f on a clean loop device: it can still discard and shows no stale partitions."""
    cmd = ["losetup", "-f", "--show"]
    if spec.get("direct_io"):
        cmd += ["--direct-io=on"]
    if spec.get("sector_size"):
        cmd += ["--sector-size", str(spec["sector_size"])]
    for _ in range(8):
        dev = subprocess.run(cmd + [str(backing)], check=True, capture_output=True, text=True).stdout.strip()
        name = os.path.basename(dev)
        if not cannot_discard_for_good(name) and not stale_partitions(name):
            return name
        subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)
        remove_loop_device(name)
    raise RuntimeError(f"no clean loop device after 8 tries (last {name}); run 'losetup -D' and retry")


@contextlib.contextmanager
def loop_devices(tmp: Path, specs: list[dict]) -> Iterator[list[str]]:
    """Attach one loop device per spec ({'sector_size': 4096, 'rotational': 1, 'size_mb': 16}).

    'scheduler' and 'read_ahead_kb' are written after attaching, so the test starts from values it chose.

    'direct_io': True attaches with --direct-io=on (reads reach the backing file's disk, not
    its page cache); 'random_data': True fills the backing file with random bytes.

    On exit every device gets back the settings it had when attached, then is detached.
    """
    names: list[str] = []
    originals: dict[str, dict[str, str]] = {}
    try:
        for i, spec in enumerate(specs):
            backing = tmp / f"loop{i}.img"
            with open(backing, "wb") as f:
                if spec.get("random_data"):
                    for _ in range(spec.get("size_mb", 16)):
                        f.write(os.urandom(1 << 20))
                f.truncate(spec.get("size_mb", 16) << 20)
            name = attach(backing, spec)
            names.append(name)
            originals[name] = snapshot(name)
            # A detached loop device keeps its queue settings for the next attach: a test sets every value it
            # depends on. In the kernel's order: writing rotational re-derives read-ahead (6.17+), so it goes first.
            if "rotational" in spec:
                sysfs_write(name, "queue/rotational", str(spec["rotational"]))
            if "scheduler" in spec:
                sysfs_write(name, "queue/scheduler", spec["scheduler"])
            if "read_ahead_kb" in spec:
                sysfs_write(name, "queue/read_ahead_kb", str(spec["read_ahead_kb"]))
        yield names
    finally:
        for name in names:
            restore(name, originals[name])
            poisoned = cannot_discard_for_good(name)
            subprocess.run(["losetup", "-d", f"/dev/{name}"], check=False, capture_output=True)
            if poisoned:
                remove_loop_device(name)


def remount_cold(dev: str, mnt: Path, *mount_options: str) -> None:
    """Cold again, for this file system alone: unmount (drops its cached inodes, directories and file pages,
    which a walk would otherwise not read again), drop the block device's own cache (BLKFLSBUF), mount
    again with `mount_options`; never the machine's caches."""
    subprocess.run(["umount", str(mnt)], check=True, capture_output=True)
    fd = os.open(dev, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, BLKFLSBUF, 0)
    finally:
        os.close(fd)
    subprocess.run(["mount", *mount_options, dev, str(mnt)], check=True, capture_output=True)
