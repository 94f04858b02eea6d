"""A name typed as a path, walked the way root may follow it: to what it names, with the reason not to trust it.

The walk is `trust.walk`, the one walk of every path root follows links on: one
component at a time from ``/``, each step from a descriptor of the directory before
it, without letting the kernel follow any link. A symbolic link is followed only when root or the user owns it (another
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

import errno

from tunectl.system import trust
from tunectl.system.roots import DEV, resolved_path


class Refused(Exception):
    """The name leads nowhere root may go: `message` says what and where, `hint` what to do.

    `code`: ``unknown-device`` (missing, not a directory on the way, outside the tree)
    or ``untrusted-link`` (another user's link decides where it leads). `gone`: the path that is missing (the
    name, or a directory on its way), when that is why; `missing` says whether it is.
    """

    def __init__(self, message: str, hint: str, code: str = "unknown-device", gone: str = "") -> None:
        super().__init__(message)
        self.message, self.hint, self.code, self.gone = message, hint, code, gone

    @property
    def missing(self) -> bool:
        return bool(self.gone)


MISSING_HINT = "check the name: `lsblk` lists the block devices, `ls -l /dev/disk/by-id` their links"
Landed = trust.Landed  # where a name led: `path`, `st` (the look at it, not followed), `untrusted`


def _outside(name: str, shown: str, dev_root: str) -> Refused:
    return Refused(f"{name}: leads outside {DEV} ({shown})",
                   f"this tree has only its dev root ({dev_root}); name a device under {DEV}")


def follow(name: str, dev_root: str) -> Landed:
    """Walk `name` (absolute, or relative to the working directory) as described above (`trust.walk`); `dev_root`
    is this run's dev root (``/dev``: the whole machine; another directory: a tree's, the only part of it that
    exists).

    Raises Refused: a link another user owns; a link loop; a missing component or one that is not a directory on
    the way; a name outside a tree's dev root.
    """
    tree = resolved_path(dev_root)
    try:
        return trust.walk(name, None if tree == DEV else tree)
    except trust.OthersLink as e:
        raise Refused(f"{name}: {e.about(name)}", "root follows only links that root "
                      "owns (a user must not decide what root reads or writes); name the device or file itself "
                      "(/dev/..., or a link udev made under /dev/disk)", "untrusted-link") from None
    except trust.Untrusted as e:  # a directory swapped between two steps
        raise Refused(f"{name}: {e.message}", e.hint, "untrusted-link") from None
    except OSError as e:
        shown = e.filename
        if e.errno == errno.ENOENT:
            raise Refused(f"{name}: no such file or device node" + (f" ({shown} is missing)" if shown != name else ""),
                          MISSING_HINT, gone=shown or name) from None
        if e.errno == errno.ELOOP:
            raise Refused(f"{name}: a symbolic link loop (at {shown})", "name the device itself (/dev/...)") from None
        if e.errno == errno.ENOTDIR:
            raise Refused(f"{name}: {shown} is {e.strerror}", "check the name: `lsblk` lists the block devices") \
                from None
        if e.errno == errno.EXDEV:
            raise _outside(name, shown, dev_root) from None
        raise
