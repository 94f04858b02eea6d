"""Which block device a name means: the one resolver for every name a user or a config file writes.

Kernel names (``sda``, ``sda2``, ``dm-0``); ``/dev`` paths; udev's links
(``/dev/disk/by-id/...``, ``by-label``, ``/dev/mapper/*``, ``/dev/md/*``, with
or without ``/dev/``); ``UUID=``, ``LABEL=``, ``PARTUUID=``, ``PARTLABEL=``
through the udev database (``ID_FS_UUID`` ...) and then the ``/dev/disk/by-*``
links; ``major:minor``; a sysfs directory (``/sys/block/sda``, ``/sys/dev/block/8:0``);
a mountpoint or any path on a mounted filesystem (the whole disks under that
filesystem). `Resolver.lookup` is the one reading of a DEV argument: a path is
walked to its block device node by `tunectl.system.devnode` (links root owns;
a device only through directories no one else can change) and read by its st_rdev, so any name
of the node works. A tree that describes another machine has its ``/dev`` only as
its dev root (`tunectl.system.roots`: never the real ``/dev`` for a fake tree), and
names udev recorded, dm names from sysfs, when that has none.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable

from tunectl.devices.discover import discover
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.model import Device
from tunectl.errors import UsageError
from tunectl.record import record
from tunectl.system import trust
from tunectl.system.roots import DEV, resolved_path, under_dev
from tunectl.system.udevdb import decode

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from tunectl.devices.stack import MountLayer, Stack
    from tunectl.system.mountinfo import Mount

# plan, apply and verify name devices: they build no Stack, read no mount table and run no blkid, so the modules
# that do (each a few frozen dataclasses, ~1 ms apiece to create at import) load in the methods that need them.

# fstab tag -> the udev property that carries it
TAGS = {"UUID": "ID_FS_UUID", "LABEL": "ID_FS_LABEL", "PARTUUID": "ID_PART_ENTRY_UUID",
        "PARTLABEL": "ID_PART_ENTRY_NAME"}
TAG_DIRS = {"UUID": "by-uuid", "LABEL": "by-label", "PARTUUID": "by-partuuid", "PARTLABEL": "by-partlabel"}


def names_a_device(source: str) -> bool:
    """A device path or an fstab tag (``/dev/...``, ``UUID=``...): it should resolve to a block device."""
    return under_dev(source) is not None or source.partition("=")[0] in TAGS and "=" in source


@record
class Resolved:
    """The block device a name means, or why there is none (`problem`, `hint`, the error `code`)."""

    name: str | None  # kernel name of the block device (a partition, a disk, dm-N, mdN)
    problem: str = ""
    hint: str = ""
    code: str = "unknown-device"
    path: bool = False  # no device: the name is a file or directory (callers that take one: its filesystem's)
    missing: bool = False  # no device: nothing has that name
    # a path: where the walk led and what it saw there (`trust.Landed`: the path with its links followed, the look
    # at it). A later look by name may find something else (whoever owns a directory on the way can swap in a
    # link between the two): its mount and its device are taken from this. None: not walked (a fake tree's path).
    walked: trust.Landed | None = None


# /sys/block/NAME, /sys/block/DISK/PART, /sys/class/block/NAME, /sys/dev/block/MAJ:MIN: a sysfs directory as a name
_SYSFS_NAME = re.compile(r"/sys/(?:block/(?:[^/]+/)?|class/block/|dev/block/)([^/]+)")
_DEVNUM = re.compile(r"\d+:\d+")
_BY_LINK = re.compile(r"/dev/disk/(by-[^/]+)/([^/]+)")  # a udev link (an fstab source's usual name)


class Resolver:
    """Resolution for one run: the graph read once, the udev database indexed once (when first needed).

    `devices`: the discovered devices (tunable whole devices) names must end at;
    discovered here when not given. `devices_of` and `stack` answer with those
    Device records (and the typed `Stack` of `tunectl.devices.stack`); the
    name-level methods serve the callers that only print or match names.
    """

    def __init__(self, ctx, devices: list[Device] | None = None, graph: DeviceGraph | None = None) -> None:
        self.ctx = ctx
        self.sysfs = ctx.sysfs
        self.dev = ctx.roots.dev
        if devices is None:
            devices = discover(ctx.sysfs, ctx.udev, ())
        self.devices = {d.name: d for d in devices}
        self.graph = graph if graph is not None else DeviceGraph.read(ctx.sysfs)
        self._index: list[tuple[str, dict[str, str], list[str]]] | None = None
        # One run reads each /dev/disk/by-* directory once and judges each link in it once (a 20,000-line fstab
        # named 40,000 links, each walked from /), and runs blkid at most once for all tags (`_blkid_device`).
        self._by_dirs: dict[str, frozenset[str] | str | None] = {}
        self._by_walked: dict[str, Resolved] = {}
        self._blkid: dict[tuple[str, str], list[str]] | None = None

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
        return self.graph.whole(name)

    def name_of_path(self, path: str) -> str | None:
        """Kernel name of the block device the filesystem holding `path` is on (its st_dev); None when `path`
        cannot be stat'ed or that device is not under this sysfs root (tmpfs, overlay, nfs, btrfs's 0:N)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return self.name_of_devnum(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")

    def disks_below(self, name: str) -> list[str]:
        """The whole disks at the bottom of the stack under `name` (its own disk when it is not stacked)."""
        return [d for d in self.graph.disks_under(name) if d in self.devices]

    def partition_number(self, name: str) -> int | None:
        """The partition number of kernel name `name`; None when it is not a partition."""
        if self.graph.parent_of(name) is None:
            return None
        text = self.sysfs.read_or(f"class/block/{name}/partition")
        return int(text) if text and text.strip().isdigit() else None

    # --- names -> kernel names
    def _from_dev_path(self, rel: str) -> str | None:
        if not rel or rel.startswith(("/", "..")):
            return None
        for name, _props, links in self._records():
            if rel in links:
                return name
        if rel.startswith("mapper/"):
            for name in self.graph.wholes:
                if name.startswith("dm-") and (self.sysfs.read_or(f"block/{name}/dm/name") or "").strip() == rel[7:]:
                    return name
        if "/" not in rel and self.sysfs.exists(f"class/block/{rel}"):
            return rel
        if self.dev is not None:
            real = os.path.realpath(os.path.join(self.dev, rel))
            base = os.path.basename(real)
            if real.startswith(os.path.realpath(self.dev) + "/") and self.sysfs.exists(f"class/block/{base}"):
                return base
        return None

    def source(self, source: str) -> Resolved:
        """A device name (tag, /dev path, link, kernel name) -> its block device, or why there is none."""
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
            if self.ctx.real:
                # udev may not have probed a new filesystem yet (no record, no link): read the superblocks
                found = self._blkid_device(tag, value)
                if found and self.sysfs.exists(f"class/block/{found}"):
                    return Resolved(found)
            return Resolved(None, f"no device with {tag} {value!r} on this machine (neither udev's database, "
                                  f"/dev/disk/{TAG_DIRS[tag]} nor blkid knows it)" if self.ctx.real
                            else f"no device with {tag} {value!r} on this machine")
        if under_dev(source) is not None:
            found = self.lookup(source)
            return found if found.name or found.code != "unknown-device" or found.path else \
                Resolved(None, f"{source} is not present on this machine", found.hint)
        if source in self.graph:
            return Resolved(source)
        return Resolved(None, f"{source!r} is not a block device")

    def mount(self, m: Mount) -> Resolved:
        """The block device of a live mount: its major:minor, else its source (btrfs shows 0:N)."""
        name = self.name_of_devnum(m.devnum) if not m.devnum.startswith("0:") else None
        return Resolved(name) if name else self.source(m.source)

    def path(self, path: str, walked: trust.Landed | None = None) -> list[str]:
        """Kernel names of the whole disks under the filesystem holding `path` (a mountpoint or any path).

        `walked`: where `lookup`'s walk of `path` led (`Resolved.walked`); its mount is found from that path, with
        the links the walk followed, never by resolving the name again. Raises UsageError when the path is on no
        block-backed filesystem.
        """
        from tunectl.system import mountinfo  # loaded here: only a path argument reads the mount table

        exists = walked is not None or os.path.exists(path)
        # Every path lies under `/`, so a typo would name the root disk. A fake tree's mount points may exist only
        # in its mountinfo (so an absolute path stands as written there); a relative one is refused everywhere.
        if not exists and (self.ctx.real or not os.path.isabs(path)):
            raise UsageError(f"{path}: no such file or directory",
                             hint="name a device, or a path on a mounted filesystem")
        mounts, _ = mountinfo.read_mounts(self.ctx.roots.proc)
        real = walked.path if walked is not None else os.path.realpath(path) if exists else os.path.normpath(path)
        mount = mountinfo.containing(mounts, real)
        if mount is None:
            raise UsageError(f"{path}: no mounted filesystem holds this path",
                             hint="give a device name, a /dev path, or a path on a mounted filesystem")
        found = self.mount(mount)
        disks = self.disks_below(found.name) if found.name else []
        if not disks:
            raise UsageError(f"{path} is on {mount.target} ({mount.fstype} from {mount.source}), which has no "
                             "block device under this sysfs root", hint=found.problem or None)
        return disks

    def lookup(self, ref: str) -> Resolved:
        """The one reading of a DEV argument: the block device it names (a partition or a whole device), or why
        none, or `path` (a file or directory: the filesystem under it is for the caller to take or refuse).

        A kernel name (``sda``, ``sda1``), ``major:minor``, a sysfs directory (``/sys/block/sda``), an fstab tag,
        or a path. A path is walked as `tunectl.system.devnode` says (links root owns; a device node only
        through directories no one else can change) to a block device node, and its st_rdev is looked up in
        ``/sys/dev/block``: any name of it works (``/dev/../dev/sda``, ``/dev/mapper/vg-lv``, ``/dev/vg/lv``,
        a link root made in ``/run``). A run without a dev root (a tree without TUNECTL_DEV_ROOT) reads ``/dev``
        names from udev's records. A trailing ``/`` is dropped, as a shell's completion of ``/sys/block/sda/``
        leaves it.
        """
        if "\0" in ref or not ref.strip():
            return Resolved(None, f"{ref!r} is not a device name", "name a block device: sda, /dev/sda, "
                            "/dev/disk/by-id/..., UUID=..., 8:0")
        name = ref.rstrip("/") or ref
        if name in self.graph:
            return Resolved(name)
        if "=" in name and name.partition("=")[0] in TAGS:
            return self.source(name)
        sys_name = _SYSFS_NAME.fullmatch(name)
        if _DEVNUM.fullmatch(name) or sys_name and _DEVNUM.fullmatch(sys_name.group(1)):
            devnum = sys_name.group(1) if sys_name else name
            found = self.name_of_devnum(devnum)
            return Resolved(found) if found else Resolved(
                None, f"no block device {devnum} (major:minor) under {self.sysfs.root}",
                "`lsblk -o NAME,MAJ:MIN` lists the numbers")
        if sys_name:
            found = sys_name.group(1)
            return Resolved(found) if found in self.graph else Resolved(
                None, f"no block device {found!r} under {self.sysfs.root}", "`ls /sys/block` lists them")
        if "/" not in name:
            return Resolved(None, f"no block device {ref!r} under {self.sysfs.root}")
        if not name.startswith("/"):
            if not os.path.lexists(name.split("/")[0]):  # mapper/vg-lv, disk/by-id/...: udev's links without /dev/
                found = self.lookup(f"{DEV}/{name}")
                if found.name or found.code != "unknown-device":
                    return found
            return self._node(ref, name) if self.ctx.real else Resolved(None, path=True)
        rel = under_dev(name)
        if self.ctx.real and (rel is not None or self.dev is not None and resolved_path(self.dev) == DEV):
            return self._node(ref, name)
        # A tree that describes another machine (or a dev root that is not /dev): no path outside its dev root is
        # walked, and a /dev name not in it (or when it has none: TUNECTL_DEV_ROOT unset) is looked up in udev's records.
        if rel is None:
            return Resolved(None, path=True)
        walked = self._node(ref, name) if self.dev is not None else None
        if walked is not None and not walked.missing:
            return walked
        found = self._from_dev_path(os.path.normpath(rel))
        return Resolved(found) if found else Resolved(None, f"no block device {ref}: not present on this machine",
                                                      "`lsblk` lists the block devices", path=self.dev is None)

    def _blkid_device(self, tag: str, value: str) -> str | None:
        """The kernel name of the one device blkid says has `tag` `value`; blkid runs once a run, for every tag it
        prints as itself (`blkid.one_print`), and once more for each other value (UTF-8, a control character)."""
        from tunectl.system import blkid  # loaded here: only a tag udev does not know runs blkid

        if not blkid.one_print(value):
            paths = blkid.devices_with(self.ctx.run, tag, value)
        else:
            if self._blkid is None:
                self._blkid = blkid.all_tags(self.ctx.run)
            paths = self._blkid.get((tag, value), [])
        return os.path.basename(os.path.realpath(paths[0])) if len(paths) == 1 else None

    def _node(self, ref: str, name: str) -> Resolved:
        by = _BY_LINK.fullmatch(name) if self.dev is not None and resolved_path(self.dev) == DEV else None
        if by is None or by.group(2) in (".", ".."):
            return self._walk(ref, name)
        if name in self._by_walked:
            return self._by_walked[name]
        from tunectl.system import devnode

        listing = self._by_listing(by.group(1))
        if isinstance(listing, frozenset) and by.group(2) not in listing:
            found = Resolved(None, f"{name}: no such file or device node", devnode.MISSING_HINT, missing=True)
        elif isinstance(listing, str):  # the directory (or one above it) is missing: as the walk says it
            found = Resolved(None, f"{name}: no such file or device node ({listing} is missing)", devnode.MISSING_HINT,
                             missing=True)
        else:
            found = self._walk(ref, name)
        self._by_walked[name] = found
        return found

    def _by_listing(self, directory: str) -> frozenset[str] | str | None:
        """The names in /dev/disk/by-X, read once a run: a frozenset when the directory is one root alone can
        change (reached through no link), the missing path when it (or a directory above it) is missing; None:
        anything else (each name in it is then walked)."""
        if directory not in self._by_dirs:
            from tunectl.system import devnode

            path, listing = f"{DEV}/disk/{directory}", None
            try:
                landed = devnode.follow(path, DEV)
                if landed.path == path and stat.S_ISDIR(landed.st.st_mode) and not landed.untrusted \
                        and landed.st.st_uid == 0 and not landed.st.st_mode & 0o022:
                    listing = frozenset(os.listdir(path))
            except devnode.Refused as e:
                listing = e.gone or None  # the path missing (it or one above it); else each name is walked
            except OSError:
                listing = None
            self._by_dirs[directory] = listing
        return self._by_dirs[directory]

    def _walk(self, ref: str, name: str) -> Resolved:
        from tunectl.system import devnode  # loaded here: only a path argument walks one

        try:
            landed = devnode.follow(name, self.dev)
        except devnode.Refused as e:
            if e.missing and under_dev(name) is None:
                return Resolved(None, e.message, e.hint, path=True)  # a path that is no device: the caller's to judge
            return Resolved(None, e.message, e.hint, e.code, missing=e.missing)
        except OSError as e:
            return Resolved(None, f"{ref}: {e.strerror or e}", "check the name; `lsblk` lists the block devices")
        st = landed.st
        shown = ref if landed.path == ref else f"{ref} (which is {landed.path})"
        if stat.S_ISBLK(st.st_mode) or not self.ctx.real and stat.S_ISREG(st.st_mode) and under_dev(landed.path):
            if landed.untrusted:
                return Resolved(None, f"{shown}: a device reached through a directory another user can change "
                                f"({landed.untrusted})", "root takes a device node or a link to one only through "
                                "directories only root can change (a user must not decide what root writes); name "
                                "the device by its node under /dev or a link udev made there", "untrusted-link")
            if stat.S_ISBLK(st.st_mode):
                devnum = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
                found = self.name_of_devnum(devnum)
                return Resolved(found) if found else Resolved(
                    None, f"{shown} is block device {devnum}, which is not under {self.sysfs.root}",
                    "a device removed since its node was made? `lsblk` lists the block devices")
            # a tree's dev root: a regular file stands for the device node of its name (no mknod without root)
            base = os.path.basename(landed.path)
            if self.sysfs.exists(f"class/block/{base}"):
                return Resolved(base)
            return Resolved(None, f"{shown} is not present on this machine", "`lsblk` lists the block devices")
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            if under_dev(landed.path) is not None and not stat.S_ISDIR(st.st_mode):
                return Resolved(None, f"{shown} is {trust.kind(st.st_mode)}, not a block device",
                                "name a block device: `lsblk` lists them")
            return Resolved(None, f"{shown} is {trust.kind(st.st_mode)}, not a block device", path=True, walked=landed)
        return Resolved(None, f"{shown} is {trust.kind(st.st_mode)}, not a block device",
                        "name a block device (sda, /dev/sda, /dev/disk/by-id/...): `lsblk` lists them")

    def node(self, ref: str) -> str | None:
        """A DEV argument naming a block device -> its kernel name (a partition or a whole device), or None."""
        return self.lookup(ref).name

    def devices_of(self, refs: Iterable[str]) -> list[Device]:
        """DEV arguments -> the tunable whole devices they stand for (see `whole_devices`), each once, in order."""
        return [self.devices[n] for n in dict.fromkeys(self.whole_devices(refs))]

    def stack(self, target: str) -> Stack:
        """The `Stack` under `target`: a kernel name, a DEV argument (/dev path, link, tag), a block device
        node, or a regular file (its filesystem's device, by st_dev, with the mount it is on when the run may
        read live mounts). Raises UsageError for anything that is not on a tunable block device."""
        from tunectl.devices.stack import FileLayer  # loaded here: plan, apply and verify build no Stack
        from tunectl.system import blockio

        file: FileLayer | None = None
        found = self.lookup(target)
        if found.code != "unknown-device":
            raise UsageError(found.problem, hint=found.hint, code=found.code, where=target)
        name = found.name
        if name is None and found.path and (os.path.exists(target) or target.startswith(("/", "."))):
            info = blockio.inspect(target)  # a file: its filesystem's device (a device node was the walk's)
            seen = found.walked.st if found.walked is not None else None
            if seen is not None and (info.kind, info.devnum, info.ino) != (
                    "file", f"{os.major(seen.st_dev)}:{os.minor(seen.st_dev)}", seen.st_ino) or info.kind == "block":
                # stat (which follows links) finds another file than the walk above saw (or a device node, where a
                # fake tree's path was not walked): the name was swapped between the two looks (a link to /dev/sdX
                # or to a file on another disk, put in place by whoever owns its directory).
                raise UsageError(f"{target}: changed while it was being looked up (now "
                                 f"{'a block device node' if info.kind == 'block' else 'another file'})",
                                 hint="name the block device itself (sda, /dev/sda), or a file no one else can "
                                      "replace", code="untrusted-link", where=target)
            name = self.name_of_devnum(info.devnum)
            if name is None:
                where = "file's filesystem" if info.kind == "file" else "device"
                raise UsageError(f"{target}: the {where} ({info.devnum}) is not a block device under {self.sysfs.root}",
                                 hint="this needs a disk-backed filesystem (not tmpfs, overlay, nfs or btrfs's "
                                      "anonymous devices); name the block device instead")
            if info.kind == "file":
                file = FileLayer(target, info.size, found.walked.path if found.walked is not None else "")
        if name is None:
            name = self.whole_devices([target])[0]
        stack = self.stack_of(name)
        if stack is None:
            known = ", ".join(sorted(self.devices)) or "none"
            raise UsageError(f"{target}: no tunable block device {self.graph.whole(name)!r} under {self.sysfs.root}",
                             hint=f"devices here: {known}")
        if file is None:
            return stack
        # where the walk led (its links followed), never the name resolved again
        mount = self._mount_of(found.walked.path if found.walked is not None else os.path.realpath(file.path), stack)
        return stack.over(file, *([mount] if mount else []))

    def stack_of(self, name: str) -> Stack | None:
        """The `Stack` under kernel name `name` (a partition or a whole device, as `source` and `mount` answer);
        None when its whole device is not one of the run's tunable devices (gone, or outside this sysfs root)."""
        from tunectl.devices.stack import Stack  # loaded here: plan, apply and verify build no Stack

        try:
            return Stack.of(self.graph, self.devices, name)
        except KeyError:
            return None

    def filesystem_stack(self, path: str) -> Stack:
        """The `Stack` of the filesystem holding directory `path` (a mountpoint or any directory on it), with the
        mount it is on when the run may read live mounts. UsageError when it is on no block device here.

        On this machine `path` is walked as a FILE argument is (`lookup`): another user's link on it is refused,
        and its device and mount are those of where the walk led, never of the name looked up again (whoever owns
        a directory on the way could swap in a link between two looks and move root to another filesystem's
        disks)."""
        found = self.lookup(path if "/" in path else f"./{path}") if self.ctx.real else Resolved(None, path=True)
        if found.code != "unknown-device":
            raise UsageError(found.problem, hint=found.hint, code=found.code, where=path)
        walked = found.walked
        st = walked.st if walked is not None else None
        name = self.name_of_devnum(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}") if st is not None \
            else self.name_of_path(path)
        if name is None:
            raise UsageError(f"{path}: its filesystem is on no block device under {self.sysfs.root}",
                             hint="this needs a disk-backed filesystem (not tmpfs, overlay or nfs)")
        stack = self.stack(name)
        mount = self._mount_of(walked.path if walked is not None else os.path.realpath(path), stack)
        return stack.over(mount) if mount else stack

    def _mount_of(self, path: str, stack: Stack) -> MountLayer | None:
        """The live mount holding `path` (its links resolved), when the run may read live mounts and it is on `stack`'s device."""
        if self.ctx.roots.proc is None:
            return None
        from tunectl.devices.stack import MountLayer  # loaded here: plan, apply and verify build no Stack
        from tunectl.system import mountinfo

        mounts, _ = mountinfo.read_mounts(self.ctx.roots.proc)
        found = mountinfo.containing(mounts, path)
        if found is None or self.name_of_devnum(found.devnum) not in {stack.top.name, *(
                [stack.partition.name] if stack.partition else [])}:
            return None
        return MountLayer(found.target, found.fstype, found.source)

    def whole_devices(self, refs: Iterable[str]) -> list[str]:
        """DEV arguments (sda, /dev/sda, /dev/disk/by-id/..., UUID=..., 8:0, a partition, a mountpoint or any
        path) -> kernel names of tunable whole devices (a path: the whole disks under its filesystem)."""
        out: list[str] = []
        for ref in refs:
            found = self.lookup(ref)
            whole = self.whole(found.name) if found.name is not None else None
            if whole in self.devices:
                out.append(whole)
                continue
            if found.path:
                out.extend(d for d in self.path(ref, found.walked) if d not in out)
                continue
            known = ", ".join(sorted(self.devices)) or "none"
            if found.name is not None:
                on = f"{found.name} is on {whole!r}, which" if whole != found.name else f"{whole!r}"
                raise UsageError(f"{ref}: {on} is not a tunable block device under {self.sysfs.root}",
                                 hint=f"devices here: {known}", code="unknown-device", where=ref)
            if found.code != "unknown-device":
                raise UsageError(found.problem, hint=found.hint, code=found.code, where=ref)
            if "=" in ref and ref.partition("=")[0] in TAGS:
                raise UsageError(found.problem, hint=f"devices here: {known}; `blkid` lists the "
                                 "filesystems and their tags", code="unknown-device", where=ref)
            raise UsageError(found.problem or f"no block device {ref!r} under {self.sysfs.root}",
                             hint=f"devices here: {known}" + (f"; {found.hint}" if found.hint else ""),
                             code="unknown-device", where=ref)
        return out
