"""The blkid edge: which block device holds a filesystem tag, read from the superblocks themselves.

udev's database and `/dev/disk/by-*` links appear only once udev has probed a new
filesystem (`mkfs` on a loop device, a container without udevd); blkid reads the
superblock and does not wait for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tunectl.system import runner

# `blkid -o export` writes a value's shell-special characters behind a backslash, and before that each byte of
# 128 or more as "M-" and its low 7 bits, each control character as "^" and its letter (util-linux, safe_print;
# `-d` prints the bytes raw, newlines too, so a label could print a line of its own). Undone only where the print
# says one value: no "^" or "M-" in it (a literal "M-A" prints as the byte 0xC1 does).
_ESCAPED = re.compile(r"\\(.)", re.S)
_TAGS = ("UUID", "LABEL", "PARTUUID", "PARTLABEL")


def one_print(value: str) -> bool:
    """Whether `value` is printed by `blkid -o export` as only itself could be: printable ASCII with no "^" or
    "M-" (a UUID, most labels). Others are asked of blkid one by one (`devices_with`)."""
    return value.isascii() and value.isprintable() and "^" not in value and "M-" not in value


def all_tags(run: Callable[..., runner.Completed]) -> dict[tuple[str, str], list[str]]:
    """Every (tag, value) blkid finds on this machine whose print is `one_print` -> the device paths that carry
    it, from one blkid run (a 20,000-line fstab ran one blkid a tag). Empty when blkid is missing or fails (no
    answer)."""
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
            value = _ESCAPED.sub(r"\1", fields[tag]) if tag in fields else None
            if value is not None and one_print(value):  # another print may stand for several values: not kept
                found.setdefault((tag, value), []).append(dev)
    return found


def devices_with(run: Callable[..., runner.Completed], tag: str, value: str) -> list[str]:
    """The device paths whose `tag` is `value`, bytes compared by blkid itself (`-t`): for a value the export
    print cannot say (`one_print`). Empty when none, or blkid is missing or fails."""
    try:
        done = run(["blkid", "-t", f"{tag}={value}", "-o", "device"], timeout=30, check=False)
    except runner.CommandError:
        return []
    paths = [line for line in done.stdout.splitlines() if line.strip()]
    return paths if done.returncode == 0 and all(p.startswith("/dev/") for p in paths) else []
