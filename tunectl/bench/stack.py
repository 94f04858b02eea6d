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
from tunectl.devices.discover import discover
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.errors import UsageError
from tunectl.system import blockio


@dataclass
class Stack:
    target: str  # as named on the command line
    kind: str  # "device" | "file"
    read_path: str  # what each point reads
    read_bytes: int  # what there is to read (capped later by --size)
    top: Device  # the whole device whose read_ahead_kb is swept (the filesystem's, or the named one)
    below: list[Device]  # every device under `top`, nearest first (dm/md slaves, then their disks)
    scheduled: list[Device]  # where the scheduler is swept: `top`, or the disks below a bio-based top
    nodes: dict[str, str | None]  # device name -> its /dev node (for dropping its cached pages); None: none

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


def resolve(ctx: Context, target: str) -> Stack:
    devices = discover(ctx.sysfs, ctx.udev, None, modular_schedulers(ctx.modules.loadable()))
    by_name = {d.name: d for d in devices}
    graph = DeviceGraph.read(ctx.sysfs)
    resolver = Resolver(ctx, devices, graph)
    bare = "/" not in target and ctx.sysfs.exists(f"class/block/{target}")
    name = None if bare else resolver.node(target)
    if bare:
        name = target
    elif name is None and (os.path.exists(target) or target.startswith(("/", "."))):
        info = blockio.inspect(target)
        name = resolver.name_of_devnum(info.devnum)
        if name is None:
            where = "file's filesystem" if info.kind == "file" else "device"
            raise UsageError(f"{target}: the {where} ({info.devnum}) is not a block device under {ctx.sysfs.root}",
                             hint="bench needs a disk-backed filesystem (not tmpfs, overlay, nfs or btrfs's "
                                  "anonymous devices); name the block device instead")
        if info.kind == "file":
            return _stack(ctx, target, "file", target, info.size, name, by_name, graph)
    if name is None:
        name = resolver.whole_devices([target])[0]
    size = int(ctx.sysfs.read_or(f"class/block/{name}/size", "0") or 0) * 512
    return _stack(ctx, target, "device", ctx.roots.node(name) or "", size, name, by_name, graph)


def _stack(ctx: Context, target: str, kind: str, read_path: str, size: int, name: str, by_name: dict[str, Device],
           graph: DeviceGraph) -> Stack:
    top_name = graph.whole(name)
    if top_name not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise UsageError(f"{target}: no tunable block device {top_name!r} under {ctx.sysfs.root}",
                         hint=f"devices here: {known}")
    top = by_name[top_name]
    below = [by_name[n] for n in graph.below(top_name) if n in by_name]
    if top.has_scheduler:
        scheduled = [top]
    else:
        bottoms = set(graph.bottom(top_name))
        scheduled = [d for d in below if d.name in bottoms and d.has_scheduler]
    nodes = {d.name: ctx.roots.node(d.name) for d in [top, *below]}
    return Stack(target, kind, read_path, size, top, below, scheduled, nodes)


def check_nodes(ctx: Context, stack: Stack) -> None:
    """Each /dev node must be the device sysfs describes (a fake --sysfs-root must not steer real I/O)."""
    if ctx.roots.dev is None:
        raise UsageError(f"{stack.target}: {ctx.sysfs.root} describes another machine, whose device nodes "
                         "are not here", hint="bench reads real devices: use the real /sys (no --sysfs-root)")
    wanted = [(stack.nodes[d.name] or d.name, d.devnum) for d in stack.devices]
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
