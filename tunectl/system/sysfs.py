"""The sysfs edge: every read and write of a kernel attribute goes through a Sysfs.

A Sysfs is bound to a root directory (the real sysfs on a live system, a fake tree in
tests) and only accepts relative paths without ``..``, so nothing a profile says
can make tunectl write outside that root.
"""

from __future__ import annotations

import errno
import os
import stat

from tunectl.errors import SysfsError
from tunectl.system import trust
from tunectl.system.termination import stop_not_said

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

_REASONS = {
    errno.EINVAL: "the kernel rejected the value (EINVAL)",
    errno.EACCES: "attribute is read-only or access denied (EACCES)",
    errno.EPERM: "not permitted (EPERM); run as root",
    errno.EROFS: "read-only file system (EROFS)",
    errno.ENOENT: "no such attribute; the device may have vanished (ENOENT)",
    errno.ENODEV: "the device vanished (ENODEV)",
    errno.ENXIO: "the device vanished (ENXIO)",
    errno.EBUSY: "the device is busy (EBUSY)",
}


def describe_errno(code: int) -> str:
    return _REASONS.get(code, os.strerror(code))


class Sysfs:
    """Attribute access below one root. Paths are relative, e.g. ``block/sda/queue/scheduler``.

    `confined` (a tree that is not the running kernel's /sys): an attribute is opened
    below the root only (a link out of it fails), never through a link at its last
    component, without blocking, and used only when it is a regular file root (or the
    user) owns: a tree cannot make tunectl read or truncate a file elsewhere.
    """

    def __init__(self, root: str | os.PathLike, confined: bool = False) -> None:
        base = os.fspath(root)
        if not base or "//" in base or base.endswith("/") or "/./" in base or base in (".", "..") \
                or base.startswith("./") or base.endswith("/."):
            from pathlib import Path  # only for a root to normalise: a boot replay does not import pathlib

            base = str(Path(base))
        self._base = base  # as str(Path(root)) spells it
        self.writes = 0
        self.confined = confined

    @property
    def root(self) -> Path:
        from pathlib import Path

        return Path(self._base)

    def _open(self, rel: str, flags: int) -> int:
        path = self._at(rel)
        if not self.confined:
            return os.open(path, flags | os.O_CLOEXEC)
        try:
            fd = trust.open_beneath(self._base, rel, flags | os.O_NONBLOCK)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EXDEV):
                raise SysfsError(rel, e.errno, "a symbolic link, not followed in a tree that is not /sys") from None
            raise
        st = os.fstat(fd)
        why = None if stat.S_ISREG(st.st_mode) else f"{trust.kind(st.st_mode)}, not an attribute file"
        if why is None and st.st_uid not in trust.trusted_uids():
            why = f"owned by uid {st.st_uid}, not root: not used in a tree that is not /sys"
        if why:
            os.close(fd)
            raise SysfsError(rel, errno.EACCES, why)
        return fd

    def _at(self, rel: str) -> str:
        """The path of `rel` below the root, as a string (a discovery makes thousands: no Path objects)."""
        if rel.startswith("/") or ".." in rel.split("/") or "\0" in rel:
            raise ValueError(f"refusing sysfs path outside the root: {rel!r}")
        return f"{self._base}/{rel}" if rel else self._base

    def path(self, rel: str) -> Path:
        from pathlib import Path

        return Path(self._at(rel))

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._at(rel))

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self._at(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def readlink(self, rel: str) -> str | None:
        try:
            return os.readlink(self._at(rel))
        except OSError:
            return None

    def realpath(self, rel: str) -> str:
        return os.path.realpath(self._at(rel))

    def read(self, rel: str) -> str:
        """The attribute's text without the trailing newline; SysfsError if unreadable."""
        try:
            with open(self._open(rel, os.O_RDONLY), "rb") as f:
                return f.read().decode("utf-8", "replace").rstrip("\n")
        except SysfsError:
            raise
        except OSError as e:
            code = e.errno or errno.EIO
            raise SysfsError(rel, code, describe_errno(code)) from None

    def read_or(self, rel: str, default: str | None = None) -> str | None:
        try:
            return self.read(rel)
        except SysfsError:
            return default

    def may_write(self, rel: str) -> bool:
        """This process may open the attribute for writing (its effective uid and capabilities, as open(2) decides).

        False for a read-only attribute too; True when the attribute is missing (the write then says why).
        """
        path = self._at(rel)
        if not os.path.lexists(path):
            return True
        try:
            return os.access(path, os.W_OK, effective_ids=True, follow_symlinks=False)
        except NotImplementedError:
            return True

    def denied(self, rel: str) -> bool:
        """The attribute is writable (its mode has a write bit) but not by this process: a permission problem,
        not a read-only attribute (EACCES means both)."""
        try:
            writable = bool(os.lstat(self._at(rel)).st_mode & 0o222)
        except OSError:
            return False
        return writable and not self.may_write(rel)

    def write(self, rel: str, value: str) -> None:
        """Write one value with a single write(2), as the kernel's store handlers expect.

        O_TRUNC is a no-op on sysfs but keeps plain files in test trees exact.
        """
        stop_not_said()  # a stop Python dropped comes before the change, not after it
        data = value.encode()
        try:
            fd = self._open(rel, os.O_WRONLY | os.O_TRUNC)
        except SysfsError:
            raise
        except OSError as e:
            code = e.errno or errno.EIO
            raise SysfsError(rel, code, describe_errno(code)) from None
        try:
            os.write(fd, data)
        except OSError as e:
            code = e.errno or errno.EIO
            raise SysfsError(rel, code, describe_errno(code)) from None
        finally:
            os.close(fd)
            self.writes += 1
