"""Recorded stacks for the rule tests: the browser stack of issue #29 and the same binary on ext4.

Facts as the VM tier's SD-card guest showed them (squashfs 4 KiB gzip on dm-verity on a loop
device with direct I/O, its image on ext4 on the card), with the cold read's per-device figures.
"""

from __future__ import annotations

import dataclasses

from tunectl.bench.diskstat import StatDelta
from tunectl.explain import dmtable
from tunectl.explain.model import (
    Case,
    ColdRead,
    FileFacts,
    FilesystemFacts,
    Layer,
    LoopFacts,
    PartitionFacts,
    Queue,
    StackFacts,
)
from tunectl.explain.squashfs import Superblock

SD_QUEUE = Queue("mq-deadline", 128, 128, False, 64, 512)
VERITY = "0 409600 verity 1 7:0 7:0 4096 4096 51200 51201 sha256 " + "ab" * 32 + " " + "cd" * 32


def browser(kernel: tuple[int, int] = (6, 1), sb_block: int = 4096, compressor: str = "gzip", dio: bool = True,
            cold: bool = True) -> Case:
    layers = (
        Layer("file", "/opt/browser/chrome", file=FileFacts("/opt/browser/chrome", 48 << 20, None)),
        Layer("filesystem", "/opt/browser", filesystem=FilesystemFacts(
            "squashfs", "/opt/browser", "/dev/mapper/vroot", 4096,
            Superblock(sb_block, compressor, ("duplicates", "exportable"), 12, 1, 30 << 20, "4.0"))),
        Layer("dm", "dm-0", cls="dm", devnum="253:0", queue=Queue(None, 128, 127, False, None, 4096),
              dm_subtype="verity", dm_table=tuple(dmtable.parse(VERITY))),
        Layer("loop", "loop0", cls="loop", devnum="7:0", queue=Queue("none", 128, 127, False, 128, 512),
              loop=LoopFacts("/srv/browser.img", 0, dio, 128, "mmcblk0")),
        Layer("partition", "mmcblk0p1", partition=PartitionFacts(2048, True)),
        Layer("disk", "mmcblk0", cls="sd", devnum="179:0", queue=SD_QUEUE),
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
        Layer("file", "/srv/chrome", file=FileFacts("/srv/chrome", 48 << 20, 3)),
        Layer("filesystem", "/srv", filesystem=FilesystemFacts("ext4", "/srv", "/dev/mmcblk0p1", 4096)),
        Layer("partition", "mmcblk0p1", partition=PartitionFacts(2048, True)),
        Layer("disk", "mmcblk0", cls="sd", devnum="179:0", queue=SD_QUEUE),
    )
    stack = StackFacts("/srv/chrome", (6, 1), "6.1.0-test", layers)
    devices = (StatDelta("mmcblk0", reads=260, reads_merged=0, sectors_read=98304, read_ms=3000),)
    return Case(stack, ColdRead("/srv/chrome", 4096, 48 << 20, 0.2, devices) if cold else None)


def with_queue(case: Case, name: str, **changes) -> Case:
    layers = tuple(dataclasses.replace(la, queue=dataclasses.replace(la.queue, **changes)) if la.name == name else la
                   for la in case.stack.layers)
    return dataclasses.replace(case, stack=dataclasses.replace(case.stack, layers=layers))
