"""MAJ:MIN to its whole disk's queue and its /dev node: the cheap walk preload replay and show use."""

from __future__ import annotations

from tests.fakesys import FakeTree
from tunectl.devices.devnum import node, queue_dir
from tunectl.system.sysfs import Sysfs


def test_a_partition_is_served_by_its_disks_queue(empty_fake_tree: FakeTree) -> None:
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=True, partitions=[(2048, 4096), (8192, 4096)], nr_requests=61)
    sysfs = Sysfs(tree.root)
    disk, part = tree.devnum("sdb"), tree.devnum("sdb2")
    assert queue_dir(sysfs, disk) == f"dev/block/{disk}/queue"
    parts_queue = queue_dir(sysfs, part)
    assert parts_queue is not None and not parts_queue.startswith("dev/block/")
    assert sysfs.read(f"{parts_queue}/nr_requests").strip() == "61"  # the disk's, read through the partition
    assert queue_dir(sysfs, "9:99") is None  # no such device


def test_the_node_is_the_uevents_devname_else_udevs_link(empty_fake_tree: FakeTree) -> None:
    tree = empty_fake_tree
    tree.add_disk("sdb", partitions=[(2048, 4096)])
    sysfs = Sysfs(tree.root)
    assert node(sysfs, "/x/dev", tree.devnum("sdb1")) == "/x/dev/sdb1"
    assert node(sysfs, "/x/dev", "9:99") == "/x/dev/block/9:99"
