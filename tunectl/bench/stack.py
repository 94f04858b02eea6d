"""What a bench target is: the file or device read, and the stack of block devices under it.

A file's filesystem device comes from st_dev -> <sysfs>/dev/block/MAJ:MIN ->
the whole disk (a partition shares its disk's queue), then slaves/ down to the
disks for dm and md. (A local resolver: `tunectl mounts` has a shared one in
the works; they should become one at merge.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tunectl.attributes import modular_schedulers
from tunectl.context import Context
from tunectl.errors import UsageError
from tunectl.system import blockio
from tunectl.tuning.device import Device
from tunectl.tuning.discover import discover, partition_parent
from tunectl.tuning.operations import resolve_names
from tunectl.tuning.plan import lower_disks


@dataclass
class Stack:
    target: str  # as named on the command line
    kind: str  # "device" | "file"
    read_path: str  # what each point reads
    read_bytes: int  # what there is to read (capped later by --size)
    top: Device  # the whole device whose read_ahead_kb is swept (the filesystem's, or the named one)
    below: list[Device]  # every device under `top`, nearest first (dm/md slaves, then their disks)
    scheduled: list[Device]  # where the scheduler is swept: `top`, or the disks below a bio-based top
    nodes: dict[str, str]  # device name -> its /dev node (for dropping its cached pages)

    @property
    def devices(self) -> list[Device]:
        return [self.top, *self.below]

    @property
    def stacked(self) -> bool:
        return bool(self.scheduled) and self.scheduled[0].name != self.top.name

    @property
    def offered(self) -> list[str]:
        """Schedulers every scheduled device offers, in the first one's order."""
        if not self.scheduled:
            return []
        # A scheduler built as a module is offered as apply offers it: writing its name loads it.
        common = set.intersection(*(set(d.schedulers + d.loadable) for d in self.scheduled))
        first = self.scheduled[0]
        return [s for s in first.schedulers + first.loadable if s in common]


def _whole(ctx: Context, name: str) -> str:
    if ctx.sysfs.exists(f"block/{name}/queue"):
        return name
    return partition_parent(ctx.sysfs, name) or name


def _below(by_name: dict[str, Device], top: str, parent_of: dict[str, str]) -> list[Device]:
    out: list[Device] = []
    queue = [top]
    while queue:
        cur = queue.pop(0)
        for slave in by_name[cur].slaves if cur in by_name else ():
            disk = slave if slave in by_name else parent_of.get(slave)
            if disk and disk != top and all(d.name != disk for d in out):
                out.append(by_name[disk])
                queue.append(disk)
    return out


def resolve(ctx: Context, target: str, dev_dir: str = "/dev") -> Stack:
    devices = discover(ctx.sysfs, ctx.udev, None, modular_schedulers(ctx.modules.loadable()))
    by_name = {d.name: d for d in devices}
    parent_of = {p.name: d.name for d in devices for p in d.partitions}
    bare = "/" not in target and ctx.sysfs.exists(f"class/block/{target}")
    if not bare and (os.path.exists(target) or target.startswith(("/", "."))):
        info = blockio.inspect(target)
        node = ctx.sysfs.realpath(f"dev/block/{info.devnum}")
        name = os.path.basename(node)
        if not ctx.sysfs.exists(f"dev/block/{info.devnum}"):
            where = "file's filesystem" if info.kind == "file" else "device"
            raise UsageError(f"{target}: the {where} ({info.devnum}) is not a block device under {ctx.sysfs.root}",
                             hint="bench needs a disk-backed filesystem (not tmpfs, overlay, nfs or btrfs's "
                                  "anonymous devices); name the block device instead")
        kind, read_path, size = ("file", target, info.size) if info.kind == "file" else ("device", target, 0)
    else:
        name = resolve_names(ctx, devices, [target])[0]
        bare_name = target[len("/dev/"):] if target.startswith("/dev/") else target
        part = bare_name if "/" not in bare_name and ctx.sysfs.exists(f"class/block/{bare_name}") else name
        kind, read_path, size = "device", os.path.join(dev_dir, part), 0
        name = part
    if kind == "device":
        size = int(ctx.sysfs.read_or(f"class/block/{name}/size", "0") or 0) * 512
    top_name = _whole(ctx, name)
    if top_name not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise UsageError(f"{target}: no tunable block device {top_name!r} under {ctx.sysfs.root}",
                         hint=f"devices here: {known}")
    top = by_name[top_name]
    below = _below(by_name, top_name, parent_of)
    if top.has_scheduler:
        scheduled = [top]
    else:
        bottoms = set(lower_disks(by_name, top_name, parent_of))
        scheduled = [d for d in below if d.name in bottoms and d.has_scheduler]
    nodes = {d.name: os.path.join(dev_dir, d.name) for d in [top, *below]}
    return Stack(target, kind, read_path, size, top, below, scheduled, nodes)


def check_nodes(ctx: Context, stack: Stack) -> None:
    """Each /dev node must be the device sysfs describes (a fake --sysfs-root must not steer real I/O)."""
    wanted = [(stack.nodes[d.name], d.devnum) for d in stack.devices]
    if stack.kind == "device":
        name = os.path.basename(os.path.realpath(stack.read_path))
        wanted.append((stack.read_path, ctx.sysfs.read_or(f"class/block/{name}/dev")))
    for path, devnum in wanted:
        found = blockio.node_devnum(path)
        if found is None or found != devnum:
            raise UsageError(f"{path} is {'not a block device' if found is None else 'device ' + found}, "
                             f"but sysfs under {ctx.sysfs.root} says it is {devnum or 'not there'}",
                             hint="bench reads real devices: use the real /sys (no --sysfs-root)")
    if stack.read_bytes <= 0:
        raise UsageError(f"{stack.target} is empty: nothing to read")
