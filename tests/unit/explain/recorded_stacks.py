"""Recorded stacks for the rule tests: the browser stack of issue #29 and the same binary on ext4.

Facts as the VM tier's SD-card guest showed them (squashfs 4 KiB gzip on dm-verity on a loop
device with direct I/O, its image on ext4 on the card), with the cold read's per-device figures and
`--try`'s variants from one run of tests/vm/test_explain.py on the 6.1 guest (the card was sdb there:
a 4 MiB file, 1024 requests of 5.2 KiB at every layer, 2.18 s).
"""

from __future__ import annotations

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
    Trial,
)
from tunectl.explain.squashfs import Superblock
from tunectl.record import replace

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
        file("/opt/browser/chrome", 4 << 20, None),
        mount("/opt/browser", "squashfs", "/dev/mapper/vroot", 4096,
              Superblock(sb_block, compressor, ("duplicates", "exportable"), 12, 1, 1245184, "4.0")),
        dm("dm-0", "253:0", "verity", Queue(None, 128, 127, False, None, 4096), VERITY),
        loop("loop0", "7:0", Queue("none", 128, 127, False, 128, 512), LoopFacts("/srv/browser.img", 0, dio, 128, "mmcblk0")),
        part("mmcblk0p1", 2048),
        disk(),
    )
    stack = StackFacts("/opt/browser/chrome", kernel, f"{kernel[0]}.{kernel[1]}.0-test", layers)
    if not cold:
        return Case(stack)
    devices = (StatDelta("dm-0", reads=1024, sectors_read=10608, read_ms=1784),
               StatDelta("loop0", reads=1024, sectors_read=10608, read_ms=1380),
               StatDelta("mmcblk0", reads=1024, sectors_read=10608, read_ms=1195))
    return Case(stack, ColdRead("/opt/browser/chrome", 4096, 4 << 20, 2.1838, devices))


def trial(block: int, compressor: str, dio: bool, mb_s: float, as_is: bool = False) -> Trial:
    size = f"{block // 1048576}M" if block >= 1048576 else f"{block // 1024}K"
    return Trial(block, compressor, dio, as_is, mb_s, f"-b {size} -comp {compressor}, dio {'on' if dio else 'off'}")


# --try on the browser stack (gzip only, every copy through a scratch dm-verity): MB/s per variant
BROWSER_TRIALS = (trial(4096, "gzip", True, 1.7, as_is=True), trial(4096, "gzip", False, 3.9),
                  trial(131072, "gzip", True, 15.4), trial(131072, "gzip", False, 13.7),
                  trial(1048576, "gzip", True, 22.1), trial(1048576, "gzip", False, 23.4))


def tried(case: Case, trials: tuple[Trial, ...] = BROWSER_TRIALS) -> Case:
    """`case` after --try measured `trials`."""
    return replace(case, trials=trials)


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
        return la.with_facts(replace(la.facts, queue=replace(la.facts.queue, **changes)))

    layers = tuple(changed(la) for la in case.stack.layers)
    return replace(case, stack=replace(case.stack, layers=layers))
