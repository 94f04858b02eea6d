"""Discovery: read the whole block devices under a sysfs root into Device records."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from tunectl.attributes import QUEUE, parse_scheduler, parse_value
from tunectl.devices.classes import bus_of_path, classify, dm_type_of
from tunectl.devices.graph import DeviceGraph, partition_names
from tunectl.devices.model import Device, Partition
from tunectl.system.loopdev import backing_inode
from tunectl.system.roots import is_real_sysfs
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb, decode


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _bus_from_path(sysfs: Sysfs, rel: str) -> str | None:
    """The bus a device hangs off, from its path below the sysfs root (never from where the root lives)."""
    root = sysfs.realpath("")
    real = sysfs.realpath(rel)
    return bus_of_path("/" + os.path.relpath(real, root))


def normalise_wwn(wwn: str | None) -> str | None:
    """udev's ID_WWN (``0x5000c500...``) and sysfs ``wwid`` (``naa.5000c500...``) name one disk alike."""
    if not wwn:
        return None
    wwn = wwn.strip()
    if wwn.startswith("t10."):
        return None  # a SCSI/ATA vendor id built from vendor, model and serial (a SATA disk without a WWN): not a WWN
    if wwn.startswith("naa."):
        return "0x" + wwn[4:].lower()
    return wwn


def _udev_decode(text: str | None) -> str | None:
    """udev's *_ENC properties escape blanks and specials as \\xNN."""
    if not text:
        return None
    return decode(text).strip() or None


def _identity(dev: Device, props: dict[str, str], sysfs: Sysfs, loops: Mapping[str, tuple[str, str]] | None) -> str:
    if dev.cls == "dm" and dev.dm_uuid:
        return f"dm-uuid:{dev.dm_uuid}"
    if dev.cls == "md" and props.get("MD_UUID"):
        return f"md-uuid:{props['MD_UUID']}"
    if dev.cls == "loop":
        known = loops.get(dev.name) if loops is not None else None  # read once a discovery by loop_backings
        backing = known[0] if known else sysfs.read_or(f"block/{dev.name}/loop/backing_file")
        if backing:
            offset = known[1] if known else _loop_offset(sysfs, dev.name)
            at = f"@offset={offset}" if offset != "0" else ""  # a partition of an image file: stable
            if loops is None:
                loops = loop_backings(sysfs)
            return f"loop:{backing}{at}{_loop_twin_suffix(sysfs, dev.name, backing, offset, loops)}"
    if dev.wwn:
        return f"wwn:{dev.wwn}"
    if props.get("ID_SERIAL"):
        return f"serial:{props['ID_SERIAL']}"
    if dev.serial:
        return f"serial:{dev.model + '_' if dev.model else ''}{dev.serial}"
    by_id = sorted(link for link in dev.links if link.startswith("disk/by-id/"))
    if by_id:
        return f"by-id:{by_id[0][len('disk/by-id/'):]}"
    return f"kernel:{dev.name}"


def _loop_offset(sysfs: Sysfs, name: str) -> str:
    text = (sysfs.read_or(f"block/{name}/loop/offset") or "0").strip()
    return text if text.isdigit() else "0"


def loop_backings(sysfs: Sysfs) -> dict[str, tuple[str, str]]:
    """Every attached loop device -> (backing file, offset): read once per discovery, not once per device."""
    out = {}
    for name in sysfs.listdir("block"):
        if name.startswith("loop"):
            backing = sysfs.read_or(f"block/{name}/loop/backing_file")
            if backing is not None:
                out[name] = (backing, _loop_offset(sysfs, name))
    return out


def _loop_twin_suffix(sysfs: Sysfs, name: str, backing: str, offset: str,
                      loops: Mapping[str, tuple[str, str]]) -> str:
    """``#ino<N>:loop3`` when another loop device is attached to the same backing file at the same offset, else "".

    Two loop devices on one file would share one identity: the journal would keep
    one's originals only, and a rollback would write the other. Devices at other
    offsets (partitions of an image) are told apart by their offset already. Every
    loop device is looked at (not only those a command reads), so the identity
    does not depend on which devices a command was given.
    """
    twins = [other for other, at in loops.items() if other != name and at == (backing, offset)]
    if not twins:
        return ""
    inode = ""
    if is_real_sysfs(sysfs.root):  # a fake tree's backing paths are not on this machine
        try:
            inode = f"ino{os.stat(backing.removesuffix(' (deleted)')).st_ino}:"
        except OSError:
            inode = ""
    return f"#{inode}{name}"


def shared_identity_warnings(devices: list[Device], among: list[Device] | None = None) -> list[str]:
    """One line per device of `devices` whose identity needed its loop number (see `_loop_twin_suffix`), and one
    per identity it shares with another device of `among` (default `devices`), which nothing told apart."""
    out = [f"tunectl: warning: {d.name} shares its backing file with another loop device; it is told apart by its "
           f"loop number ({d.identity}), which changes when it is attached again" for d in devices
           if d.cls == "loop" and "#" in d.identity]
    names: dict[str, list[str]] = {}
    for d in devices if among is None else among:
        names.setdefault(d.identity, []).append(d.name)
    for identity in dict.fromkeys(d.identity for d in devices):
        if len(names.get(identity, ())) > 1:
            out.append(f"tunectl: warning: {', '.join(names[identity])} share the identity {identity} (multipath "
                       "paths or cloned serials): the journal keeps the originals of the first one tuned, and "
                       "rollback restores only the device the journal names")
    return out


def read_device(sysfs: Sysfs, udev: UdevDb, name: str, queue_attrs: Iterable[str] | None = None,
                modular: Iterable[str] = (), loops: Mapping[str, tuple[str, str]] | None = None,
                graph: DeviceGraph | None = None) -> Device | None:
    """One whole device, or None if it has no queue/ (or vanished while we looked).

    `modular`: schedulers the running kernel has as loadable modules (KernelModules);
    a device with a scheduler offers them too, listed or not. `loops`: `loop_backings`,
    when the caller reads several devices (read here when a loop device needs it).
    `graph`: the run's DeviceGraph, whose slaves, holders and partitions are not read again.
    """
    base = f"block/{name}"
    if not sysfs.exists(f"{base}/queue"):
        return None
    rot_text = sysfs.read_or(f"{base}/queue/rotational")
    rotational = None if rot_text is None else rot_text.strip() == "1"
    devnum = sysfs.read_or(f"{base}/dev")
    if devnum is None:
        return None  # vanished while we looked
    rec = udev.record(devnum)
    props = rec.properties
    cls = classify(name, rotational)
    if cls == "loop" and not sysfs.exists(f"{base}/loop/backing_file"):
        return None  # an unattached loop device: nothing to tune
    dev = Device(name=name, cls=cls, identity="", devnum=devnum)
    dev.rotational = rotational
    dev.links = tuple(rec.links)
    if dev.cls == "dm":
        dev.dm_uuid = sysfs.read_or(f"{base}/dm/uuid") or props.get("DM_UUID") or None
        dev.dm_name = sysfs.read_or(f"{base}/dm/name") or props.get("DM_NAME") or None
        dev.dm_type = dm_type_of(dev.dm_uuid)
    # An MMC/SD card has no model file; its product name is device/name (CID), which udev does not import.
    dev.model = (_udev_decode(props.get("ID_MODEL_ENC")) or _strip(sysfs.read_or(f"{base}/device/model"))
                 or props.get("ID_MODEL") or _strip(sysfs.read_or(f"{base}/device/name")))
    dev.vendor = props.get("ID_VENDOR") or _strip(sysfs.read_or(f"{base}/device/vendor"))
    # scsi_id sets ID_SERIAL_SHORT to the NAA id (the WWN) of a disk that has one; the product serial, what
    # lsblk shows, is ID_SCSI_SERIAL (VPD page 0x80).
    dev.serial = (
        props.get("ID_SCSI_SERIAL")
        or props.get("ID_SERIAL_SHORT")
        or _strip(sysfs.read_or(f"{base}/device/serial"))
        or _strip(sysfs.read_or(f"{base}/serial"))
    )
    dev.wwn = normalise_wwn(props.get("ID_WWN") or sysfs.read_or(f"{base}/wwid") or sysfs.read_or(f"{base}/device/wwid"))
    dev.bus = props.get("ID_BUS") or _bus_from_path(sysfs, base)
    dev.size_bytes = _int(sysfs.read_or(f"{base}/size")) * 512
    dev.removable = (sysfs.read_or(f"{base}/removable") or "0").strip() == "1"
    dev.logical_block_size = _int(sysfs.read_or(f"{base}/queue/logical_block_size"), 0) or None
    dev.physical_block_size = _int(sysfs.read_or(f"{base}/queue/physical_block_size"), 0) or None
    io_opt = sysfs.read_or(f"{base}/queue/optimal_io_size")
    dev.optimal_io_size = None if io_opt is None else _int(io_opt)
    sched_text = sysfs.read_or(f"{base}/queue/scheduler")
    if sched_text is not None:
        active, offered = parse_scheduler(sched_text)
        # bio-based devices (dm, zram, brd...) list only "none": nothing to choose.
        if offered and offered != ("none",):
            dev.scheduler, dev.schedulers = active, offered
            dev.loadable = tuple(s for s in modular if s not in offered)
            for knob in sysfs.listdir(f"{base}/queue/iosched"):
                value = sysfs.read_or(f"{base}/queue/iosched/{knob}")
                if value is not None:
                    dev.iosched[knob] = _int_or_text(value)
    for attr in QUEUE if queue_attrs is None else queue_attrs:
        value = sysfs.read_or(f"{base}/queue/{attr}")
        if value is not None and attr in QUEUE:
            dev.queue[attr] = parse_value(QUEUE[attr], value)
    if "nr_requests" in dev.queue and not sysfs.exists(f"{base}/mq"):
        # Linux 6.1 lists nr_requests on bio-based queues (dm, md: no mq/) but refuses every write with EINVAL.
        del dev.queue["nr_requests"]
    _read_stacking(sysfs, dev, graph)
    dev.identity = _identity(dev, props, sysfs, loops)
    if cls == "loop" and is_real_sysfs(sysfs.root):  # a fake tree's loop devices are not on this machine
        known = loops.get(name) if loops is not None else None  # the backing file read once by loop_backings
        backing = known[0] if known else sysfs.read_or(f"{base}/loop/backing_file")
        dev.backing = backing_inode(name, devnum.strip(), (backing or "").strip())
    return dev


def _read_stacking(sysfs: Sysfs, dev: Device, graph: DeviceGraph | None) -> None:
    """`dev`'s slaves, partitions and holders: from the run's graph when it has them, else from sysfs."""
    name, base = dev.name, f"block/{dev.name}"
    if graph is not None and name in graph.slaves:
        dev.slaves = graph.slaves[name]
        dev.partitions = tuple(_partitions(sysfs, name, graph.partitions_of(name)))
        dev.holders = tuple(sorted(graph.holders.get(name, ())))
        return
    dev.slaves = tuple(sysfs.listdir(f"{base}/slaves"))
    dev.partitions = tuple(_partitions(sysfs, name, partition_names(sysfs, name)))
    holders = set(sysfs.listdir(f"{base}/holders"))
    for part in dev.partitions:
        holders.update(sysfs.listdir(f"{base}/{part.name}/holders"))
    dev.holders = tuple(sorted(holders))


def _partitions(sysfs: Sysfs, name: str, entries: Iterable[str]) -> Iterable[Partition]:
    for entry in entries:
        yield Partition(entry, _int(sysfs.read_or(f"block/{name}/{entry}/start")),
                        _int(sysfs.read_or(f"block/{name}/{entry}/size")))


def _strip(text: str | None) -> str | None:
    text = text.strip() if text else None
    return text or None


def _int_or_text(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text.strip()


def kernel_order(name: str) -> list:
    """Kernel names in natural order, as lsblk lists them: loop2 before loop10, nvme0n2 before nvme0n10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def discover(sysfs: Sysfs, udev: UdevDb, queue_attrs: Iterable[str] | None = None,
             modular: Iterable[str] = (), names: Iterable[str] | None = None,
             graph: DeviceGraph | None = None) -> list[Device]:
    """Every whole block device under the root (or those of `names`), in natural order of kernel name.

    `modular`, `graph`: see read_device.
    """
    attrs = None if queue_attrs is None else tuple(queue_attrs)
    modular = tuple(modular)
    devices = []
    loops: dict[str, tuple[str, str]] | None = None
    for name in sorted(sysfs.listdir("block") if names is None else set(names), key=kernel_order):
        if loops is None and name.startswith("loop"):
            loops = loop_backings(sysfs)
        dev = read_device(sysfs, udev, name, attrs, modular, loops, graph)
        if dev is not None:
            devices.append(dev)
    return devices
