"""The fake sysfs behaves like the kernel (Linux 6.18, HZ=250) and builds realistic trees."""

from __future__ import annotations

import errno
import os

import pytest

from tests.fakesys import FakeKernel, FakeTree, iosched_defaults, jiffies_to_msecs, msecs_to_jiffies
from tunectl.attributes import IOSCHED, kernel_equivalent
from tunectl.devices.discover import discover
from tunectl.errors import SysfsError
from tunectl.system.udevdb import UdevDb

Q = "block/sda/queue"


def refused(sysfs: FakeKernel, rel: str, value: str) -> int:
    with pytest.raises(SysfsError) as info:
        sysfs.write(rel, value)
    assert info.value.path == rel
    return info.value.errno


def knobs(sysfs: FakeKernel, name: str = "sda") -> dict[str, str]:
    base = f"block/{name}/queue/iosched"
    return {k: sysfs.read(f"{base}/{k}") for k in sysfs.listdir(base)}


# --- scheduler --------------------------------------------------------------------------------


def test_scheduler_reads_with_the_active_one_in_brackets(fake_tree):
    assert fake_tree.sysfs.read(f"{Q}/scheduler") == "none [mq-deadline] kyber bfq "
    assert fake_tree.sysfs.read("block/nvme0n1/queue/scheduler") == "[none] mq-deadline kyber bfq "


def test_writing_a_scheduler_moves_the_brackets_and_replaces_iosched(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "bfq")
    assert sysfs.read(f"{Q}/scheduler") == "none mq-deadline kyber [bfq] "
    assert knobs(sysfs) == {
        "back_seek_max": "16384", "back_seek_penalty": "2", "fifo_expire_async": "250", "fifo_expire_sync": "125",
        "low_latency": "1", "max_budget": "0", "slice_idle": "8", "slice_idle_us": "8000",
        "strict_guarantees": "0", "timeout_sync": "124",
    }
    sysfs.write(f"{Q}/scheduler", "kyber")
    assert knobs(sysfs) == {"read_lat_nsec": "2000000", "write_lat_nsec": "10000000"}


def test_switching_to_none_removes_the_iosched_directory(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "none\n")
    assert sysfs.read(f"{Q}/scheduler") == "[none] mq-deadline kyber bfq "
    assert not sysfs.exists(f"{Q}/iosched")
    assert refused(sysfs, f"{Q}/iosched/read_expire", "150") == errno.ENOENT


def test_a_scheduler_the_device_does_not_offer_is_einval(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/iosched/read_expire", "150")
    for name in ("cfq", "noop", "MQ-DEADLINE", "[bfq]", "bogus"):
        assert refused(sysfs, f"{Q}/scheduler", name) == errno.EINVAL
    assert sysfs.read(f"{Q}/scheduler") == "none [mq-deadline] kyber bfq "
    assert sysfs.read(f"{Q}/iosched/read_expire") == "152"


def test_a_device_offering_fewer_schedulers_refuses_the_others(empty_fake_tree):
    empty_fake_tree.add_disk("sda", schedulers=("none", "mq-deadline"))
    assert refused(empty_fake_tree.sysfs, f"{Q}/scheduler", "bfq") == errno.EINVAL


def test_rewriting_the_active_scheduler_keeps_its_knobs(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/iosched/front_merges", "0")
    sysfs.write(f"{Q}/scheduler", "mq-deadline")
    assert sysfs.read(f"{Q}/iosched/front_merges") == "0"


def test_deadline_is_an_alias_of_mq_deadline(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write("block/nvme0n1/queue/scheduler", "deadline")
    assert sysfs.read("block/nvme0n1/queue/scheduler") == "none [mq-deadline] kyber bfq "


def test_an_empty_scheduler_write_changes_nothing(fake_tree):
    fake_tree.sysfs.write(f"{Q}/scheduler", "\n")
    assert fake_tree.sysfs.read(f"{Q}/scheduler") == "none [mq-deadline] kyber bfq "


def test_switching_scheduler_resets_nr_requests_and_async_depth(fake_tree):
    sysfs = fake_tree.sysfs  # sda: a SATA disk with 32 tags
    sysfs.write(f"{Q}/nr_requests", "16")
    sysfs.write(f"{Q}/scheduler", "none")
    assert sysfs.read(f"{Q}/nr_requests") == "32"
    sysfs.write(f"{Q}/scheduler", "mq-deadline")
    assert sysfs.read(f"{Q}/nr_requests") == "64"
    assert sysfs.read(f"{Q}/iosched/async_depth") == "64"


def test_nr_requests_resizes_mq_deadline_async_depth(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/iosched/async_depth", "10")
    sysfs.write(f"{Q}/nr_requests", "48")
    assert sysfs.read(f"{Q}/iosched/async_depth") == "48"


def test_mq_deadline_defaults_follow_nr_requests_and_hz():
    assert iosched_defaults("mq-deadline", 64, 250)["async_depth"] == 64
    assert iosched_defaults("mq-deadline", 64, 1000)["read_expire"] == 500
    assert iosched_defaults("bfq", 64, 1000)["timeout_sync"] == 125
    assert iosched_defaults("bfq", 64, 250)["timeout_sync"] == 124
    assert iosched_defaults("none", 64, 250) is None


# --- numbers: parsing, rounding, clamping ------------------------------------------------------


@pytest.mark.parametrize(
    ("attr", "written", "shown"),
    [
        ("iosched/read_expire", "150", "152"),
        ("iosched/read_expire", "1", "4"),
        ("iosched/read_expire", "500", "500"),
        ("iosched/write_expire", "1500", "1500"),
        ("iosched/write_expire", "1501", "1504"),
        ("iosched/prio_aging_expire", "9999", "10000"),
    ],
)
def test_deadline_times_round_up_to_jiffies(fake_tree, attr, written, shown):
    fake_tree.sysfs.write(f"{Q}/{attr}", written)
    assert fake_tree.sysfs.read(f"{Q}/{attr}") == shown


def test_bfq_timeout_sync_rounds_to_jiffies_and_has_a_floor_of_one_jiffy(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "bfq")
    sysfs.write(f"{Q}/iosched/timeout_sync", "150")
    assert sysfs.read(f"{Q}/iosched/timeout_sync") == "152"
    sysfs.write(f"{Q}/iosched/timeout_sync", "0")
    assert sysfs.read(f"{Q}/iosched/timeout_sync") == "4"


@pytest.mark.parametrize(("hz", "ms", "shown"), [(250, 150, 152), (1000, 150, 150), (100, 151, 160), (300, 1, 4)])
def test_jiffies_rounding_follows_hz(fake_root, hz, ms, shown):
    tree = FakeTree.create(fake_root, hz=hz)
    tree.add_disk("sda")
    tree.sysfs.write(f"{Q}/iosched/read_expire", str(ms))
    assert tree.sysfs.read(f"{Q}/iosched/read_expire") == str(shown)
    assert jiffies_to_msecs(msecs_to_jiffies(ms, hz), hz) == shown


@pytest.mark.parametrize(
    "hz",
    [100, 250, 1000, 300],
)
def test_tunectl_explains_every_jiffies_rounding(fake_root, hz):
    """attributes.kernel_equivalent must accept what the kernel stores for each wanted time."""
    tree = FakeTree.create(fake_root, hz=hz)
    tree.add_disk("sda")
    attr = IOSCHED["mq-deadline"]["read_expire"]
    unexplained = []
    for wanted in (1, 2, 3, 7, 10, 150, 151, 333, 1500, 1501):
        tree.sysfs.write(f"{Q}/iosched/read_expire", str(wanted))
        shown = int(tree.sysfs.read(f"{Q}/iosched/read_expire"))
        if not kernel_equivalent(attr, wanted, shown):
            unexplained.append((wanted, shown))
    assert unexplained == []


@pytest.mark.parametrize(("written", "shown"), [("4097", "4096"), ("1", "0"), ("4096", "4096"), ("+16", "16"),
                                                ("4294967295", "4294967292")])
def test_read_ahead_rounds_down_to_a_page(fake_tree, written, shown):
    fake_tree.sysfs.write(f"{Q}/read_ahead_kb", written)
    assert fake_tree.sysfs.read(f"{Q}/read_ahead_kb") == shown


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("read_ahead_kb", "abc"),
        ("read_ahead_kb", " 5"),
        ("read_ahead_kb", "5 "),
        ("read_ahead_kb", "0x10"),
        ("read_ahead_kb", "-1"),
        ("read_ahead_kb", ""),
        ("nr_requests", "1.5"),
        ("rotational", "yes"),
        ("nomerges", "-1"),
        ("iosched/read_expire", "abc"),
        ("iosched/front_merges", "1e3"),
    ],
)
def test_a_non_number_is_einval(fake_tree, attr, value):
    before = fake_tree.sysfs.read(f"{Q}/{attr}")
    assert refused(fake_tree.sysfs, f"{Q}/{attr}", value) == errno.EINVAL
    assert fake_tree.sysfs.read(f"{Q}/{attr}") == before


def test_one_trailing_newline_is_accepted(fake_tree):
    fake_tree.sysfs.write(f"{Q}/read_ahead_kb", "256\n")
    assert fake_tree.sysfs.read(f"{Q}/read_ahead_kb") == "256"


@pytest.mark.parametrize(
    "attr",
    ["hw_sector_size", "logical_block_size", "physical_block_size", "minimum_io_size", "optimal_io_size",
     "max_hw_sectors_kb", "discard_max_hw_bytes", "zoned", "nr_zones", "chunk_sectors", "dax"],
)
def test_read_only_queue_attributes_are_eacces(fake_tree, attr):
    before = fake_tree.sysfs.read(f"{Q}/{attr}")
    assert refused(fake_tree.sysfs, f"{Q}/{attr}", before) == errno.EACCES
    assert fake_tree.sysfs.read(f"{Q}/{attr}") == before


@pytest.mark.parametrize("rel", ["block/sda/size", "block/sda/dev", "block/sda/sda1/start", "block/dm-0/dm/uuid",
                                 "block/loop0/loop/backing_file"])
def test_attributes_outside_queue_are_read_only(fake_tree, rel):
    assert refused(fake_tree.sysfs, rel, "1") == errno.EACCES


@pytest.mark.parametrize(
    ("rel", "value", "code"),
    [
        (f"{Q}/nr_requests", "2049", errno.EINVAL),  # MAX_SCHED_RQ while an elevator is active
        (f"{Q}/max_sectors_kb", "3", errno.EINVAL),
        (f"{Q}/wbt_lat_usec", "-2", errno.EINVAL),
        (f"{Q}/io_poll", "1", errno.EINVAL),
        (f"{Q}/read_ahead_kb", "4294967296", errno.EINVAL),
        (f"{Q}/write_cache", "write sometimes", errno.EINVAL),
        (f"{Q}/wbt_lat_usec", "99999999999999999999", errno.ERANGE),
        (f"{Q}/iosched/read_expire", "2147483648", errno.ERANGE),
    ],
)
def test_out_of_range_values_are_refused(fake_tree, rel, value, code):
    before = fake_tree.sysfs.read(rel)
    assert refused(fake_tree.sysfs, rel, value) == code
    assert fake_tree.sysfs.read(rel) == before


def test_without_an_elevator_nr_requests_is_limited_to_the_tag_depth(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "none")
    sysfs.write(f"{Q}/nr_requests", "32")  # sda has 32 tags
    assert refused(sysfs, f"{Q}/nr_requests", "33") == errno.EINVAL


@pytest.mark.parametrize(
    ("attr", "written", "shown"),
    [
        ("rotational", "2", "1"),
        ("add_random", "7", "1"),
        ("iostats", "0", "0"),
        ("nomerges", "3", "1"),
        ("nomerges", "2", "2"),
        ("rq_affinity", "2", "2"),
        ("rq_affinity", "3", "1"),  # out of range: left alone
        ("nr_requests", "2", "4"),  # raised to BLKDEV_MIN_RQ, not refused
        ("max_sectors_kb", "99999", "32767"),  # clamped to max_hw_sectors_kb
        ("max_sectors_kb", "0", "4096"),  # 0 restores the default
        ("wbt_lat_usec", "-1", "75000"),  # -1 restores the default for a rotational disk
        ("io_poll_delay", "5", "-1"),  # deprecated: ignored
        ("write_cache", "write through", "write through"),
        ("write_cache", "none", "write through"),
        ("iosched/front_merges", "2", "1"),
        ("iosched/read_expire", "-5", "0"),
        ("iosched/async_depth", "0", "1"),
    ],
)
def test_the_kernel_clamps_rather_than_refuses(fake_tree, attr, written, shown):
    fake_tree.sysfs.write(f"{Q}/{attr}", written)
    assert fake_tree.sysfs.read(f"{Q}/{attr}") == shown


@pytest.mark.parametrize(
    ("disk", "attr", "value", "read_ahead"),
    [
        ("sda", "add_random", "0", "8192"),  # rotational, no io_opt: 2 x max_sectors_kb (4096)
        ("sda", "write_cache", "write back", "8192"),
        ("sdb", "iostats", "1", "128"),  # not rotational: at least 128 KiB
        ("sdb", "max_sectors_kb", "512", "128"),
        ("sda", "nomerges", "0", "64"),  # not a queue limit: read-ahead untouched
        ("sda", "wbt_lat_usec", "5000", "64"),
    ],
)
def test_queue_limit_writes_raise_a_small_read_ahead(fake_tree, disk, attr, value, read_ahead):
    sysfs = fake_tree.sysfs
    sysfs.write(f"block/{disk}/queue/read_ahead_kb", "64")
    sysfs.write(f"block/{disk}/queue/{attr}", value)
    assert sysfs.read(f"block/{disk}/queue/read_ahead_kb") == read_ahead


def test_a_probed_disk_starts_with_the_kernels_read_ahead(fake_tree):
    sysfs = fake_tree.sysfs
    assert sysfs.read("block/sda/queue/max_sectors_kb") == "4096"
    assert sysfs.read("block/sda/queue/read_ahead_kb") == "8192"  # rotational: 2 x max_sectors_kb
    assert sysfs.read("block/loop0/queue/read_ahead_kb") == "2560"  # as a real loop device on 6.18
    assert sysfs.read("block/sdb/queue/read_ahead_kb") == "128"


def test_queue_limit_writes_never_lower_read_ahead(fake_tree):
    fake_tree.sysfs.write(f"{Q}/read_ahead_kb", "16384")
    fake_tree.sysfs.write(f"{Q}/rotational", "1")
    assert fake_tree.sysfs.read(f"{Q}/read_ahead_kb") == "16384"


def test_bfq_clamps_and_refuses_negative_numbers(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "bfq")
    sysfs.write(f"{Q}/iosched/low_latency", "5")
    sysfs.write(f"{Q}/iosched/back_seek_penalty", "0")
    assert (sysfs.read(f"{Q}/iosched/low_latency"), sysfs.read(f"{Q}/iosched/back_seek_penalty")) == ("1", "1")
    assert refused(sysfs, f"{Q}/iosched/back_seek_max", "-1") == errno.EINVAL


def test_bfq_slice_idle_and_slice_idle_us_are_one_setting(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/scheduler", "bfq")
    sysfs.write(f"{Q}/iosched/slice_idle", "3")
    assert sysfs.read(f"{Q}/iosched/slice_idle_us") == "3000"
    sysfs.write(f"{Q}/iosched/slice_idle_us", "5500")
    assert sysfs.read(f"{Q}/iosched/slice_idle") == "5"


def test_io_poll_is_ignored_on_a_pollable_queue(empty_fake_tree):
    empty_fake_tree.add_disk("nvme0n1", bus="nvme", io_poll=True)
    empty_fake_tree.sysfs.write("block/nvme0n1/queue/io_poll", "0")
    assert empty_fake_tree.sysfs.read("block/nvme0n1/queue/io_poll") == "1"


# --- missing attributes, devices without a scheduler ------------------------------------------


@pytest.mark.parametrize("name", ["zram0", "dm-0", "md0"])
def test_bio_based_queues_have_no_scheduler_file(fake_tree, name):
    sysfs = fake_tree.sysfs
    assert not sysfs.exists(f"block/{name}/queue/scheduler")
    assert not sysfs.exists(f"block/{name}/queue/nr_requests")
    assert refused(sysfs, f"block/{name}/queue/scheduler", "mq-deadline") == errno.ENOENT
    sysfs.write(f"block/{name}/queue/read_ahead_kb", "4096")
    assert sysfs.read(f"block/{name}/queue/read_ahead_kb") == "4096"


def test_an_older_kernel_bio_based_queue_offers_only_none(fake_tree):
    sysfs = fake_tree.sysfs  # dm-1 is built that way
    assert sysfs.read("block/dm-1/queue/scheduler") == "none"
    sysfs.write("block/dm-1/queue/scheduler", "none")
    assert refused(sysfs, "block/dm-1/queue/scheduler", "mq-deadline") == errno.EINVAL


def test_a_knob_of_another_scheduler_is_enoent(fake_tree):
    assert refused(fake_tree.sysfs, f"{Q}/iosched/slice_idle", "0") == errno.ENOENT


def test_writing_a_directory_is_eisdir(fake_tree):
    assert refused(fake_tree.sysfs, f"{Q}/iosched", "1") == errno.EISDIR


def test_paths_outside_the_root_are_rejected(fake_tree):
    for rel in ("/sys/block/sda/queue/scheduler", "block/../../etc/passwd"):
        with pytest.raises(ValueError):
            fake_tree.sysfs.write(rel, "none")


def test_writes_through_class_block_act_on_the_same_device(fake_tree):
    fake_tree.sysfs.write("class/block/sda/queue/scheduler", "kyber")
    assert fake_tree.sysfs.read(f"{Q}/scheduler") == "none mq-deadline [kyber] bfq "


def test_every_attempted_write_is_counted(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.write(f"{Q}/read_ahead_kb", "256")
    for rel, value in ((f"{Q}/read_ahead_kb", "x"), (f"{Q}/hw_sector_size", "512"), (f"{Q}/nope", "1")):
        with pytest.raises(SysfsError):
            sysfs.write(rel, value)
    assert sysfs.writes == 4


# --- hooks: vanish and refuse ---------------------------------------------------------------


def test_a_vanished_device_fails_enoent_and_leaves_no_links(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.vanish("sdb")
    assert refused(sysfs, "block/sdb/queue/scheduler", "none") == errno.ENOENT
    with pytest.raises(SysfsError) as info:
        sysfs.read("block/sdb/queue/scheduler")
    assert info.value.errno == errno.ENOENT
    assert "sdb" not in sysfs.listdir("block")
    assert not {"sdb", "sdb1", "sdb2"} & set(sysfs.listdir("class/block"))
    assert sysfs.listdir("block/dm-0/slaves") == []
    assert sysfs.read(f"{Q}/scheduler")  # the others are untouched


def test_a_vanished_stacked_device_is_unlinked_from_its_lower_devices(fake_tree):
    fake_tree.sysfs.vanish("md0")
    assert fake_tree.sysfs.listdir("block/sdc/holders") == []
    assert fake_tree.sysfs.listdir("block/dm-2/slaves") == []


def test_vanish_after_writes_lets_n_writes_through(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.vanish_after_writes("sda", 2)
    sysfs.write(f"{Q}/scheduler", "bfq")
    sysfs.write("block/sdb/queue/read_ahead_kb", "512")  # other devices do not count
    sysfs.write(f"{Q}/iosched/low_latency", "0")
    assert refused(sysfs, f"{Q}/read_ahead_kb", "256") == errno.ENOENT
    assert not sysfs.exists("block/sda")
    assert sysfs.read("block/sdb/queue/read_ahead_kb") == "512"


def test_refuse_fails_one_attribute_with_the_given_errno(fake_tree):
    sysfs = fake_tree.sysfs
    sysfs.refuse("sda", "queue/scheduler", errno.EBUSY)
    assert refused(sysfs, f"{Q}/scheduler", "bfq") == errno.EBUSY
    assert sysfs.read(f"{Q}/scheduler") == "none [mq-deadline] kyber bfq "
    sysfs.write(f"{Q}/read_ahead_kb", "256")
    sysfs.write("block/sdb/queue/scheduler", "bfq")
    assert sysfs.writes == 3


# --- the tree looks like /sys and /run/udev/data ---------------------------------------------


def test_block_entries_are_symlinks_into_devices(fake_tree):
    root = fake_tree.root
    assert os.readlink(root / "block/sda").startswith("../devices/pci0000:00/")
    assert os.readlink(root / "block/sda").endswith("/block/sda")
    assert os.readlink(root / "block/zram0") == "../devices/virtual/block/zram0"
    assert os.readlink(root / "class/block/sdb2").startswith("../../devices/")
    assert os.path.realpath(root / "class/block/sdb2") == os.path.realpath(root / "block/sdb/sdb2")
    assert os.path.realpath(root / "dev/block/8:0") == os.path.realpath(root / "block/sda")


def test_partitions_are_subdirectories_with_start_and_size(fake_tree):
    sysfs = fake_tree.sysfs
    assert [sysfs.read(f"block/sdb/sdb2/{a}") for a in ("partition", "start", "size")] == ["2", "1050624", "1952472064"]
    assert sysfs.read("block/nvme0n1/nvme0n1p1/partition") == "1"
    assert sysfs.read("block/mmcblk0/mmcblk0p3/start") == "4333568"


def test_stacked_devices_link_slaves_and_holders(fake_tree):
    sysfs = fake_tree.sysfs
    assert sysfs.listdir("block/dm-1/slaves") == ["mmcblk0p2", "mmcblk0p3"]
    assert sysfs.listdir("block/mmcblk0/mmcblk0p2/holders") == ["dm-1"]
    assert sysfs.realpath("block/dm-2/slaves/md0") == sysfs.realpath("block/md0")
    assert sysfs.read("block/dm-0/dm/uuid").startswith("CRYPT-LUKS2-")


def test_identity_files_sit_where_the_drivers_put_them(fake_tree):
    sysfs = fake_tree.sysfs
    assert sysfs.read("block/sda/device/vendor") == "ATA     "
    assert sysfs.read("block/sdb/device/model") == "Samsung SSD 870 "  # INQUIRY: 16 characters
    assert sysfs.read("block/sda/device/wwid") == "naa.5000c500a1b2c3d4"
    assert sysfs.read("block/nvme0n1/wwid") == "eui.002538b981b0a1f2"
    assert sysfs.read("block/nvme0n1/device/model").rstrip() == "Samsung SSD 980 PRO 1TB"
    assert sysfs.read("block/vda/serial") == "vm-disk-01"
    assert sysfs.read("block/loop0/loop/backing_file") == "/var/lib/images/disk.img"


def test_udev_records_parse_with_the_real_reader(fake_tree):
    udev = UdevDb(fake_tree.udev_root)
    rec = udev.record(fake_tree.sysfs.read("block/sda/dev"))
    assert rec.properties["ID_WWN"] == "0x5000c500a1b2c3d4"
    assert rec.properties["ID_BUS"] == "ata"
    assert "disk/by-id/wwn-0x5000c500a1b2c3d4" in rec.links
    part = udev.record(fake_tree.sysfs.read("block/sda/sda1/dev"))
    assert part.properties["ID_PART_ENTRY_NUMBER"] == "1"
    assert "disk/by-id/wwn-0x5000c500a1b2c3d4-part1" in part.links
    dm = udev.record(fake_tree.sysfs.read("block/dm-2/dev"))
    assert dm.properties["DM_NAME"] == "vg0-data"
    assert "mapper/vg0-data" in dm.links


def test_device_numbers_are_unique(fake_tree):
    sysfs = fake_tree.sysfs
    nums = [sysfs.read(f"class/block/{n}/dev") for n in sysfs.listdir("class/block")]
    assert len(nums) == len(set(nums)) > 20


def test_a_device_name_can_only_be_added_once(fake_tree):
    with pytest.raises(ValueError, match="already"):
        fake_tree.add_disk("sda")


def test_lean_disks_keep_everything_tunectl_reads(fake_root):
    full, lean = FakeTree.create(fake_root / "full"), FakeTree.create(fake_root / "lean")
    full.add_disks(3, lean=False, rotational=True, partitions=[(2048, 4096)])
    lean.add_disks(3, rotational=True, partitions=[(2048, 4096)])
    assert [d.to_json() for d in discover(lean.sysfs, lean.udev)] == [d.to_json() for d in discover(full.sysfs, full.udev)]
    assert len(os.listdir(lean.root / "block/sda/queue")) < len(os.listdir(full.root / "block/sda/queue"))
    lean.sysfs.write("block/sdc/queue/scheduler", "none")
    assert lean.sysfs.read("block/sdc/queue/nr_requests") == "32"


def test_bulk_disk_names_follow_the_kernel(empty_fake_tree):
    names = empty_fake_tree.add_disks(28)
    assert names[:2] == ["sda", "sdb"] and names[25:] == ["sdz", "sdaa", "sdab"]
    assert empty_fake_tree.sysfs.listdir("block") == sorted(names)
