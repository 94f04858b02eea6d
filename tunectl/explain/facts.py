"""The edge that reads a stack's facts from the machine: sysfs, the superblock, dmsetup, the applied profile.

The stack itself (which devices, in which order) comes from `tunectl.devices`'
one resolver; this module only reads what each layer is made of.
"""

from __future__ import annotations

import os
import stat

from tunectl.context import Context
from tunectl.devices import stack as stacks
from tunectl.devices.model import Device
from tunectl.errors import TunectlError, UsageError
from tunectl.explain import dmtable, squashfs
from tunectl.explain.model import (
    BlockFacts,
    FileFacts,
    FilesystemFacts,
    LoopFacts,
    MdFacts,
    PartitionFacts,
    Queue,
    StackFacts,
    once,
)
from tunectl.owners.model import Owner

OWNED = ("scheduler", "read_ahead_kb", "max_sectors_kb", "nr_requests")


def kernel_version(release: str) -> tuple[int, int]:
    """"6.1.0-27-amd64" -> (6, 1); (0, 0) for anything else."""
    parts = release.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _queue(ctx: Context, dev: Device) -> Queue:
    def attr(name: str) -> int | None:
        return _int(ctx.sysfs.read_or(f"block/{dev.name}/queue/{name}"))

    # bio-based queues (dm, md: no mq/) list nr_requests on 6.1 but have no requests to count
    nr = attr("nr_requests") if ctx.sysfs.exists(f"block/{dev.name}/mq") else None
    # SCSI/SATA say their queue depth in device/; blk-mq devices as the tags of their first hardware queue
    depth = _int(ctx.sysfs.read_or(f"block/{dev.name}/device/queue_depth"))
    if depth is None:
        depth = _int(ctx.sysfs.read_or(f"block/{dev.name}/mq/0/nr_tags"))
    return Queue(dev.scheduler, attr("read_ahead_kb"), attr("max_sectors_kb"), dev.rotational, nr,
                 dev.logical_block_size, depth)


def extent_count(path: str, opened: int | None = None) -> int | None:
    """How many extents the file at `path` has (`opened`: a descriptor on it, used instead of the name).

    By name (a loop's backing file), it is opened as a listed file is: looked at first, never blocking, through
    no other user's link. A plain open blocked for good on a named pipe the owner of the file's directory put in
    its place after the stack was read, and root's `explain` of the loop waited with it."""
    from tunectl.system import pagecache, trust

    try:
        fd = trust.open_listed(os.path.abspath(path)) if opened is None else opened
    except (OSError, trust.Untrusted):
        return None
    try:
        extents = pagecache.fiemap(fd, count=4096)
    except OSError:
        return None
    finally:
        if opened is None:
            os.close(fd)
    return None if extents is None else len(extents)


def open_file(resolver, stack: stacks.Stack, strict: bool) -> int | None:
    """A descriptor on the file `stack` was resolved for (None: the stack is of no file), through which explain
    reads its extents and times its cold read: a user's file named to root cannot be swapped for another.

    Its links are resolved first, each root's or the user's (another user's link is refused, not followed),
    then it is opened through no link at all, and it must be the file the stack was read from (the same
    filesystem device and size): a directory on the way swapped for a link since, or a file swapped in, is
    refused (UsageError), never measured. `strict`: a file that cannot be opened is an error (a cold read
    follows); otherwise None, and the facts go without its extents.
    """
    from tunectl.system import trust

    file = stack.file
    if file is None:
        return None
    try:
        fd = trust.open_listed(str(trust.resolve_own_links(file.path)), links=False)
    except trust.Untrusted as e:
        raise UsageError(e.message, hint=e.hint) from None
    except OSError as e:
        if strict:
            raise UsageError(f"cannot open {file.path}: {e.strerror}") from None
        return None
    st = os.fstat(fd)
    names = {stack.top.name, *([stack.partition.name] if stack.partition else [])}
    if st.st_size != file.size or resolver.name_of_devnum(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}") not in names:
        os.close(fd)
        raise UsageError(f"{file.path}: changed while tunectl looked at it (not the file its stack was read from)",
                         hint="run again; if it recurs, find who changes it")
    return fd


def read_superblock(node: str | None) -> squashfs.Superblock | None:
    """The squashfs superblock at the start of a block device node; None when it cannot be read."""
    if not node:
        return None
    try:
        fd = os.open(node, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISBLK(os.fstat(fd).st_mode):
            return None
        return squashfs.parse(os.pread(fd, squashfs.SIZE, 0))
    except (OSError, squashfs.NotSquashfs):
        return None
    finally:
        os.close(fd)


def _loop(ctx: Context, resolver, name: str) -> LoopFacts:
    base = f"block/{name}/loop"
    backing = (ctx.sysfs.read_or(f"{base}/backing_file") or "").strip() or None
    backing_dev = None
    backing_ra = None
    if backing:
        found = resolver.name_of_path(backing)
        if found:
            backing_dev = resolver.whole(found)
            backing_ra = _int(ctx.sysfs.read_or(f"block/{backing_dev}/queue/read_ahead_kb"))
    return LoopFacts(backing, _int(ctx.sysfs.read_or(f"{base}/offset")) or 0,
                     (ctx.sysfs.read_or(f"{base}/dio") or "0").strip() == "1", backing_ra, backing_dev)


def _dm_table(ctx: Context, dev: Device) -> tuple[dmtable.Target, ...]:
    if not dev.dm_name:
        return ()
    try:
        done = ctx.run(["dmsetup", "table", "--", dev.dm_name], timeout=10)
        return tuple(dmtable.parse(done.stdout))
    except (TunectlError, OSError, dmtable.BadTable):
        return ()


def _md(ctx: Context, name: str) -> MdFacts:
    chunk = _int(ctx.sysfs.read_or(f"block/{name}/md/chunk_size"))
    return MdFacts((ctx.sysfs.read_or(f"block/{name}/md/level") or "").strip() or None,
                   chunk // 1024 if chunk else None)


def owners(ctx: Context, devices: list[Device], queues: dict[str, Queue]) -> dict[str, dict[str, Owner]]:
    """device -> attribute -> who set its current value (tunectl's owners: tunectl's journal, other writers on
    the machine, or the kernel's default), for the queue values explain shows."""
    from tunectl.owners import find_owners

    shown = {dev.name: [a for a in OWNED if dev.name in queues and getattr(queues[dev.name], a) is not None]
             for dev in devices}
    found = find_owners(ctx, devices, attributes=shown)
    return {name: dict(found[name].owners) for name in found}


def read(ctx: Context, resolver, stack: stacks.Stack, target: str, release: str | None = None,
         opened: int | None = None) -> StackFacts:
    """Every layer of `stack` with its facts, top first (the same layers, their `facts` filled).

    A loop device's backing file is not in sysfs' slaves/: the stack under it (the
    file, its filesystem, partition and disk) follows the loop layer. `opened`: the
    target file's descriptor (`open_file`), its extents read through it.
    """
    release = release or os.uname().release
    return StackFacts(target, kernel_version(release), release, once(_layers(ctx, resolver, stack, set(), opened)))


def _layers(ctx: Context, resolver, stack, seen: set[str], opened: int | None = None) -> list[stacks.Layer]:
    """`stack`'s layers with their facts filled, each loop followed by the layers under its backing file."""
    queues = {dev.name: _queue(ctx, dev) for dev in stack.devices}
    owned = owners(ctx, stack.devices, queues)
    layers: list[stacks.Layer] = []
    for layer in stack.layers:
        if isinstance(layer, stacks.FileLayer):
            layers.append(layer.with_facts(FileFacts(extent_count(layer.path, opened))))
        elif isinstance(layer, stacks.MountLayer):
            holder = stack.partition.name if stack.partition else stack.top.name
            sb = read_superblock(ctx.roots.node(holder)) if layer.fstype == "squashfs" else None
            try:
                bsize = os.statvfs(layer.target).f_bsize
            except OSError:
                bsize = None
            layers.append(layer.with_facts(FilesystemFacts(bsize, sb)))
        elif isinstance(layer, stacks.PartitionLayer):
            layers.append(layer.with_facts(PartitionFacts(layer.partition.start * 512 % (1 << 20) == 0)))
        elif isinstance(layer, stacks.BlockLayer):
            dev = layer.device
            if dev.name in seen:
                continue
            seen.add(dev.name)
            loop = _loop(ctx, resolver, dev.name) if isinstance(layer, stacks.LoopLayer) else None
            table = _dm_table(ctx, dev) if isinstance(layer, stacks.DmLayer) else ()
            md = _md(ctx, dev.name) if isinstance(layer, stacks.MdLayer) else None
            layers.append(layer.with_facts(BlockFacts(queues[dev.name], owned.get(dev.name, {}), loop, table, md)))
            if loop and loop.backing_file and os.path.isfile(loop.backing_file):
                try:
                    under = resolver.stack(loop.backing_file)
                except TunectlError:
                    continue
                layers += _layers(ctx, resolver, under, seen)
    return layers
