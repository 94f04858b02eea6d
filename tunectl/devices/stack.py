"""What lies under a name: a `Stack` of typed `Layer`s, from a file down to the disks that hold its data.

The one place that answers "what is this target made of": ``bench`` sweeps the
top of it, ``explain`` describes it. It is built from the run's one
`DeviceGraph` and its discovered `Device` records (both held by the run's
`Resolver`), so nothing here reads sysfs again, and nothing outside
`tunectl.devices` resolves a file or a name to block devices on its own.

API::

    resolver = Resolver(ctx, devices, graph)    # one per run: the graph is read once
    stack = resolver.stack("/srv/db/file")      # or "sda", "/dev/mapper/vg-lv", a mountpoint ...
    stack.layers     # top first: FileLayer, MountLayer, PartitionLayer, then whole-device layers
    stack.top        # the whole device whose queue serves the target (a partition shares its disk's)
    stack.below      # every whole device under `top`, nearest first
    stack.disks      # the whole devices at the bottom (where a bio-based top's I/O is scheduled)
    stack.devices    # [top, *below]
    stack.layer(name)                     # the layer of one block device, by kernel name
    Stack.of(graph, devices, name)        # pure: the stack of kernel name `name` (partition or whole)

Layers (frozen dataclasses; `kind` names each in JSON and text):

- `FileLayer` (``file``: path, size), `MountLayer` (``mount``: target,
  fstype, source; only when the run may read live mounts),
- `PartitionLayer` (``partition``: the `Partition`, its whole `disk`),
- whole devices, each a `BlockLayer` holding its `Device` and the names of the
  whole devices right below it (`lower`), so a dm over two disks is a tree laid
  out breadth-first: `LoopLayer` (``loop``), `DmLayer` (``dm``, with `subtype`:
  lvm, crypt, verity, multipath ... from the dm uuid), `MdLayer` (``md``),
  `DiskLayer` (``disk``: everything else, zram and nbd included; `Device.cls`
  says which).

Every layer has `facts`, None as the resolver builds it: what a layer is made
of beyond its identity (a loop's backing file and direct I/O, a dm table, an md
level, a queue's values, a squashfs superblock) is read only by the one command
that asks for it. ``explain`` attaches them (`tunectl.explain.facts`, through
`Layer.with_facts`) as the typed facts of the layer's kind
(`tunectl.explain.model`), so it describes these very layers and builds no
stack of its own. `facts` is not a dataclass field (plan's path builds these
classes at import and pays nothing for it) and takes no part in equality.

To add a kind of layer, subclass `BlockLayer` and add it to `_BLOCK_KINDS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tunectl.devices.graph import DeviceGraph
from tunectl.devices.model import Device, Partition
from tunectl.record import field, record

TYPE_CHECKING = False  # typing is not imported for an annotation
if TYPE_CHECKING:
    from typing import Protocol

    class LayerFacts(Protocol):
        """What a command read about one layer (explain's typed facts per kind)."""

        def to_json(self) -> dict: ...

    from typing import TypeVar

    _L = TypeVar("_L", bound="Layer")


class Layer:
    __slots__ = ()
    kind = "layer"
    facts: LayerFacts | None = None  # not a field: no dataclass gets dearer to build at import (plan's path)

    def with_facts(self: _L, facts: LayerFacts) -> _L:
        """A copy of this layer carrying `facts`; this one is left as it is. `facts` is not a field (equality,
        repr and the constructor ignore it): a layer is the same layer with or without its facts."""
        import copy

        layer = copy.copy(self)
        object.__setattr__(layer, "facts", facts)  # the copy is frozen like any layer; facts are set once, here
        return layer

    @property
    def label(self) -> str:
        """How the layer is named to people (a path, a kernel name)."""
        raise NotImplementedError


@record(frozen=True)
class FileLayer(Layer):
    kind = "file"
    path: str
    size: int  # bytes
    # where the resolver's walk of `path` led (its links followed, from descriptors): "" when not walked (a fake
    # tree). A later look by name may find another path (whoever owns a directory on the way can swap in a link).
    reached: str = ""

    @property
    def label(self) -> str:
        return self.path


@record(frozen=True)
class MountLayer(Layer):
    kind = "mount"
    target: str
    fstype: str
    source: str

    @property
    def label(self) -> str:
        return self.target


@record(frozen=True)
class PartitionLayer(Layer):
    kind = "partition"
    partition: Partition
    disk: Device  # the whole device it is a partition of (whose queue serves it)

    @property
    def label(self) -> str:
        return self.partition.name

    @property
    def name(self) -> str:
        return self.partition.name


@record(frozen=True)
class BlockLayer(Layer):
    """A whole block device with a queue of its own."""

    kind = "block"
    device: Device
    lower: tuple[str, ...] = ()  # kernel names of the whole devices right below it (dm/md slaves, their disks)

    @property
    def label(self) -> str:
        return self.device.name

    @property
    def name(self) -> str:
        return self.device.name


class LoopLayer(BlockLayer):  # no fields of its own: no dataclass to build at import
    kind = "loop"


class DmLayer(BlockLayer):  # no fields of its own: no dataclass to build at import
    kind = "dm"

    @property
    def subtype(self) -> str | None:
        """lvm, crypt, verity, multipath ... (from the dm uuid's prefix); None when it names none."""
        return self.device.dm_type


class MdLayer(BlockLayer):  # no fields of its own: no dataclass to build at import
    kind = "md"


class DiskLayer(BlockLayer):  # no fields of its own: no dataclass to build at import
    kind = "disk"


_BLOCK_KINDS: dict[str, type[BlockLayer]] = {"loop": LoopLayer, "dm": DmLayer, "md": MdLayer}


def _block_layer(device: Device, lower: Iterable[str]) -> BlockLayer:
    return _BLOCK_KINDS.get(device.cls, DiskLayer)(device, tuple(lower))


@record(frozen=True)
class Stack:
    layers: tuple[Layer, ...]  # top first
    top: Device
    below: tuple[Device, ...] = ()
    disks: tuple[Device, ...] = field(default=())  # the bottom of the stack (`top` itself when nothing is below)

    @property
    def devices(self) -> list[Device]:
        return [self.top, *self.below]

    @property
    def blocks(self) -> list[BlockLayer]:
        return [layer for layer in self.layers if isinstance(layer, BlockLayer)]

    @property
    def file(self) -> FileLayer | None:
        return next((layer for layer in self.layers if isinstance(layer, FileLayer)), None)

    @property
    def mount(self) -> MountLayer | None:
        return next((layer for layer in self.layers if isinstance(layer, MountLayer)), None)

    @property
    def partition(self) -> PartitionLayer | None:
        return next((layer for layer in self.layers if isinstance(layer, PartitionLayer)), None)

    def layer(self, name: str) -> Layer | None:
        """The partition or block layer of kernel name `name`."""
        for layer in self.layers:
            if isinstance(layer, (PartitionLayer, BlockLayer)) and layer.name == name:
                return layer
        return None

    def over(self, *upper: Layer) -> Stack:
        """This stack with `upper` (a file, its mount) laid on top."""
        return Stack((*upper, *self.layers), self.top, self.below, self.disks)

    @classmethod
    def of(cls, graph: DeviceGraph, devices: Mapping[str, Device], name: str) -> Stack:
        """The stack under kernel name `name` (a partition or a whole device that `devices` holds).

        Whole devices the graph knows but `devices` does not (not tunable: no queue)
        are left out. KeyError when `name`'s whole device is not in `devices`.
        """
        top_name = graph.whole(name)
        top = devices[top_name]
        below = tuple(devices[n] for n in graph.below(top_name) if n in devices)
        layers: list[Layer] = []
        parent = graph.parent_of(name)
        if parent is not None:
            part = next((p for p in top.partitions if p.name == name), Partition(name, 0, 0))
            layers.append(PartitionLayer(part, top))

        for dev in (top, *below):
            layers.append(_block_layer(dev, _direct(graph, dev.name, devices)))
        bottoms = set(graph.bottom(top_name))
        disks = tuple(d for d in below if d.name in bottoms) or (top,)
        return cls(tuple(layers), top, below, disks)


def _direct(graph: DeviceGraph, name: str, devices: Mapping[str, Device]) -> list[str]:
    """The whole devices right below whole device `name` (its slaves, partitions counted as their disk)."""
    out: list[str] = []
    for slave in graph.slaves.get(name, ()):
        whole = graph.whole(slave)
        if whole in devices and whole != name and whole not in out:
            out.append(whole)
    return out
