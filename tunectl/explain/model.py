"""What explain knows about one stack: typed facts per layer, a cold read per device, trace timings.

The layers are `tunectl.devices.stack`'s, the one stack model: each layer's
`facts` slot holds the facts of its kind defined here (`FileFacts` for a
`FileLayer`, `FilesystemFacts` for a `MountLayer`, `PartitionFacts` for a
`PartitionLayer`, `BlockFacts` for a loop, dm, md or disk layer). Pure data.
`facts` (the edge) fills them from the machine; `rules` reads them; `report`
renders them. Every record has `to_json`; `layer_json` is the
`tunectl-explain` shape of a layer.
"""

from __future__ import annotations

from tunectl.bench.diskstat import StatDelta
from tunectl.devices import stack as stacks
from tunectl.explain.dmtable import Target
from tunectl.explain.squashfs import Superblock
from tunectl.explain.trace import Timing
from tunectl.owners.model import Owner
from tunectl.record import field, record

PAGE_SIZE = 4096


@record(frozen=True)
class Queue:
    """A block device's queue as sysfs shows it (None: the attribute is not there)."""

    scheduler: str | None
    read_ahead_kb: int | None
    max_sectors_kb: int | None
    rotational: bool | None
    nr_requests: int | None
    logical_block_size: int | None
    queue_depth: int | None = None  # device/queue_depth (SCSI/SATA); None elsewhere

    def to_json(self) -> dict:
        return {"scheduler": self.scheduler, "read_ahead_kb": self.read_ahead_kb,
                "max_sectors_kb": self.max_sectors_kb, "rotational": self.rotational,
                "nr_requests": self.nr_requests, "logical_block_size": self.logical_block_size,
                "queue_depth": self.queue_depth}


@record(frozen=True)
class FileFacts:
    """A `FileLayer`'s facts (its path and size are the layer's)."""

    extents: int | None  # None: the filesystem has no FIEMAP (squashfs)

    def to_json(self) -> dict:
        return {"extents": self.extents}


@record(frozen=True)
class FilesystemFacts:
    """A `MountLayer`'s facts (its mountpoint, type and source are the layer's)."""

    block_size: int | None  # ext4/xfs block size; squashfs: its device block size
    squashfs: Superblock | None = None

    def to_json(self) -> dict:
        return {"block_size": self.block_size, "squashfs": self.squashfs.to_json() if self.squashfs else None}


@record(frozen=True)
class LoopFacts:
    backing_file: str | None
    offset: int
    direct_io: bool
    backing_read_ahead_kb: int | None  # read_ahead_kb of the device the backing file's filesystem is on
    backing_device: str | None

    def to_json(self) -> dict:
        return {"backing_file": self.backing_file, "offset": self.offset, "direct_io": self.direct_io,
                "backing_read_ahead_kb": self.backing_read_ahead_kb, "backing_device": self.backing_device}


@record(frozen=True)
class MdFacts:
    level: str | None
    chunk_kib: int | None

    def to_json(self) -> dict:
        return {"level": self.level, "chunk_kib": self.chunk_kib}


@record(frozen=True)
class PartitionFacts:
    """A `PartitionLayer`'s facts (its start is the layer's `Partition`)."""

    aligned_1mib: bool

    def to_json(self) -> dict:
        return {"aligned_1mib": self.aligned_1mib}


@record(frozen=True)
class BlockFacts:
    """A whole device's facts (`LoopLayer`, `DmLayer`, `MdLayer`, `DiskLayer`): its queue and who set it, and
    what its kind adds (a loop's backing file, a dm table, an md level)."""

    queue: Queue
    owners: dict[str, Owner] = field(default_factory=dict)  # attribute -> who set it
    loop: LoopFacts | None = None
    dm_table: tuple[Target, ...] = ()
    md: MdFacts | None = None

    def target(self, kind: str) -> Target | None:
        return next((t for t in self.dm_table if t.type == kind), None)

    def to_json(self) -> dict:
        return {"queue": self.queue.to_json(), "loop": self.loop.to_json() if self.loop else None,
                "dm_table": [t.to_json() for t in self.dm_table], "md": self.md.to_json() if self.md else None,
                "owners": {k: v.to_json() for k, v in sorted(self.owners.items())}}


def kind(layer: stacks.Layer) -> str:
    """The layer's kind in explain's words: file, filesystem (a `MountLayer`), partition, loop, dm, md, disk."""
    return "filesystem" if isinstance(layer, stacks.MountLayer) else layer.kind


def layer_json(la: stacks.Layer) -> dict:
    """One layer of the stack with its facts, the `tunectl-explain` shape of a layer."""
    f = la.facts
    block = la if isinstance(la, stacks.BlockLayer) else None
    bf = f if isinstance(f, BlockFacts) else None
    file = filesystem = partition = None
    if isinstance(la, stacks.FileLayer):
        file = {"path": la.path, "size": la.size, "extents": f.extents if isinstance(f, FileFacts) else None}
    elif isinstance(la, stacks.MountLayer):
        fs = f if isinstance(f, FilesystemFacts) else FilesystemFacts(None)
        filesystem = {"fstype": la.fstype, "mountpoint": la.target, "source": la.source, **fs.to_json()}
    elif isinstance(la, stacks.PartitionLayer):
        start = la.partition.start
        partition = {"start_sectors": start, "aligned_1mib": f.aligned_1mib if isinstance(f, PartitionFacts)
                     else start * 512 % (1 << 20) == 0}
    return {"kind": kind(la), "name": la.label, "class": block.device.cls if block else None,
            "devnum": block.device.devnum if block else None,
            "queue": bf.queue.to_json() if bf else None, "file": file, "filesystem": filesystem,
            "loop": bf.loop.to_json() if bf and bf.loop else None,
            "dm": ({"subtype": la.subtype, "table": [t.to_json() for t in bf.dm_table] if bf else []}
                   if isinstance(la, stacks.DmLayer) else None),
            "md": bf.md.to_json() if bf and bf.md else None,
            "partition": partition,
            "owners": {k: v.to_json() for k, v in sorted(bf.owners.items())} if bf else {}}


def once(layers: list[stacks.Layer] | tuple[stacks.Layer, ...]) -> tuple[stacks.Layer, ...]:
    """Each layer once, where it first appears: the loops under one dm device (dm-verity's data and hash devices)
    have their backing files on the same filesystem, partition and disk, which the flat list names only once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for layer in layers:
        if (kind(layer), layer.label) not in seen:
            seen.add((kind(layer), layer.label))
            out.append(layer)
    return tuple(out)


@record(frozen=True)
class StackFacts:
    """The layers explain describes, top first: the target's `Stack` layers, each loop's followed by the layers
    of its backing file's stack, each layer once, every one with its `facts` filled (`tunectl.explain.facts`)."""

    target: str
    kernel: tuple[int, int]  # (major, minor) of the running kernel
    release: str
    layers: tuple[stacks.Layer, ...]  # top first

    def first(self, kind_: str) -> stacks.Layer | None:
        return next((la for la in self.layers if kind(la) == kind_), None)

    def all(self, kind_: str) -> list:
        return [la for la in self.layers if kind(la) == kind_]

    @property
    def file(self) -> stacks.FileLayer | None:
        """The target file (the first layer), not a loop's backing file further down."""
        top = self.layers[0] if self.layers else None
        return top if isinstance(top, stacks.FileLayer) else None

    @property
    def filesystem(self) -> stacks.MountLayer | None:
        """The filesystem holding the target file (the layer right under it)."""
        under = self.layers[1] if self.file and len(self.layers) > 1 else None
        return under if isinstance(under, stacks.MountLayer) else None

    @property
    def blocks(self) -> list[stacks.BlockLayer]:
        return [la for la in self.layers if isinstance(la, stacks.BlockLayer)]

    @property
    def disks(self) -> list[stacks.BlockLayer]:
        """The bottom of the stack: the block layers nothing else is read from."""
        return [la for la in self.blocks if la.kind == "disk"] or self.blocks[-1:]

    def to_json(self) -> dict:
        return {"target": self.target, "kernel": self.release, "layers": [layer_json(la) for la in self.layers]}


@record(frozen=True)
class ColdRead:
    """One cold read of the target: the bytes, the time, and what every block layer did meanwhile."""

    path: str
    read_size: int
    bytes: int
    seconds: float
    devices: tuple[StatDelta, ...]  # top first
    kept: tuple[str, ...] = ()  # block devices whose cached pages could not be dropped (not permitted)

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def of(self, device: str) -> StatDelta | None:
        return next((d for d in self.devices if d.device == device), None)

    def to_json(self) -> dict:
        return {"path": self.path, "read_size": self.read_size, "bytes": self.bytes, "not_dropped": list(self.kept),
                "seconds": round(self.seconds, 4), "mb_s": round(self.mb_s, 1),
                "devices": [{**d.to_json(), "mb_s": round(d.sectors_read * 512 / self.seconds / 1e6, 1)
                             if self.seconds > 0 else 0.0} for d in self.devices]}


@record(frozen=True)
class Trial:
    """One `--try` variant as the rules read it: how the scratch copy was built and how fast it read cold."""

    block_size: int
    compressor: str
    direct_io: bool
    as_is: bool  # built like the user's image
    mb_s: float
    label: str


@record(frozen=True)
class Case:
    """Everything the rules read."""

    stack: StackFacts
    cold: ColdRead | None = None
    trace: dict[str, Timing] | None = None  # kernel name -> timing
    trials: tuple[Trial, ...] = ()  # --try's variants, measured
