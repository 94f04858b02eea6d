"""The flat list of layers `explain` shows: each layer once, even when two loops share a filesystem (#29)."""

from __future__ import annotations

from tests.unit.explain.recorded_stacks import SD_QUEUE, browser
from tunectl.explain.model import FileFacts, FilesystemFacts, Layer, LoopFacts, PartitionFacts, Queue, once


def test_the_hash_loop_does_not_repeat_the_filesystem_its_image_shares() -> None:
    """The browser stack as the VM run laid it out: dm-verity over loop0 (data) and loop1 (hash), both images on
    the card's ext4. Following each loop's backing file listed the ext4 and its partition twice."""
    top = browser(cold=False).stack.layers[:3]  # the file, its squashfs, dm-verity
    loop = Queue("none", 128, 127, False, 128, 512)

    def under(image: str) -> list[Layer]:
        return [Layer("file", image, file=FileFacts(image, 30 << 20, 1)),
                Layer("filesystem", "/srv", filesystem=FilesystemFacts("ext4", "/srv", "/dev/mmcblk0p1", 4096)),
                Layer("partition", "mmcblk0p1", partition=PartitionFacts(2048, True))]

    recorded = [*top,
                Layer("loop", "loop0", cls="loop", devnum="7:0", queue=loop,
                      loop=LoopFacts("/srv/browser.img", 0, True, 128, "mmcblk0")),
                *under("/srv/browser.img"),
                Layer("disk", "mmcblk0", cls="sd", devnum="179:0", queue=SD_QUEUE),
                Layer("loop", "loop1", cls="loop", devnum="7:1", queue=loop,
                      loop=LoopFacts("/srv/browser.hash", 0, True, 128, "mmcblk0")),
                *under("/srv/browser.hash")]
    assert [la.kind for la in recorded].count("filesystem") == 3  # squashfs, then the ext4 twice
    shown = once(recorded)
    assert [(la.kind, la.name) for la in shown] == [
        ("file", "/opt/browser/chrome"), ("filesystem", "/opt/browser"), ("dm", "dm-0"),
        ("loop", "loop0"), ("file", "/srv/browser.img"), ("filesystem", "/srv"), ("partition", "mmcblk0p1"),
        ("disk", "mmcblk0"), ("loop", "loop1"), ("file", "/srv/browser.hash")]
    assert once(shown) == shown
