"""The udev database edge: properties udev recorded for a device.

udev keeps one file per device in ``/run/udev/data/b<major>:<minor>``; ``E:`` lines
are properties (ID_SERIAL, ID_WWN, ID_BUS, DM_UUID...), ``S:`` lines are /dev
symlinks. Reading the file directly needs no udev context and honours an
injected root, so tests can ship a fake database next to a fake sysfs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


def decode(text: str) -> str:
    """udev's *_ENC properties and /dev/disk/by-* names escape blanks and specials as \\xNN."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


@dataclass
class UdevRecord:
    properties: dict[str, str] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)


class UdevDb:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def record(self, devnum: str) -> UdevRecord:
        rec = UdevRecord()
        if not devnum or "/" in devnum:
            return rec
        try:
            text = (self.root / f"b{devnum}").read_text(errors="replace")
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
