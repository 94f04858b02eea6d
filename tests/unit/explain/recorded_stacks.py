"""Recorded stacks for the rule tests: the browser stack of issue #29 and the same binary on ext4.

Facts as the VM tier's SD-card guest showed them (squashfs 4 KiB gzip on dm-verity on a loop
device with direct I/O, its image on ext4 on the card), with the cold read's per-device figures.
"""

from __future__ import annotations

import dataclasses

from tunectl.bench.diskstat import StatDelta
from tunectl.devices import stack as stacks
from tunectl.devices.model import Device, Partition
from tunectl.explain import dmtable
from tunectl.explain.model import (
    BlockFacts,
    Case,
    ColdRead,
    FileFacts,
    FilesystemFacts,
    LoopFacts,
    PartitionFacts,
    Queue,
    StackFacts,
)
from tunectl.explain.squashfs import Superblock

SD_QUEUE = Queue("mq-deadline", 128, 128, False, 64, 512)
VERITY = "0 409600 verity 1 7:0 7:0 4096 4096 51200 51201 sha256 " + "ab" * 32 + " " + "cd" * 32
CARD = Device("mmcblk0", "sd", "sd:card", devnum="179:0")


def file(path: str, size: int, extents: int | None) -> stacks.FileLayer:
    return stacks.FileLayer(path, size).with_facts(FileFacts(extents))


def mount(target: str, fstype: str, source: str, block: int, sb: Superblock | None = None) -> stacks.MountLayer:
    return stacks.MountLayer(target, fstype, source).with_facts(FilesystemFacts(block, sb))


def part(name: str, start: int, disk: Device = CARD) -> stacks.PartitionLayer:
    return stacks.PartitionLayer(Partition(name, start, 0), disk).with_facts(
        PartitionFacts(start * 512 % (1 << 20) == 0))


def loop(name: str, devnum: str, queue: Queue, facts: LoopFacts) -> stacks.LoopLayer:
    return stacks.LoopLayer(Device(name, "loop", f"loop:{name}", devnum=devnum)).with_facts(BlockFacts(queue, loop=facts))


def disk(queue: Queue = SD_QUEUE, device: Device = CARD) -> stacks.DiskLayer:
    return stacks.DiskLayer(device).with_facts(BlockFacts(queue))


def dm(name: str, devnum: str, subtype: str, queue: Queue, table: str) -> stacks.DmLayer:
    return stacks.DmLayer(Device(name, "dm", f"dm:{name}", devnum=devnum, dm_type=subtype)).with_facts(
        BlockFacts(queue, dm_table=tuple(dmtable.parse(table))))


def browser(kernel: tuple[int, int] = (6, 1), sb_block: int = 4096, compressor: str = "gzip", dio: bool = True,
            cold: bool = True) -> Case:
    layers = (
        file("/opt/browser/chrome", 48 << 20, None),
        mount("/opt/browser", "squashfs", "/dev/mapper/vroot", 4096,
              Superblock(sb_block, compressor, ("duplicates", "exportable"), 12, 1, 30 << 20, "4.0")),
        dm("dm-0", "253:0", "verity", Queue(None, 128, 127, False, None, 4096), VERITY),
        loop("loop0", "7:0", Queue("none", 128, 127, False, 128, 512), LoopFacts("/srv/browser.img", 0, dio, 128, "mmcblk0")),
        part("mmcblk0p1", 2048),
        disk(),
    )
    stack = StackFacts("/opt/browser/chrome", kernel, f"{kernel[0]}.{kernel[1]}.0-test", layers)
    if not cold:
        return Case(stack)
    devices = (StatDelta("dm-0", reads=7800, sectors_read=62400, read_ms=9000),
               StatDelta("loop0", reads=7700, reads_merged=100, sectors_read=62400, read_ms=8800),
               StatDelta("mmcblk0", reads=7750, reads_merged=12, sectors_read=62400, read_ms=7000))
    return Case(stack, ColdRead("/opt/browser/chrome", 4096, 32 << 20, 0.36, devices))


def ext4(cold: bool = True) -> Case:
    layers = (
        file("/srv/chrome", 48 << 20, 3),
        mount("/srv", "ext4", "/dev/mmcblk0p1", 4096),
        part("mmcblk0p1", 2048),
        disk(),
    )
    stack = StackFacts("/srv/chrome", (6, 1), "6.1.0-test", layers)
    devices = (StatDelta("mmcblk0", reads=260, reads_merged=0, sectors_read=98304, read_ms=3000),)
    return Case(stack, ColdRead("/srv/chrome", 4096, 48 << 20, 0.2, devices) if cold else None)


def with_queue(case: Case, name: str, **changes) -> Case:
    """`case` with the queue of block layer `name` changed."""
    def changed(la):
        if not isinstance(la, stacks.BlockLayer) or la.name != name:
            return la
        return la.with_facts(dataclasses.replace(la.facts, queue=dataclasses.replace(la.facts.queue, **changes)))

    layers = tuple(changed(la) for la in case.stack.layers)
    return dataclasses.replace(case, stack=dataclasses.replace(case.stack, layers=layers))
