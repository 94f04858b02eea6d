"""The flat list of layers `explain` shows: each layer once, even when two loops share a filesystem (#29)."""

from __future__ import annotations

from tests.unit.explain.recorded_stacks import browser, disk, file, loop, mount, part
from tunectl.devices import stack as stacks
from tunectl.explain.model import LoopFacts, Queue, kind, once


def test_the_hash_loop_does_not_repeat_the_filesystem_its_image_shares() -> None:
    """The browser stack as the VM run laid it out: dm-verity over loop0 (data) and loop1 (hash), both images on
    the card's ext4. Following each loop's backing file listed the ext4 and its partition twice."""
    top = browser(cold=False).stack.layers[:3]  # the file, its squashfs, dm-verity
    queue = Queue("none", 128, 127, False, 128, 512)

    def under(image: str) -> list[stacks.Layer]:
        return [file(image, 30 << 20, 1), mount("/srv", "ext4", "/dev/mmcblk0p1", 4096), part("mmcblk0p1", 2048)]

    recorded = [*top,
                loop("loop0", "7:0", queue, LoopFacts("/srv/browser.img", 0, True, 128, "mmcblk0")),
                *under("/srv/browser.img"),
                disk(),
                loop("loop1", "7:1", queue, LoopFacts("/srv/browser.hash", 0, True, 128, "mmcblk0")),
                *under("/srv/browser.hash")]
    assert [kind(la) for la in recorded].count("filesystem") == 3  # squashfs, then the ext4 twice
    shown = once(recorded)
    assert [(kind(la), la.label) for la in shown] == [
        ("file", "/opt/browser/chrome"), ("filesystem", "/opt/browser"), ("dm", "dm-0"),
        ("loop", "loop0"), ("file", "/srv/browser.img"), ("filesystem", "/srv"), ("partition", "mmcblk0p1"),
        ("disk", "mmcblk0"), ("loop", "loop1"), ("file", "/srv/browser.hash")]
    assert once(shown) == shown


def test_the_extents_of_a_file_named_by_a_pipe_are_unknown_never_waited_for(tmp_path) -> None:
    """A loop's backing file is opened by name for its extents: its directory's owner may swap a named pipe in
    after the stack was read. The open blocked until a writer came; now a pipe, a
    link another user owns or a device there is no file of extents."""
    import os
    import subprocess
    import sys

    pipe = tmp_path / "image"
    os.mkfifo(pipe)
    code = f"from tunectl.explain.facts import extent_count; print(extent_count({str(pipe)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["None"], done.stderr
