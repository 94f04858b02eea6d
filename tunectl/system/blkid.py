"""The blkid edge: which block device holds a filesystem tag, read from the superblocks themselves.

udev's database and `/dev/disk/by-*` links appear only once udev has probed a new
filesystem (`mkfs` on a loop device, a container without udevd); blkid reads the
superblock and does not wait for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tunectl.system import runner

# `blkid -o export` writes a value's shell-special characters behind a backslash (util-linux, safe_print)
_ESCAPED = re.compile(r"\\(.)", re.S)
_TAGS = ("UUID", "LABEL", "PARTUUID", "PARTLABEL")


def all_tags(run: Callable[..., runner.Completed]) -> dict[tuple[str, str], list[str]]:
    """Every (tag, value) blkid finds on this machine -> the device paths that carry it, from one blkid run (a
    20,000-line fstab ran one blkid a tag). Empty when blkid is missing or fails (no answer)."""
    try:
        done = run(["blkid", "-o", "export"], timeout=60, check=False)
    except runner.CommandError:
        return {}
    found: dict[tuple[str, str], list[str]] = {}
    if done.returncode not in (0, 2):  # 2: no device has any tag
        return found
    for block in done.stdout.split("\n\n"):
        fields = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        dev = _ESCAPED.sub(r"\1", fields.get("DEVNAME", ""))
        if not dev.startswith("/dev/"):
            continue
        for tag in _TAGS:
            if tag in fields:
                found.setdefault((tag, _ESCAPED.sub(r"\1", fields[tag])), []).append(dev)
    return found
