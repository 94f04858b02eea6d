"""The loop device edge: which file a loop device is attached to, by inode (what no rename or unlink changes).

sysfs names the backing file by path only; a rename shows the new path, an
unlink appends " (deleted)". LOOP_GET_STATUS64 answers the file's device and
inode, kept by the kernel however the path changed. The node is opened
read-only, without following a link, and used only if it is the block device
`devnum` names.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct

LOOP_GET_STATUS64 = 0x4C05
_INFO64 = 232  # sizeof(struct loop_info64)


def _decode(dev: int) -> str:
    """The kernel's huge_encode_dev (lo_device) as "major:minor"."""
    return f"{(dev & 0xFFF00) >> 8}:{(dev & 0xFF) | ((dev >> 12) & 0xFFF00)}"


def backing_inode(name: str, devnum: str, backing: str) -> str:
    """"major:minor:inode" of the file loop device `name` (`devnum` "maj:min") is attached to, or "" if unknown.

    The ioctl when this process may open the node (root); else, for a backing
    path that is not deleted, a stat of it (a user who cannot open the node can
    write nothing either, so the weaker proof only ever decides what is shown).
    """
    try:
        fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if stat.S_ISBLK(st.st_mode) and f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" == devnum:
                info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(_INFO64))
                device, inode = struct.unpack_from("=QQ", info)
                return f"{_decode(device)}:{inode}"
        except OSError:
            pass
        finally:
            os.close(fd)
    if not backing or backing.endswith(" (deleted)"):
        return ""
    try:
        st = os.stat(backing)
    except OSError:
        return ""
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"
