"""A name typed as a path, walked the way root may follow it: to what it names, with the reason not to trust it.

The walk goes one component at a time from ``/`` without letting the kernel follow
any link. A symbolic link is followed only when root or the user owns it (another
user's is refused, whatever it leads to). Each directory passed is judged by
`trust.problem` (root's or the user's, writable by no one else: a sticky ``/tmp``
is writable by others too), and the first one that fails is kept in `Landed`: a
device node reached through one is not root's choice (a link or a node in another
user's directory, a hard link they made to a node in ``/tmp``), so the resolver
refuses it; a file or directory reached so keeps the rules of whatever reads it.

For a tree that describes another machine, the walk sees only its dev root, standing
for ``/dev``: a link that leads elsewhere is refused, never followed on this machine.
"""

from __future__ import annotations

import os
import stat

from tunectl.record import record
from tunectl.system import trust
from tunectl.system.roots import DEV, resolved_path

_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS


class Refused(Exception):
    """The name leads nowhere root may go: `message` says what and where, `hint` what to do.

    `code`: ``unknown-device`` (missing, not a directory on the way, outside the tree)
    or ``untrusted-link`` (another user's link decides where it leads).
    """

    def __init__(self, message: str, hint: str, code: str = "unknown-device", missing: bool = False) -> None:
        super().__init__(message)
        self.message, self.hint, self.code, self.missing = message, hint, code, missing


@record(frozen=True)
class Landed:
    """Where a name led: `path` with every link followed (as this machine names it, ``/dev/...`` for a tree's
    dev root), the lstat of what is there, and why it is not to be trusted as a device (empty: trusted)."""

    path: str
    st: os.stat_result
    untrusted: str = ""  # the first directory passed that another user can change, as `trust.problem` says it


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _outside(name: str, shown: str, dev_root: str) -> Refused:
    return Refused(f"{name}: leads outside {DEV} ({shown})",
                   f"this tree has only its dev root ({dev_root}); name a device under {DEV}")


def follow(name: str, dev_root: str) -> Landed:
    """Walk `name` (absolute, or relative to the working directory) as described above; `dev_root` is this run's
    dev root (``/dev``: the whole machine; another directory: a tree's, the only part of it that exists).

    Raises Refused: a link another user owns; a link loop; a missing component or one that is not a directory on
    the way; a name outside a tree's dev root.
    """
    tree = resolved_path(dev_root)
    real = tree == DEV

    def on_disk(parts: list[str]) -> str | None:
        if real:
            return "/" + "/".join(parts)
        return os.path.join(tree, *parts[1:]) if parts[:1] == ["dev"] else None

    todo = _parts(os.path.abspath(name) if real else name)
    at: list[str] = []  # the components reached so far: a path with no link on it
    st = os.lstat("/")
    why = trust.problem(st) if real else None
    untrusted = f"/: {why}" if why else ""  # a tree's dev root and the directories above it: `roots.check_trusted`
    links = 0
    part = ""
    while todo:
        part = todo.pop(0)
        if part == "..":
            at = at[:-1]
            continue
        here = at + [part]
        shown = "/" + "/".join(here)
        where = on_disk(here)
        if where is None:
            raise _outside(name, shown, dev_root)
        try:
            st = os.lstat(where)
        except FileNotFoundError:
            raise Refused(f"{name}: no such file or device node" + (f" ({shown} is missing)" if shown != name else ""),
                          "check the name: `lsblk` lists the block devices, `ls -l /dev/disk/by-id` their links",
                          missing=True) from None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise Refused(f"{name}: a symbolic link loop (at {shown})", "name the device itself (/dev/...)")
            if st.st_uid not in trust.trusted_uids():
                why = f"{shown}: a symbolic link owned by {trust.owner(st.st_uid)}, not root"
                raise Refused(why if shown == name else f"{name}: {why}", "root follows only links that root owns "
                              "(a user must not decide what root reads or writes); name the device or file itself "
                              "(/dev/..., or a link udev made under /dev/disk)", "untrusted-link")
            target = os.readlink(where)
            if target.startswith("/"):
                at = []
            todo = _parts(target) + todo
            continue
        if todo:
            if not stat.S_ISDIR(st.st_mode):
                raise Refused(f"{name}: {shown} is {trust.kind(st.st_mode)}, not a directory",
                              "check the name: `lsblk` lists the block devices")
            why = trust.problem(st)
            if why and not untrusted:
                untrusted = f"{shown}: {why}"
        at = here
    shown = "/" + "/".join(at)
    where = on_disk(at)
    if where is None:
        raise _outside(name, shown, dev_root)
    return Landed(shown, st if part != ".." else os.lstat(where), untrusted)
