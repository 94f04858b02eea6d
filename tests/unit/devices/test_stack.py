"""The typed stack under a name: layers from the one graph, and the resolver answering with devices."""

from __future__ import annotations

import pytest

from tests.fakesys import FakeTree
from tunectl.context import Context
from tunectl.devices.discover import discover
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.resolve import Resolver
from tunectl.devices.stack import DiskLayer, DmLayer, MdLayer, PartitionLayer, Stack
from tunectl.errors import UsageError
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore


@pytest.fixture
def devices(fake_tree: FakeTree):
    return {d.name: d for d in discover(fake_tree.sysfs, fake_tree.udev)}


@pytest.fixture
def graph(fake_tree: FakeTree) -> DeviceGraph:
    return DeviceGraph.read(fake_tree.sysfs)


@pytest.fixture
def resolver(fake_tree: FakeTree, devices, graph, tmp_path) -> Resolver:
    ctx = Context(fake_tree.sysfs, fake_tree.udev, StateStore(tmp_path / "state"), [shipped_profile_dir()], {})
    return Resolver(ctx, list(devices.values()), graph)


def test_lvm_over_md_is_a_tree_laid_out_top_first(graph, devices) -> None:
    stack = Stack.of(graph, devices, "dm-2")
    assert [(layer.kind, layer.label) for layer in stack.layers] == [
        ("dm", "dm-2"), ("md", "md0"), ("disk", "sdc"), ("disk", "sdd")]
    dm, md = stack.layers[0], stack.layers[1]
    assert isinstance(dm, DmLayer) and dm.subtype == "lvm" and dm.lower == ("md0",)
    assert isinstance(md, MdLayer) and md.lower == ("sdc", "sdd")
    assert [d.name for d in stack.disks] == ["sdc", "sdd"]
    assert stack.top is devices["dm-2"] and [d.name for d in stack.below] == ["md0", "sdc", "sdd"]
    assert stack.layer("md0") is md and stack.layer("sda") is None


def test_a_partition_is_served_by_its_disks_queue(graph, devices) -> None:
    stack = Stack.of(graph, devices, "nvme0n1p2")
    part = stack.partition
    assert isinstance(part, PartitionLayer) and part.disk is devices["nvme0n1"]
    assert part.partition in devices["nvme0n1"].partitions
    assert [layer.kind for layer in stack.layers] == ["partition", "disk"]
    assert stack.top is devices["nvme0n1"] and stack.below == () and stack.disks == (devices["nvme0n1"],)


def test_dm_crypt_on_a_partition_reaches_the_disk(graph, devices) -> None:
    stack = Stack.of(graph, devices, "dm-0")
    assert [(layer.kind, layer.label) for layer in stack.layers] == [("dm", "dm-0"), ("disk", "sdb")]
    assert stack.layers[0].subtype == "crypt" and stack.layers[0].lower == ("sdb",)
    assert isinstance(stack.layers[1], DiskLayer) and stack.layers[1].lower == ()


def test_the_resolver_answers_with_devices_and_stacks(resolver: Resolver, devices) -> None:
    assert resolver.devices_of(["/dev/sdb", "sdb2", "dm-0"]) == [devices["sdb"], devices["dm-0"]]
    stack = resolver.stack("mmcblk0p3")
    assert stack.top is devices["mmcblk0"] and stack.partition is not None and stack.file is None
    assert [layer.kind for layer in resolver.stack("loop0").layers] == ["loop"]
    with pytest.raises(UsageError, match="no block device 'sdz'"):
        resolver.stack("sdz")


def test_the_stack_of_a_kernel_name_or_none_outside_the_runs_devices(resolver: Resolver, devices) -> None:
    stack = resolver.stack_of("sdb2")  # what mounts asks for a filesystem's device: a partition's disk serves it
    assert stack is not None and stack.top is devices["sdb"] and stack.partition is not None
    assert stack.partition.name == "sdb2" and stack.disks == (devices["sdb"],)
    lvm = resolver.stack_of("dm-2")
    assert lvm is not None and sorted(d.name for d in lvm.disks) == ["sdc", "sdd"]
    assert resolver.stack_of("sdz") is None


def test_a_layer_carries_facts_on_a_copy_and_stays_the_same_layer(graph, devices) -> None:
    """explain hangs its facts on these layers (#29, #33): a copy carries them, the resolver's layer keeps None,
    and facts are not a dataclass field (no constructor argument, no part in equality or repr)."""
    from tunectl.record import fields

    layer = Stack.of(graph, devices, "dm-2").layers[0]
    facts = object()
    shown = layer.with_facts(facts)
    assert type(shown) is DmLayer and shown.facts is facts and layer.facts is None
    assert shown == layer and repr(shown) == repr(layer)
    assert "facts" not in {f.name for f in fields(shown)}
