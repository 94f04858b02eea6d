"""From names users write to block devices: mount sources and paths -> kernel names -> whole disks.

``UUID=``, ``LABEL=``, ``PARTUUID=``, ``PARTLABEL=`` through the udev database
(``ID_FS_UUID`` ...) and then the ``/dev/disk/by-*`` links under an injected dev
root; ``/dev/mapper/*``, ``/dev/md/*`` and ``/dev/disk/by-*`` through udev's
recorded links, dm names in sysfs and the dev root; ``major:minor`` through
sysfs ``dev/block``. Partitions lead to their disk and stacked devices (dm, md)
through ``slaves/`` to the whole disks below.

`disks_under_path(ctx, path)` serves DEV arguments of plan/apply/verify/bench:
a mountpoint or any path means the whole disks under its filesystem.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tunectl.errors import UsageError
from tunectl.system import mountinfo
from tunectl.system.udevdb import decode

DEFAULT_DEV = "/dev"

# fstab tag -> the udev property that carries it
TAGS = {"UUID": "ID_FS_UUID", "LABEL": "ID_FS_LABEL", "PARTUUID": "ID_PART_ENTRY_UUID",
        "PARTLABEL": "ID_PART_ENTRY_NAME"}
TAG_DIRS = {"UUID": "by-uuid", "LABEL": "by-label", "PARTUUID": "by-partuuid", "PARTLABEL": "by-partlabel"}


def dev_root(ctx) -> str | None:
    """TUNECTL_DEV_ROOT, else /dev on the real machine (never the real /dev for a fake sysfs tree)."""
    root = ctx.env.get("TUNECTL_DEV_ROOT")
    if root:
        return root
    return DEFAULT_DEV if os.path.realpath(str(ctx.sysfs.root)) == "/sys" else None


@dataclass
class Resolved:
    name: str | None  # kernel name of the block device (a partition, a disk, dm-N, mdN)
    problem: str = ""


class Resolver:
    """Resolution for one run: the udev database is indexed once, devices discovered once."""

    def __init__(self, ctx) -> None:
        from tunectl.tuning.discover import discover

        self.ctx = ctx
        self.sysfs = ctx.sysfs
        self.dev = dev_root(ctx)
        self.devices = {d.name: d for d in discover(ctx.sysfs, ctx.udev, ())}
        self.parents = {p.name: d.name for d in self.devices.values() for p in d.partitions}
        self._index: list[tuple[str, dict[str, str], list[str]]] | None = None

    # --- the udev database, all records: (kernel name, properties, links)
    def _records(self) -> list[tuple[str, dict[str, str], list[str]]]:
        if self._index is None:
            self._index = []
            try:
                files = sorted(os.listdir(self.ctx.udev.root))
            except OSError:
                files = []
            for f in files:
                if not f.startswith("b") or ":" not in f:
                    continue
                name = self.name_of_devnum(f[1:])
                if name is None:
                    continue
                rec = self.ctx.udev.record(f[1:])
                self._index.append((name, rec.properties, rec.links))
        return self._index

    def name_of_devnum(self, devnum: str) -> str | None:
        if not re.fullmatch(r"\d+:\d+", devnum or ""):
            return None
        link = self.sysfs.readlink(f"dev/block/{devnum}")
        return os.path.basename(link.rstrip("/")) if link else None

    def whole(self, name: str) -> str:
        """A partition's disk; a whole device itself."""
        return self.parents.get(name) or name

    def disks_below(self, name: str) -> list[str]:
        """The whole disks at the bottom of the stack under `name` (itself when it is one)."""
        from tunectl.tuning.plan import lower_disks

        top = self.whole(name)
        if top in self.devices and self.devices[top].slaves:
            return lower_disks(self.devices, top, self.parents)
        return [top] if top in self.devices else []

    def _from_dev_path(self, rel: str) -> str | None:
        for name, _props, links in self._records():
            if rel in links:
                return name
        if rel.startswith("mapper/"):
            for dev in self.devices.values():
                if dev.dm_name == rel[len("mapper/"):]:
                    return dev.name
        if "/" not in rel and self.sysfs.exists(f"class/block/{rel}"):
            return rel
        if self.dev is not None:
            real = os.path.realpath(os.path.join(self.dev, rel))
            base = os.path.basename(real)
            if real.startswith(os.path.realpath(self.dev) + "/") and self.sysfs.exists(f"class/block/{base}"):
                return base
        return None

    def source(self, source: str) -> Resolved:
        """An fstab or mountinfo source -> its block device, or why there is none."""
        if "\0" in source:
            return Resolved(None, f"{source!r} is not a block device")
        tag, eq, value = source.partition("=")
        if eq and tag in TAGS:
            value = value.strip('"')
            prop = TAGS[tag]
            for name, props, _links in self._records():
                # ID_FS_LABEL is udev's "safe" form (blanks as _); the _ENC form keeps the label exactly.
                have = [decode(props[prop + "_ENC"])] if prop + "_ENC" in props else []
                have += [props[prop]] if prop in props else []
                if value in have or (tag.endswith("UUID") and value.lower() in (h.lower() for h in have)):
                    return Resolved(name)
            found = self._from_dev_path(f"disk/{TAG_DIRS[tag]}/{value.replace('/', chr(92) + 'x2f')}")
            if found:
                return Resolved(found)
            return Resolved(None, f"no device with {tag} {value!r} on this machine")
        if source.startswith("/dev/"):
            found = self._from_dev_path(os.path.normpath(source)[len("/dev/"):])
            return Resolved(found) if found else Resolved(None, f"{source} is not present on this machine")
        return Resolved(None, f"{source!r} is not a block device")

    def mount(self, m: mountinfo.Mount) -> Resolved:
        """The block device of a live mount: its major:minor, else its source (btrfs shows 0:N)."""
        name = self.name_of_devnum(m.devnum) if not m.devnum.startswith("0:") else None
        return Resolved(name) if name else self.source(m.source)


def disks_under_path(ctx, path: str) -> list[str]:
    """Kernel names of the whole disks under the filesystem holding `path` (a mountpoint or any path).

    Raises UsageError when the path is on no block-backed filesystem.
    """
    mounts, _ = mountinfo.read_mounts(mountinfo.proc_root(ctx.env, str(ctx.sysfs.root)))
    real = os.path.realpath(path) if os.path.exists(path) else os.path.normpath(path)
    mount = mountinfo.containing(mounts, real)
    if mount is None:
        raise UsageError(f"{path}: no mounted filesystem holds this path",
                         hint="give a device name, a /dev path, or a path on a mounted filesystem")
    resolver = Resolver(ctx)
    found = resolver.mount(mount)
    disks = resolver.disks_below(found.name) if found.name else []
    if not disks:
        raise UsageError(f"{path} is on {mount.target} ({mount.fstype} from {mount.source}), which has no block "
                         "device under this sysfs root", hint=found.problem or None)
    return disks
