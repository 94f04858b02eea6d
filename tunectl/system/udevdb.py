"""The udev database edge: properties udev recorded for a device.

udev keeps one file per device in ``/run/udev/data/b<major>:<minor>``; ``E:`` lines
are properties (ID_SERIAL, ID_WWN, ID_BUS, DM_UUID...), ``S:`` lines are /dev
symlinks. Reading the file directly needs no udev context and honours an
injected root, so tests can ship a fake database next to a fake sysfs.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from tunectl.system import trust


def decode(text: str) -> str:
    """udev's *_ENC properties and /dev/disk/by-* names escape blanks and specials as \\xNN."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


class UdevRecord:
    """One device's properties and /dev links (a plain class: dataclasses costs start-up every command pays)."""

    __slots__ = ("properties", "links")

    def __init__(self, properties: dict[str, str] | None = None, links: list[str] | None = None) -> None:
        self.properties: dict[str, str] = {} if properties is None else properties
        self.links: list[str] = [] if links is None else links

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UdevRecord) and (self.properties, self.links) == (other.properties, other.links)

    def __repr__(self) -> str:
        return f"UdevRecord(properties={self.properties!r}, links={self.links!r})"


class UdevDb:
    """`confined` (a database that is not the real /run/udev/data): a record is read only when it is a regular
    file below the root that root (or the user) owns, not through a link: a fake database cannot show a file
    of this machine nor make a read block."""

    def __init__(self, root: str | os.PathLike, confined: bool = False) -> None:
        self.root = Path(root)
        self.confined = confined

    def _read(self, name: str) -> str:
        if not self.confined:
            return (self.root / name).read_text(errors="replace")
        with open(trust.open_beneath(self.root, name, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in trust.trusted_uids():
                raise OSError(errno.EACCES, "not a regular file root owns", str(self.root / name))
            return f.read(1 << 20).decode("utf-8", "replace")

    def record(self, devnum: str) -> UdevRecord:
        rec = UdevRecord()
        if not devnum or "/" in devnum:
            return rec
        try:
            text = self._read(f"b{devnum}")
        except OSError:
            return rec
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key == "E":
                name, _, val = value.partition("=")
                rec.properties[name] = val
            elif key == "S":
                rec.links.append(value)
        return rec
