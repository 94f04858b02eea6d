"""The loop-device helper hands out devices that can discard, even after a test switched discard off."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.loopdev import loop_devices, stale_partitions, sysfs_read, sysfs_write


@pytest.mark.root
def test_a_loop_whose_discard_was_switched_off_is_never_handed_out_again(tmp_path: Path) -> None:
    with loop_devices(tmp_path, [{"size_mb": 8}]) as (first,):
        sysfs_write(first, "queue/discard_max_bytes", "0")
    with loop_devices(tmp_path, [{"size_mb": 8}, {"size_mb": 8}]) as names:
        for name in names:
            assert sysfs_read(name, "queue/discard_max_bytes") != "0", name


@pytest.mark.root
def test_a_loop_with_partitions_left_from_an_earlier_life_is_never_handed_out(tmp_path: Path) -> None:
    with loop_devices(tmp_path, [{"size_mb": 8}]) as (first,):
        subprocess.run(["parted", "-s", f"/dev/{first}", "mklabel", "gpt", "mkpart", "p1", "1MiB", "3MiB"],
                       check=True, capture_output=True)
        subprocess.run(["partx", "-a", f"/dev/{first}"], check=False, capture_output=True)
        assert stale_partitions(first) == [f"{first}p1"]
    # detached without partx -d, as a crashed test would leave it
    with loop_devices(tmp_path, [{"size_mb": 8}, {"size_mb": 8}]) as names:
        for name in names:
            assert stale_partitions(name) == [], name
