"""The metadata pass: the file system's own blocks (inodes, directories, extent trees) before the data.

On ext4 these blocks live in the page cache of the block device itself, not of
any file: `collect` records which pages of the device's mapping are resident
(mincore on a mapping of the device, as sreadahead and e2fsprogs' readahead
see them) and a replay brings them back sorted and coalesced with one
WILLNEED per run of pages, before it stats or opens any file. Other file
systems (xfs, btrfs, squashfs) get no device ranges: their metadata is warmed
by the inode pass, which stats in inode-number order.

Only root can open a block device: as anyone else collect notes that the pass
was left out and replay skips it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping

from tunectl.devices.devnum import node as devnum_node
from tunectl.preload import order
from tunectl.system import pagecache
from tunectl.system.sysfs import Sysfs

FILESYSTEMS = ("ext4", "ext3", "ext2")  # block-device-cached metadata; the rest: statx in inode order
GAP = 64 << 10  # holes up to this are read through: one request instead of two, at most 16 extra pages
_NO_END = 1 << 63  # the device's size, unknown when the cap is counted: `order.page_bytes` cuts nothing


class MetadataPass:
    """What a replay's metadata pass did: bytes asked for, WILLNEED calls, devices, and why any was skipped."""

    def __init__(self) -> None:
        self.bytes = 0
        self.requests = 0
        self.devices: list[str] = []
        self.waited: set[str] = set()  # devices whose ranges were read in full before the replay went on
        self.notes: list[str] = []

    def to_json(self) -> dict:
        return {"bytes": self.bytes, "requests": self.requests, "devices": self.devices, "notes": self.notes}


def filesystem_types(devices: Iterable[str], proc_root: str | None) -> dict[str, str]:
    """MAJ:MIN -> file system type of the mounts on these devices (live mountinfo); unknown ones left out."""
    from tunectl.system.mountinfo import read_mounts

    wanted = set(devices)
    try:
        mounts, _ = read_mounts(proc_root)
    except Exception:  # noqa: BLE001 - no mountinfo (a fake root): no metadata pass, said in the notes
        return {}
    return {m.devnum: m.fstype for m in mounts if m.devnum in wanted}


def mount_points(devices: Iterable[str], proc_root: str | None) -> dict[str, str]:
    """MAJ:MIN -> where that file system's root is mounted (the first such mount; bind mounts of a
    directory left out), for these devices; none without a readable mountinfo."""
    from tunectl.system.mountinfo import read_mounts

    wanted = set(devices)
    try:
        mounts, _ = read_mounts(proc_root)
    except Exception:  # noqa: BLE001 - no mountinfo (a fake root): the list records no mount points
        return {}
    found: dict[str, str] = {}
    for m in mounts:
        if m.devnum in wanted and not m.is_bind:
            found.setdefault(m.devnum, m.target)
    return found


def open_device(sysfs: Sysfs, dev_root: str, devnum: str) -> int:
    return pagecache.open_block_device(devnum_node(sysfs, dev_root, devnum), devnum)


def _cached(fd: int, size: int) -> list[tuple[int, int]]:
    """The device's cached byte ranges: by cachestat, else (Linux before 6.5) by mincore, which misses
    the pages ext4 read through buffer heads until something reads them as pages."""
    found = pagecache.device_cached_ranges(fd, size)
    return found if found is not None else order.pages_to_ranges(pagecache.residency(fd, size), size)


def resident_ranges(sysfs: Sysfs, devnum: str, dev_root: str) -> list[tuple[int, int]]:
    """Byte ranges of the device's pages cached now (its metadata, on ext4); OSError when it cannot be opened."""
    fd = open_device(sysfs, dev_root, devnum)
    try:
        return _cached(fd, os.lseek(fd, 0, os.SEEK_END))
    finally:
        os.close(fd)


def why_not_opened(e: OSError) -> str:
    """Why a block device did not open, said after "opening its block device": its node, what failed and, where
    root itself was refused, by what and what to do (a device cgroup or a sandbox refuses root the machine's own
    disk with EPERM: the note said only "Operation not permitted", as if a user had run it)."""
    refused = e.errno in (errno.EACCES, errno.EPERM)
    if refused and os.geteuid() != 0:
        return "needs root"
    node = f"{e.filename} " if e.filename else ""
    said = f"{node}failed: {os.strerror(e.errno or errno.EIO)}"
    if refused:
        where = os.path.dirname(os.fsdecode(e.filename)) if e.filename else "/dev"
        said += (f" even to root: this system's policy refuses the device (a device cgroup, a container or sandbox, "
                 f"a security module, or {where} mounted nodev); let root read it, or run where root may")
    return said


def collect(devices: Iterable[str], sysfs: Sysfs, dev_root: str | None, proc_root: str | None
            ) -> tuple[dict[str, list[tuple[int, int]]], list[str]]:
    """The metadata to record for the file systems on `devices`: {MAJ:MIN: ranges}, and notes for people."""
    found: dict[str, list[tuple[int, int]]] = {}
    notes: list[str] = []
    if dev_root is None:
        return found, notes
    types = filesystem_types(devices, proc_root)
    for devnum in sorted(set(devices)):
        fstype = types.get(devnum)
        if fstype not in FILESYSTEMS:
            continue
        try:
            ranges = resident_ranges(sysfs, devnum, dev_root)
        except OSError as e:
            notes.append(f"metadata of {devnum} ({fstype}) not recorded: opening its block device {why_not_opened(e)}")
            continue
        if ranges:
            found[devnum] = ranges
    return found, notes


def planned(metadata: Mapping[str, Iterable[tuple[int, int]]]) -> tuple[dict[str, list[tuple[int, int]]], int]:
    """The ranges as `replay` will read them, coalesced as it coalesces them (holes up to GAP read through; given
    these, its own coalescing finds nothing more to join), and the bytes that reads, each run out to whole pages
    (WILLNEED reads pages): what the memory cap counts. The ranges' own sum understates it: ranges of one byte
    64 KiB apart add up to a few bytes and read the whole span."""
    runs = {device: order.coalesce(ranges, GAP) for device, ranges in metadata.items()}
    return runs, sum(order.page_bytes(ranges, _NO_END) for ranges in runs.values())


def replay(metadata: Mapping[str, Iterable[tuple[int, int]]], windows: Mapping[str, int], sysfs: Sysfs,
           dev_root: str | None, wait: Iterable[str] = ()) -> MetadataPass:
    """WILLNEED the recorded device ranges, sorted and coalesced, in read-ahead-window calls. On the devices in
    `wait` (disks that seek) then wait until they are read: one byte of each call's last page, in disk order,
    read back (a page already on its way is waited for, not read again). The sweep is then over before the
    inode pass sends its stats: those read only what the ranges did not hold (before Linux 6.5 collect sees
    the pages ext4 read through buffer heads only by mincore, which misses them), and none waits behind it."""
    done = MetadataPass()
    wait = set(wait)
    for devnum, ranges in sorted(metadata.items()):
        if dev_root is None:
            done.notes.append(f"metadata of {devnum} skipped: no device nodes in this root")
            continue
        try:
            fd = open_device(sysfs, dev_root, devnum)
        except OSError as e:
            done.notes.append(f"metadata of {devnum} skipped: opening its block device {why_not_opened(e)}")
            continue
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            window = windows.get(devnum) or order.window_bytes(None, None)
            calls = list(order.chunks(order.coalesce(ranges, GAP), size, window))
            for offset, length in calls:
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
                done.bytes += length
                done.requests += 1
            done.devices.append(devnum)
            if devnum in wait:
                for offset, length in calls:
                    os.pread(fd, 1, (offset + length - 1) // order.PAGE * order.PAGE)
                done.waited.add(devnum)
        except OSError as e:
            done.notes.append(f"metadata of {devnum} stopped: {os.strerror(e.errno or errno.EIO)}")
        finally:
            os.close(fd)
    return done


def residency(metadata: Mapping[str, Iterable[tuple[int, int]]], sysfs: Sysfs, dev_root: str | None
              ) -> dict[str, tuple[int, int] | None]:
    """MAJ:MIN -> (bytes cached, bytes recorded) of each device's metadata ranges; None where it cannot be read."""
    out: dict[str, tuple[int, int] | None] = {}
    for devnum, ranges in sorted(metadata.items()):
        ranges = list(ranges)
        try:
            if dev_root is None:
                raise OSError(errno.ENODEV, "no device nodes")
            fd = open_device(sysfs, dev_root, devnum)
        except OSError:
            out[devnum] = None
            continue
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            out[devnum] = order.overlap_bytes(_cached(fd, size), ranges), \
                sum(n for _, n in order.merge_ranges(ranges))
        except OSError:
            out[devnum] = None
        finally:
            os.close(fd)
    return out


def sequential_rate(sysfs: Sysfs, dev_root: str, devnum: str) -> float | None:
    """The device's sequential read rate, bytes/s, from a 32 MiB direct read (root only; None otherwise)."""
    return pagecache.sequential_rate(devnum_node(sysfs, dev_root, devnum), devnum)
