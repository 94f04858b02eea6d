"""The mountinfo edge: live mounts from ``<proc>/self/mountinfo``, read through an injected root.

Format (proc(5)): ``36 35 98:0 /root /mnt/point rw,noatime shared:1 - ext4 /dev/sda1 rw,errors=continue``.
Per-mount flags (nosuid, noatime, ...) come before the ``-``, superblock options after it; both
are escaped octally (``\\040`` for a space).
"""

from __future__ import annotations

import errno
import os
import re
import stat

from tunectl.errors import TunectlError
from tunectl.record import record
from tunectl.system.roots import PROC
from tunectl.system.trust import open_beneath

_ESCAPE = r"\\([0-7]{3})"  # compiled at first use (re keeps it): most runs never need it


def unescape(text: str) -> str:
    """fstab and mountinfo octal escapes: ``\\040`` space, ``\\011`` tab, ``\\134`` backslash."""
    return re.sub(_ESCAPE, lambda m: chr(int(m.group(1), 8)), text)


def escape(text: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)


def split_options(text: str | None) -> list[str]:
    """An options field -> tokens; commas inside double quotes (SELinux contexts) do not split."""
    if not text:
        return []
    out, cur, quoted = [], [], False
    for c in text:
        if c == '"':
            quoted = not quoted
        if c == "," and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return [t for t in out if t]



@record(frozen=True)
class Mount:
    mount_id: int
    devnum: str  # major:minor of the filesystem (0:N for filesystems without a block device)
    root: str  # the subtree mounted: "/" unless it is a bind mount of a directory
    target: str
    vfs_options: tuple[str, ...]
    fstype: str
    source: str
    super_options: tuple[str, ...]

    @property
    def options(self) -> list[str]:
        """Per-mount and superblock options as one list (``rw`` once)."""
        out = list(self.vfs_options)
        out += [t for t in self.super_options if t not in ("rw", "ro") and t not in out]
        return out

    @property
    def is_bind(self) -> bool:
        return self.root != "/"

    def to_json(self) -> dict:
        return {"target": self.target, "source": self.source, "fstype": self.fstype, "devnum": self.devnum,
                "options": self.options}


def parse(text: str) -> tuple[list[Mount], list[str]]:
    """Mounts, and one problem per line that is not a mountinfo record."""
    mounts, problems = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            mounts.append(Mount(int(fields[0]), fields[2], unescape(fields[3]), unescape(fields[4]),
                                tuple(split_options(unescape(fields[5]))), unescape(fields[sep + 1]),
                                unescape(fields[sep + 2]), tuple(split_options(unescape(fields[sep + 3])))))
        except (ValueError, IndexError):
            problems.append(f"mountinfo line {lineno} is not a mount record: {line[:80]!r}")
    return mounts, problems


def read_mounts(root: str | None) -> tuple[list[Mount], list[str]]:
    if root is None:
        return [], []
    path = os.path.join(root, "self", "mountinfo")
    try:
        if os.path.realpath(root) == PROC:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        else:  # a fake /proc: below its root, no link at the end, never a pipe
            with open(open_beneath(root, "self/mountinfo", os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", path)
                text = f.read().decode("utf-8", "replace")
    except OSError as e:
        raise TunectlError(f"cannot read {path}: {e.strerror}",
                           hint="point TUNECTL_PROC_ROOT at a directory holding self/mountinfo") from None
    return parse(text)


def find(mounts: list[Mount], target: str) -> Mount | None:
    """The mount visible at `target`: the last one mounted there."""
    found = None
    for m in mounts:
        if m.target == target:
            found = m
    return found


def containing(mounts: list[Mount], path: str) -> Mount | None:
    """The mount a path lives on: the longest mountpoint that is a prefix of it (the last such one)."""
    best = None
    for m in mounts:
        t = m.target.rstrip("/") or "/"
        inside = path == t or t == "/" or path.startswith(t + "/")
        if inside and (best is None or len(t) >= len(best.target.rstrip("/") or "/")):
            best = m
    return best
