"""What explain knows about one stack: typed facts per layer, a cold read per device, trace timings.

Pure data. `facts` (the edge) fills it from the machine; `rules` reads it;
`report` renders it. Every record has `to_json`, the `tunectl-explain` shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tunectl.bench.diskstat import StatDelta
from tunectl.explain.dmtable import Target
from tunectl.explain.squashfs import Superblock
from tunectl.explain.trace import Timing
from tunectl.owners.model import Owner

PAGE_SIZE = 4096


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class FileFacts:
    path: str
    size: int
    extents: int | None  # None: the filesystem has no FIEMAP (squashfs)

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "extents": self.extents}


@dataclass(frozen=True)
class FilesystemFacts:
    fstype: str
    mountpoint: str
    source: str
    block_size: int | None  # ext4/xfs block size; squashfs: its device block size
    squashfs: Superblock | None = None

    def to_json(self) -> dict:
        return {"fstype": self.fstype, "mountpoint": self.mountpoint, "source": self.source,
                "block_size": self.block_size, "squashfs": self.squashfs.to_json() if self.squashfs else None}


@dataclass(frozen=True)
class LoopFacts:
    backing_file: str | None
    offset: int
    direct_io: bool
    backing_read_ahead_kb: int | None  # read_ahead_kb of the device the backing file's filesystem is on
    backing_device: str | None

    def to_json(self) -> dict:
        return {"backing_file": self.backing_file, "offset": self.offset, "direct_io": self.direct_io,
                "backing_read_ahead_kb": self.backing_read_ahead_kb, "backing_device": self.backing_device}


@dataclass(frozen=True)
class MdFacts:
    level: str | None
    chunk_kib: int | None

    def to_json(self) -> dict:
        return {"level": self.level, "chunk_kib": self.chunk_kib}


@dataclass(frozen=True)
class PartitionFacts:
    start_sectors: int
    aligned_1mib: bool

    def to_json(self) -> dict:
        return {"start_sectors": self.start_sectors, "aligned_1mib": self.aligned_1mib}


@dataclass(frozen=True)
class Layer:
    kind: str  # file, filesystem, loop, dm, md, partition, disk
    name: str  # a path, or a kernel name
    cls: str | None = None  # the device class (disk layers)
    devnum: str | None = None
    queue: Queue | None = None
    file: FileFacts | None = None
    filesystem: FilesystemFacts | None = None
    loop: LoopFacts | None = None
    dm_subtype: str | None = None
    dm_table: tuple[Target, ...] = ()
    md: MdFacts | None = None
    partition: PartitionFacts | None = None
    owners: dict[str, Owner] = field(default_factory=dict)  # attribute -> who set it

    @property
    def block(self) -> bool:
        return self.queue is not None

    def target(self, kind: str) -> Target | None:
        return next((t for t in self.dm_table if t.type == kind), None)

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "class": self.cls, "devnum": self.devnum,
                "queue": self.queue.to_json() if self.queue else None,
                "file": self.file.to_json() if self.file else None,
                "filesystem": self.filesystem.to_json() if self.filesystem else None,
                "loop": self.loop.to_json() if self.loop else None,
                "dm": ({"subtype": self.dm_subtype, "table": [t.to_json() for t in self.dm_table]}
                       if self.kind == "dm" else None),
                "md": self.md.to_json() if self.md else None,
                "partition": self.partition.to_json() if self.partition else None,
                "owners": {k: v.to_json() for k, v in sorted(self.owners.items())}}


def once(layers: list[Layer] | tuple[Layer, ...]) -> tuple[Layer, ...]:
    """Each layer once, where it first appears: the loops under one dm device (dm-verity's data and hash devices)
    have their backing files on the same filesystem, partition and disk, which the flat list names only once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for layer in layers:
        if (layer.kind, layer.name) not in seen:
            seen.add((layer.kind, layer.name))
            out.append(layer)
    return tuple(out)


@dataclass(frozen=True)
class StackFacts:
    target: str
    kernel: tuple[int, int]  # (major, minor) of the running kernel
    release: str
    layers: tuple[Layer, ...]  # top first

    def first(self, kind: str) -> Layer | None:
        return next((la for la in self.layers if la.kind == kind), None)

    def all(self, kind: str) -> list[Layer]:
        return [la for la in self.layers if la.kind == kind]

    @property
    def blocks(self) -> list[Layer]:
        return [la for la in self.layers if la.block]

    @property
    def disks(self) -> list[Layer]:
        """The bottom of the stack: the block layers nothing else is read from."""
        return [la for la in self.blocks if la.kind == "disk"] or self.blocks[-1:]

    def to_json(self) -> dict:
        return {"target": self.target, "kernel": self.release, "layers": [la.to_json() for la in self.layers]}


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Case:
    """Everything the rules read."""

    stack: StackFacts
    cold: ColdRead | None = None
    trace: dict[str, Timing] | None = None  # kernel name -> timing
