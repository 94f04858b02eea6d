"""Discovery on fake trees: classes, facts and stable identities of every topology."""

from __future__ import annotations

import pytest

from tests.fakesys import FakeTree, sata_hdd
from tunectl.devices.discover import discover, read_device
from tunectl.devices.graph import DeviceGraph
from tunectl.devices.model import Partition
from tunectl.system.udevdb import UdevDb


@pytest.fixture
def devices(fake_tree):
    return {d.name: d for d in discover(fake_tree.sysfs, fake_tree.udev)}


def test_discover_lists_whole_devices_only_sorted_by_name(devices):
    assert list(devices) == ["dm-0", "dm-1", "dm-2", "loop0", "md0", "mmcblk0", "nvme0n1", "sda", "sdb", "sdc", "sdd",
                             "vda", "zram0"]


@pytest.mark.parametrize(
    ("name", "cls"),
    [("sda", "rotational"), ("sdb", "ssd"), ("nvme0n1", "nvme"), ("vda", "virtio"), ("mmcblk0", "mmc"), ("dm-0", "dm"),
     ("md0", "md"), ("zram0", "zram"), ("loop0", "loop")],
)
def test_each_topology_gets_its_class(devices, name, cls):
    assert devices[name].cls == cls


def test_virtio_is_its_own_class_whatever_its_rotational_flag_says(devices):
    assert devices["vda"].rotational is True
    assert devices["vda"].cls == "virtio"


@pytest.mark.parametrize(
    ("name", "dm_type", "dm_name"),
    [("dm-0", "crypt", "luks-5e1e0b9e-7e4f-4cc1-9d57-2b5c1a0e8f11"), ("dm-1", "verity", "vroot"),
     ("dm-2", "lvm", "vg0-data")],
)
def test_dm_subtype_and_name_come_from_dm_uuid_and_name(devices, name, dm_type, dm_name):
    assert (devices[name].dm_type, devices[name].dm_name) == (dm_type, dm_name)
    assert devices[name].identity == f"dm-uuid:{devices[name].dm_uuid}"


def test_identities_are_stable_names(devices):
    assert {n: d.identity for n, d in devices.items() if d.cls not in ("dm",)} == {
        "sda": "wwn:0x5000c500a1b2c3d4",
        "sdb": "wwn:0x5002538e40a1b2c3",
        "sdc": "wwn:0x50014ee2b0000000",
        "sdd": "wwn:0x50014ee2b0000001",
        "nvme0n1": "wwn:eui.002538b981b0a1f2",
        "vda": "serial:vm-disk-01",
        "mmcblk0": "serial:0x1a2b3c4d",
        "md0": "md-uuid:3f1c5d2a:9be04c1e:7a6d8f02:c4b1e9d3",
        "loop0": "loop:/var/lib/images/disk.img",
        "zram0": "kernel:zram0",  # nothing about a zram device survives a reboot
    }


def test_disks_keep_a_stable_identity_without_the_udev_database(fake_tree):
    bare = {d.name: d for d in discover(fake_tree.sysfs, UdevDb(fake_tree.root / "no-udev"))}
    for name in ("sda", "sdb", "nvme0n1", "vda", "mmcblk0", "loop0", "dm-0", "dm-1", "dm-2"):
        assert not bare[name].identity.startswith("kernel:"), name
    assert bare["sda"].bus == "ata"  # from the device path
    assert bare["sdb"].model == "Samsung SSD 870"  # the 16-character INQUIRY model from sysfs


def test_identity_does_not_depend_on_the_udev_database(fake_tree):
    with_udev = read_device(fake_tree.sysfs, fake_tree.udev, "sda")
    without = read_device(fake_tree.sysfs, UdevDb(fake_tree.root / "no-udev"), "sda")
    assert with_udev.identity == without.identity


def test_a_disk_with_nothing_but_a_by_id_link_is_named_by_it(empty_fake_tree):
    empty_fake_tree.add_disk("sdx", bus="scsi", udev={"ID_BUS": "scsi"}, by_id=["scsi-SQEMU_QEMU_HARDDISK_drive0"])
    dev = read_device(empty_fake_tree.sysfs, empty_fake_tree.udev, "sdx")
    assert dev.identity == "by-id:scsi-SQEMU_QEMU_HARDDISK_drive0"


def test_match_facts_of_a_sata_disk(devices):
    sda = devices["sda"]
    assert (sda.model, sda.vendor, sda.serial, sda.wwn) == ("ST4000DM004-2CV104", "ATA", "ZFN0ABCD", "0x5000c500a1b2c3d4")
    assert (sda.bus, sda.size_bytes, sda.removable) == ("ata", 7814037168 * 512, False)
    assert (sda.logical_block_size, sda.physical_block_size) == (512, 4096)
    assert sda.devnum == "8:0"
    assert "disk/by-id/wwn-0x5000c500a1b2c3d4" in sda.links


def test_model_is_the_name_people_see(devices):
    assert devices["sdb"].model == "Samsung SSD 870 EVO 1TB"


@pytest.mark.parametrize(
    ("name", "bus"),
    [("sda", "ata"), ("nvme0n1", "nvme"), ("vda", "virtio"), ("mmcblk0", "mmc"), ("dm-0", None), ("md0", None),
     ("loop0", None), ("zram0", None)],
)
def test_bus(devices, name, bus):
    assert devices[name].bus == bus


@pytest.mark.parametrize(
    ("bus", "path_bus"),
    [("usb", "usb"), ("scsi", "scsi"), ("virtio", "virtio"), ("mmc", "mmc"), ("nvme", "nvme"),
     ("xen", "xen")],
)
def test_bus_from_the_device_path_when_udev_has_none(empty_fake_tree, bus, path_bus):
    name = {"xen": "xvda", "virtio": "vda", "mmc": "mmcblk0", "nvme": "nvme0n1"}.get(bus, "sdq")
    empty_fake_tree.add_disk(name, bus=bus, with_udev=False)
    (dev,) = discover(empty_fake_tree.sysfs, empty_fake_tree.udev)
    assert dev.bus == path_bus


def test_usb_stick_is_removable_and_named_by_its_udev_serial(empty_fake_tree):
    empty_fake_tree.add_disk("sde", bus="usb", vendor="SanDisk", model="Ultra Fit", serial="4C530001230512115384",
                             removable=True)
    dev = read_device(empty_fake_tree.sysfs, empty_fake_tree.udev, "sde")
    assert (dev.bus, dev.removable, dev.cls) == ("usb", True, "ssd")
    assert dev.identity == "serial:SanDisk_Ultra_Fit_4C530001230512115384-0:0"


def test_bus_does_not_depend_on_where_the_tree_lives(fake_root):
    tree = FakeTree.create(fake_root / "virtual")
    sata_hdd(tree)
    (dev,) = discover(tree.sysfs, UdevDb(fake_root / "no-udev"))
    assert dev.bus == "ata"


def test_bus_of_a_multipath_nvme_namespace(empty_fake_tree):
    empty_fake_tree.add_disk("nvme0n1", bus="nvme", model="Samsung SSD 980 PRO 1TB", serial="S5GX", wwn="eui.1",
                             devpath="devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1")
    dev = read_device(empty_fake_tree.sysfs, empty_fake_tree.udev, "nvme0n1")
    assert dev.bus == "nvme"


def test_schedulers_offered_and_active(devices):
    assert devices["sda"].scheduler == "mq-deadline"
    assert devices["sda"].schedulers == ("none", "mq-deadline", "kyber", "bfq")
    assert devices["nvme0n1"].scheduler == "none"
    assert devices["loop0"].schedulers == ("none", "mq-deadline", "kyber", "bfq")


@pytest.mark.parametrize("name", ["dm-0", "dm-1", "dm-2", "md0", "zram0"])
def test_bio_based_devices_have_no_scheduler(devices, name):
    dev = devices[name]
    assert (dev.scheduler, dev.schedulers, dev.has_scheduler, dev.iosched) == (None, (), False, {})


def test_iosched_knobs_and_queue_attributes_are_read_as_numbers(devices):
    sda = devices["sda"]
    assert sda.iosched == {"async_depth": 64, "fifo_batch": 16, "front_merges": 1, "prio_aging_expire": 10000,
                           "read_expire": 500, "write_expire": 5000, "writes_starved": 2}
    assert sda.queue["read_ahead_kb"] == 8192  # 6.18: twice max_sectors_kb on an HDD
    assert sda.queue["nr_requests"] == 64
    assert sda.queue["write_cache"] == "write back"
    assert "nr_requests" not in devices["zram0"].queue
    assert devices["nvme0n1"].iosched == {}


def test_discovery_sees_what_the_kernel_did_after_a_scheduler_switch(fake_tree):
    fake_tree.sysfs.write("block/sda/queue/scheduler", "bfq")
    fake_tree.sysfs.write("block/sda/queue/iosched/slice_idle", "0")
    sda = read_device(fake_tree.sysfs, fake_tree.udev, "sda")
    assert sda.scheduler == "bfq"
    assert sda.iosched["slice_idle"] == 0 and sda.iosched["slice_idle_us"] == 0
    assert "read_expire" not in sda.iosched


def test_queue_attrs_limits_what_is_read(fake_tree):
    sda = read_device(fake_tree.sysfs, fake_tree.udev, "sda", queue_attrs=["read_ahead_kb", "not_an_attr"])
    assert sda.queue == {"read_ahead_kb": 8192}


@pytest.mark.parametrize(
    ("name", "slaves", "holders"),
    [
        ("dm-0", ("sdb2",), ()),
        ("dm-1", ("mmcblk0p2", "mmcblk0p3"), ()),
        ("dm-2", ("md0",), ()),
        ("md0", ("sdc", "sdd"), ("dm-2",)),
        ("sdc", (), ("md0",)),
        ("sda", (), ()),
    ],
)
def test_slaves_and_holders(devices, name, slaves, holders):
    assert (devices[name].slaves, devices[name].holders) == (slaves, holders)


def test_partitions_with_start_and_size_in_sectors(devices):
    assert devices["sda"].partitions == (Partition("sda1", 2048, 7814033408),)
    assert devices["sdb"].partitions == (Partition("sdb1", 2048, 1048576), Partition("sdb2", 1050624, 1952472064))
    assert [p.name for p in devices["nvme0n1"].partitions] == ["nvme0n1p1", "nvme0n1p2"]
    assert [p.name for p in devices["mmcblk0"].partitions] == ["mmcblk0p1", "mmcblk0p2", "mmcblk0p3"]
    assert devices["vda"].partitions[0] == Partition("vda1", 63, 1048513)
    assert devices["dm-0"].partitions == ()


@pytest.mark.parametrize(
    ("name", "parent"),
    [("sdb2", "sdb"), ("sda1", "sda"), ("nvme0n1p2", "nvme0n1"), ("mmcblk0p3", "mmcblk0"), ("vda1", "vda"),
     ("sda", None), ("dm-0", None), ("md0", None), ("sdz9", None)],
)
def test_partition_parent(fake_tree, devices, name, parent):
    assert DeviceGraph.read(fake_tree.sysfs).parent_of(name) == parent
    assert DeviceGraph.of(devices.values()).parent_of(name) == parent


def test_below_a_stack_through_slaves_and_partitions(fake_tree, devices):
    for graph in (DeviceGraph.read(fake_tree.sysfs), DeviceGraph.of(devices.values())):
        assert graph.bottom("dm-0") == ["sdb"]
        assert graph.bottom("dm-1") == ["mmcblk0"]
        assert graph.bottom("dm-2") == ["sdc", "sdd"]
        assert graph.below("dm-2") == ["md0", "sdc", "sdd"]  # nearest first
        assert graph.above("sdc") == ["md0", "dm-2"] and graph.above("sdb2") == ["dm-0"]
        assert graph.whole("mmcblk0p3") == "mmcblk0" and graph.disks_under("sda1") == ["sda"]
        assert graph.stack_of(["md0"]) == {"md0", "dm-2", "sdc", "sdd"}


def test_a_vanished_device_is_skipped(fake_tree):
    fake_tree.sysfs.vanish("nvme0n1")
    names = [d.name for d in discover(fake_tree.sysfs, fake_tree.udev)]
    assert "nvme0n1" not in names and "sda" in names
    assert read_device(fake_tree.sysfs, fake_tree.udev, "nvme0n1") is None


class _VanishesWhileRead:
    """A kernel where sdb is unplugged the moment discovery reads its rotational flag."""

    def __init__(self, tree):
        kernel = type(tree.sysfs)

        class Kernel(kernel):
            def read(self, rel):
                if rel == "block/sdb/queue/rotational":
                    self.vanish("sdb")
                return super().read(rel)

        self.sysfs = Kernel(tree.root)


def test_a_device_vanishing_mid_discovery_raises_nothing(fake_tree):
    devices = {d.name: d for d in discover(_VanishesWhileRead(fake_tree).sysfs, fake_tree.udev)}
    assert devices["sda"].identity == "wwn:0x5000c500a1b2c3d4"
    assert devices["dm-0"].slaves == ("sdb2",)  # read before sdb went away
    assert devices["vda"].partitions[0].start == 63  # devices after sdb are read normally


def test_a_device_vanishing_mid_discovery_is_not_reported(fake_tree):
    names = [d.name for d in discover(_VanishesWhileRead(fake_tree).sysfs, fake_tree.udev)]
    assert "sdb" not in names
