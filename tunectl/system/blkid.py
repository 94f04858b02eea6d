"""The blkid edge: which block device holds a filesystem tag, read from the superblocks themselves.

udev's database and `/dev/disk/by-*` links appear only once udev has probed a new
filesystem (`mkfs` on a loop device, a container without udevd); blkid reads the
superblock and does not wait for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tunectl.system import runner


def device_with(run: Callable[..., runner.Completed], tag: str, value: str) -> str | None:
    """The kernel name of the one device whose `tag` (UUID, LABEL, PARTUUID, PARTLABEL) is `value`, or None
    (none, several, or no blkid)."""
    try:
        done = run(["blkid", "-t", f"{tag}={value}", "-o", "device"], timeout=30, check=False)
    except runner.CommandError:
        return None
    paths = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(paths) != 1 or not paths[0].startswith("/dev/"):
        return None
    return os.path.basename(os.path.realpath(paths[0]))
