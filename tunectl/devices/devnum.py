"""A device number (MAJ:MIN) to its block device: the whole disk's queue, the /dev node.

For callers that hold only the MAJ:MIN of a file's filesystem (a preload list
records files by it) and must stay cheap: `preload replay` runs at boot with a
fixed start-up budget, so this walks the one device's sysfs entry instead of
reading the `DeviceGraph`, and imports nothing beyond `os`. Everything that
names devices (kernel names, links, tags, paths) goes through `resolve.Resolver`.

API::

    queue_dir(sysfs, "8:1")           # "block/sda/queue" (relative to the sysfs root): a partition's disk's
    node(sysfs, "/dev", "8:1")        # "/dev/sda1": DEVNAME from its uevent, else udev's /dev/block/8:1
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported on replay's path
if TYPE_CHECKING:
    from tunectl.system.sysfs import Sysfs


def queue_dir(sysfs: Sysfs, devnum: str) -> str | None:
    """The sysfs queue/ directory serving MAJ:MIN: its own, or a partition's parent disk's; None when neither."""
    base = f"dev/block/{devnum}"
    if sysfs.exists(f"{base}/queue"):
        return f"{base}/queue"
    if sysfs.exists(f"{base}/partition"):
        parent = os.path.dirname(sysfs.realpath(base))
        rel = os.path.relpath(parent, os.path.realpath(sysfs.root))
        if not rel.startswith(".."):
            return f"{rel}/queue"
    return None


def node(sysfs: Sysfs, dev_root: str, devnum: str) -> str:
    """The device node of MAJ:MIN: DEV/<DEVNAME from its uevent>, else DEV/block/MAJ:MIN (udev's link)."""
    for line in (sysfs.read_or(f"dev/block/{devnum}/uevent") or "").splitlines():
        if line.startswith("DEVNAME=") and ".." not in line:
            return os.path.join(dev_root, line[len("DEVNAME="):])
    return os.path.join(dev_root, "block", devnum)
