"""What a bench target is: the file or device read, and where its read-ahead and scheduler are swept.

What lies under the target comes from the one resolver (`Resolver.stack`, a
typed `tunectl.devices.stack.Stack`); this module only adds what bench needs on
top: the path each point reads, how much there is, the devices whose scheduler
is swept, and their /dev nodes.
"""

from __future__ import annotations

import os

from tunectl.attributes import SCHEDULER_MODULE_NAMES, modular_schedulers
from tunectl.context import Context
from tunectl.devices.discover import discover
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.devices.stack import MountLayer, Stack
from tunectl.errors import UsageError
from tunectl.record import record
from tunectl.system import blockio


@record
class Target:
    target: str  # as named on the command line
    kind: str  # "device" | "file"
    read_path: str  # what each point reads
    read_bytes: int  # what there is to read (capped later by --size)
    stack: Stack  # what lies under it, top first
    scheduled: list[Device]  # where the scheduler is swept: `top`, or the disks below a bio-based top
    nodes: dict[str, str | None]  # device name -> its /dev node (for dropping its cached pages); None: none
    kept_cache: str = ""  # a cache under the file no drop between points reaches (`kept_cache`); "": none known

    @property
    def top(self) -> Device:
        """The whole device whose read_ahead_kb is swept (the filesystem's, or the named one)."""
        return self.stack.top

    @property
    def below(self) -> list[Device]:
        """Every device under `top`, nearest first (dm/md slaves, then their disks)."""
        return list(self.stack.below)

    @property
    def devices(self) -> list[Device]:
        return self.stack.devices

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


def resolve(ctx: Context, target: str) -> Target:
    devices = discover(ctx.sysfs, ctx.udev, None, modular_schedulers(ctx.modules.loadable(SCHEDULER_MODULE_NAMES)))
    stack = Resolver(ctx, devices).stack(target)
    top = stack.top
    if stack.file is not None:
        kind, read_path, size = "file", stack.file.path, stack.file.size
    else:
        part = stack.partition
        kind, read_path = "device", ctx.roots.node(part.name if part else top.name) or ""
        size = part.partition.size * 512 if part else top.size_bytes
    if top.has_scheduler:
        scheduled = [top]
    else:
        scheduled = [d for d in stack.disks if d is not top and d.has_scheduler]
    nodes = {d.name: ctx.roots.node(d.name) for d in stack.devices}
    return Target(target, kind, read_path, size, stack, scheduled, nodes, kept_cache(stack, ctx.modules.release))


def kept_cache(stack: Stack, release: str) -> str:
    """What the sweep's drops between points cannot empty under this file, said for the report; "" when none known.

    squashfs from 6.5 on a device of page-sized logical blocks (a 4 KiB dm-verity, a 4Kn disk) keeps the partial
    compressed blocks it read (tunectl.explain.squashfs): after the warm read every point finds them cached."""
    from tunectl.explain.facts import kernel_version
    from tunectl.explain.squashfs import caches_partial_blocks

    mount = next((la for la in stack.layers if isinstance(la, MountLayer)), None)
    if mount is None or mount.fstype != "squashfs" or \
            not caches_partial_blocks(kernel_version(release), stack.top.logical_block_size):
        return ""
    return (f"these points were not cold reads: squashfs on {stack.top.name} (kernel {release}, "
            f"{stack.top.logical_block_size}-byte blocks) keeps the compressed blocks it has read in a cache of its "
            "own that bench cannot empty between points (only an unmount or vm.drop_caches does), so the disks saw "
            f"fewer reads than a cold start; to measure cold reads, bench the device ({stack.top.name}) instead")


def check_nodes(ctx: Context, stack: Target) -> None:
    """Each /dev node must be the device sysfs describes (a fake --sysfs-root must not steer real I/O)."""
    if ctx.roots.dev is None:
        raise UsageError(f"{stack.target}: {ctx.sysfs.root} describes another machine, whose device nodes "
                         "are not here", hint="bench reads real devices: use the real /sys (no --sysfs-root)")
    wanted = [(stack.nodes[d.name] or d.name, d.devnum) for d in stack.devices]
    for path, devnum in wanted:
        found = blockio.node_devnum(path)
        if found is None or found != devnum:
            raise UsageError(f"{path} is {'not a block device' if found is None else 'device ' + found}, "
                             f"but sysfs under {ctx.sysfs.root} says it is {devnum or 'not there'}",
                             hint="bench reads real devices: use the real /sys (no --sysfs-root)")
    if stack.read_bytes <= 0:
        raise UsageError(f"{stack.target} is empty: nothing to read")


@record(frozen=True)
class Opened:
    """The target as the sweep reads it: opened once, after every check (`open_target`)."""

    path: str  # the name it was opened by (`Target.read_path`): for messages and the report only
    fd: int  # every read, drop and fio run of the sweep goes through this descriptor, never `path` again


def open_target(ctx: Context, stack: Target) -> Opened:
    """Open what the sweep reads, once (`blockio.open_read`): a regular file for a file target, the block device
    node for a device. Whoever owns a directory on the path could otherwise swap the name between the look and the
    reads (a named pipe: bench blocks forever; a link to a device node or a root file: root opens it), so the
    sweep reads only through this descriptor. The open file must still be on the device the resolver found
    (a file's filesystem, or the node itself: checked on the descriptor, not by name), and what there is to read
    is its size now; a file that grows meanwhile is read no further than that. The caller closes `fd`."""
    part = stack.stack.partition
    name = part.name if part else stack.top.name
    fd, st = blockio.open_read(stack.read_path, stack.kind == "device")
    try:
        found = st.st_rdev if stack.kind == "device" else st.st_dev
        devnum, wanted = f"{os.major(found)}:{os.minor(found)}", ctx.sysfs.read_or(f"class/block/{name}/dev")
        if devnum != wanted:
            where = "is device" if stack.kind == "device" else "is now a file on device"
            raise UsageError(f"{stack.read_path} {where} {devnum}, but {name} is {wanted or 'not there'} "
                             f"(under {ctx.sysfs.root})", hint="it changed since it was looked up: run again; name "
                             "a file no other user can replace, or the device itself", where=stack.target)
        if stack.kind == "file":
            stack.read_bytes = st.st_size
            if st.st_size <= 0:
                raise UsageError(f"{stack.target} is empty: nothing to read")
    except BaseException:
        os.close(fd)
        raise
    return Opened(stack.read_path, fd)
