"""How block devices stack: partitions on disks, dm and md on partitions and disks.

One DeviceGraph per run, read from sysfs (``block/*``, their partitions,
``slaves/`` and ``holders/``) or built from discovered Device records. It
answers every stacking question: a partition's disk, what lies below or above
a device, and the whole stack around some devices.
"""

from __future__ import annotations

from collections.abc import Iterable

from tunectl.devices.model import Device
from tunectl.record import field, record
from tunectl.system.sysfs import Sysfs


def partition_names(sysfs: Sysfs, name: str) -> list[str]:
    """The partitions of whole device `name` (``sda1``, ``nvme0n1p2``), as sysfs lists them."""
    return [e for e in sysfs.listdir(f"block/{name}") if e.startswith(name) and sysfs.exists(f"block/{name}/{e}/partition")]


@record
class DeviceGraph:
    """How the block devices stack: each whole device's slaves and holders, each partition's disk (read once a run)."""

    slaves: dict[str, tuple[str, ...]] = field(default_factory=dict)  # whole device -> slaves/ (partitions or disks)
    holders: dict[str, tuple[str, ...]] = field(default_factory=dict)  # whole device -> stacked on it or its partitions
    parents: dict[str, str] = field(default_factory=dict)  # partition -> its whole disk

    @classmethod
    def read(cls, sysfs: Sysfs) -> DeviceGraph:
        graph = cls()
        for name in sysfs.listdir("block"):
            parts = partition_names(sysfs, name)
            graph.parents.update((p, name) for p in parts)
            graph.slaves[name] = tuple(sysfs.listdir(f"block/{name}/slaves"))
            holders = sysfs.listdir(f"block/{name}/holders")
            holders += [h for p in parts for h in sysfs.listdir(f"block/{name}/{p}/holders")]
            graph.holders[name] = tuple(dict.fromkeys(holders))
        return graph

    @classmethod
    def of(cls, devices: Iterable[Device]) -> DeviceGraph:
        graph = cls()
        for dev in devices:
            graph.parents.update((p.name, dev.name) for p in dev.partitions)
            graph.slaves[dev.name] = tuple(dev.slaves)
            graph.holders[dev.name] = tuple(dev.holders)
        return graph

    def __contains__(self, name: object) -> bool:
        return name in self.slaves or name in self.parents

    @property
    def wholes(self) -> list[str]:
        return sorted(self.slaves)

    def partitions_of(self, name: str) -> list[str]:
        """The partitions of whole device `name`, in sysfs's order."""
        return [p for p, whole in self.parents.items() if whole == name]

    def parent_of(self, name: str) -> str | None:
        """The whole disk of partition `name`; None for anything else."""
        return self.parents.get(name)

    def whole(self, name: str) -> str:
        """A partition's disk; a whole device itself."""
        return self.parents.get(name, name)

    def _lower(self, name: str) -> list[str]:
        return [self.whole(s) for s in self.slaves.get(name, ()) if self.whole(s) in self.slaves]

    def below(self, name: str) -> list[str]:
        """Every whole device under `name`, nearest first (its slaves, then theirs)."""
        top = self.whole(name)
        out: list[str] = []
        queue = [top]
        while queue:
            for low in self._lower(queue.pop(0)):
                if low != top and low not in out:
                    out.append(low)
                    queue.append(low)
        return out

    def bottom(self, name: str) -> list[str]:
        """The whole disks at the bottom of the stack under `name`, sorted; [] when nothing is below it."""
        return sorted(d for d in self.below(name) if not self.slaves.get(d))

    def disks_under(self, name: str) -> list[str]:
        """The disks that hold `name`'s data: the bottom of its stack, or its own disk when it is not stacked."""
        top = self.whole(name)
        if top not in self.slaves:
            return []
        return self.bottom(top) if self.slaves[top] else [top]

    def above(self, name: str) -> list[str]:
        """Every whole device stacked on `name` (or its partitions), nearest first."""
        out: list[str] = []
        queue = [self.whole(name)]
        while queue:
            for high in self.holders.get(queue.pop(0), ()):
                if high not in out:
                    out.append(high)
                    queue.append(high)
        return out

    def stack_of(self, names: Iterable[str]) -> set[str]:
        """`names` and the whole devices above and below them: what planning these devices needs to read.

        `below:` settings come from the stacks above a disk, and `--stack` reaches the disks below.
        """
        found: set[str] = set()
        for name in names:
            if name in self.slaves:
                found |= {name, *self.above(name), *self.below(name)}
        return found
