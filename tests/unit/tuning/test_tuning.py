"""plan / apply / verify / rollback on every fake topology, through the real CLI."""

from __future__ import annotations

import errno

import pytest

from tests.tuning_helpers import Tunectl, snapshot, snapshot_all
from tunectl.attributes import QUEUE

EVERY_CLASS = """\
name: every-class
classes:
  rotational: {scheduler: [bfq, mq-deadline], read_ahead_kb: 2048, iosched: {slice_idle: 0, low_latency: 0}}
  ssd: {scheduler: mq-deadline, read_ahead_kb: 256, iosched: {read_expire: 150, write_expire: 1500, front_merges: 0}}
  nvme: {scheduler: none, read_ahead_kb: 128, queue: {nomerges: 1}}
  virtio: {scheduler: none, read_ahead_kb: 512}
  mmc: {scheduler: kyber, iosched: {read_lat_nsec: 1000000}}
  dm: {read_ahead_kb: 4096, scheduler: mq-deadline}
  md: {read_ahead_kb: 8192}
  zram: {read_ahead_kb: 0}
  loop: {scheduler: mq-deadline, read_ahead_kb: 1024}
devices:
  - match: {dm_type: verity}
    below: {scheduler: mq-deadline, iosched: {fifo_batch: 32}}
  - match: {dm_type: lvm}
    below: {read_ahead_kb: 3072}
"""


@pytest.fixture
def tunectl(fake_tree, tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "every-class.yaml").write_text(EVERY_CLASS)
    return Tunectl(fake_tree, tmp_path / "state", [tmp_path / "profiles"])


def settings_of(doc: dict, device: str) -> dict[str, dict]:
    return {s["attribute"]: s for s in doc["settings"] if s["device"] == device}


def test_status_lists_every_topology_with_its_class(tunectl):
    r = tunectl("status", "--json")
    assert r.code == 0, r.err
    classes = {d["name"]: (d["class"], d["dm_type"]) for d in r.doc["devices"]}
    assert classes == {
        "sda": ("rotational", None), "sdb": ("ssd", None), "nvme0n1": ("nvme", None), "vda": ("virtio", None),
        "dm-0": ("dm", "crypt"), "mmcblk0": ("mmc", None), "dm-1": ("dm", "verity"), "sdc": ("rotational", None),
        "sdd": ("rotational", None), "md0": ("md", None), "dm-2": ("dm", "lvm"), "zram0": ("zram", None),
        "loop0": ("loop", None),
    }


def test_plan_apply_verify_rollback_on_every_topology(tunectl, fake_tree):
    originals = snapshot_all(fake_tree)
    plan = tunectl("plan", "-p", "every-class", "--json")
    assert plan.code == 0
    assert plan.doc["in_sync"] is False

    r = tunectl("apply", "-p", "every-class", "--json")
    assert r.code == 0, r.out
    assert r.doc["changed"] is True
    sda, sdb = settings_of(r.doc, "sda"), settings_of(r.doc, "sdb")
    assert sda["scheduler"]["status"] == "changed" and sda["scheduler"]["after"] == "bfq"
    assert snapshot(fake_tree, "sdb")["iosched/read_expire"] == "152"  # jiffies at HZ=250
    assert sdb["iosched/read_expire"]["readback"] == 152 and sdb["iosched/read_expire"]["status"] == "changed"
    # dm has no scheduler: a typed skip, not an error
    assert settings_of(r.doc, "dm-0")["scheduler"]["status"] == "skip"
    assert "below" in settings_of(r.doc, "dm-0")["scheduler"]["error"]
    assert snapshot(fake_tree, "dm-0")["read_ahead_kb"] == "4096"
    # dm-verity on mmc: below: wins over mmc's own class (kyber) and its knobs apply
    mmc = settings_of(r.doc, "mmcblk0")
    assert mmc["scheduler"]["after"] == "mq-deadline" and mmc["scheduler"]["source"].startswith("devices[0].below")
    assert mmc["iosched/read_lat_nsec"]["status"] == "skip"
    assert snapshot(fake_tree, "mmcblk0")["iosched/fifo_batch"] == "32"
    # LVM over md over sdc+sdd: below reaches the member disks through md0
    for member in ("sdc", "sdd"):
        assert snapshot(fake_tree, member)["read_ahead_kb"] == "3072"
    assert snapshot(fake_tree, "md0")["read_ahead_kb"] == "8192"
    assert snapshot(fake_tree, "zram0")["read_ahead_kb"] == "0"

    assert tunectl("verify", "-p", "every-class").code == 0
    again = tunectl("apply", "-p", "every-class", "--json")
    assert again.code == 0 and again.doc["changed"] is False and again.doc["writes"] == 0

    r = tunectl("rollback", "--json")
    assert r.code == 0, r.out
    assert snapshot_all(fake_tree) == originals
    assert tunectl("verify", "-p", "every-class").code == 1


def test_verify_without_profile_uses_the_last_applied_one(tunectl, fake_tree):
    assert tunectl("apply", "-p", "every-class").code == 0
    assert tunectl("verify").code == 0
    (fake_tree.root / "block/sdb/queue/read_ahead_kb").write_text("64")
    r = tunectl("verify", "--json")
    assert r.code == 1
    drift = [s for s in r.doc["settings"] if s["status"] == "change"]
    assert [(s["device"], s["attribute"], s["before"]) for s in drift] == [("sdb", "read_ahead_kb", 64)]


def test_scheduler_not_offered_is_reported_and_the_rest_applies(tunectl, fake_tree, tmp_path):
    p = tmp_path / "kyber-only.yaml"
    p.write_text("classes:\n  nvme: {scheduler: kyber, read_ahead_kb: 64}\n")
    (fake_tree.root / "block/nvme0n1/queue/scheduler").write_text("[none] mq-deadline\n")
    r = tunectl("apply", "-p", str(p), "nvme0n1", "--json")
    assert r.code == 3
    s = settings_of(r.doc, "nvme0n1")
    assert s["scheduler"]["status"] == "unavailable" and "offers none mq-deadline" in s["scheduler"]["error"]
    assert s["read_ahead_kb"]["status"] == "changed"
    assert tunectl("verify", "-p", str(p), "nvme0n1").code == 1


def test_refused_write_is_partial_failure(tunectl, fake_tree):
    fake_tree.sysfs.refuse("sdb", "queue/read_ahead_kb", errno.EINVAL)
    r = tunectl("apply", "-p", "every-class", "--json")
    assert r.code == 3
    s = settings_of(r.doc, "sdb")
    assert s["read_ahead_kb"]["status"] == "failed" and "EINVAL" in s["read_ahead_kb"]["error"]
    assert s["iosched/read_expire"]["status"] == "changed"
    assert settings_of(r.doc, "sda")["read_ahead_kb"]["status"] == "changed"


def test_device_vanishing_mid_run_is_reported_per_setting(tunectl, fake_tree):
    fake_tree.sysfs.vanish_after_writes("sda", 1)
    r = tunectl("apply", "-p", "every-class", "--json")
    assert r.code == 3
    s = settings_of(r.doc, "sda")
    assert s["scheduler"]["status"] == "changed"
    assert {s[a]["status"] for a in s if a != "scheduler"} == {"failed"}
    assert settings_of(r.doc, "sdb")["read_ahead_kb"]["status"] == "changed"


def test_not_permitted_everywhere_exits_4(tunectl, fake_tree, tmp_path):
    p = tmp_path / "ra.yaml"
    p.write_text("classes:\n  ssd: {read_ahead_kb: 64}\n")
    fake_tree.sysfs.refuse("sdb", "queue/read_ahead_kb", errno.EPERM)
    r = tunectl("apply", "-p", str(p), "sdb", "--json")
    assert r.code == 4
    assert settings_of(r.doc, "sdb")["read_ahead_kb"]["status"] == "not-permitted"


def test_check_writes_nothing_and_reports_changes(tunectl, fake_tree):
    before = snapshot_all(fake_tree)
    r = tunectl("apply", "-p", "every-class", "--check", "--json")
    assert r.code == 0 and r.doc["changed"] is True and r.doc["check"] is True
    assert snapshot_all(fake_tree) == before
    assert fake_tree.sysfs.writes == 0


def test_detailed_exitcode(tunectl):
    assert tunectl("apply", "-p", "every-class", "--detailed-exitcode", "-q").code == 2
    assert tunectl("apply", "-p", "every-class", "--detailed-exitcode", "-q").code == 0


def test_apply_json_shape_is_what_ansible_reads(tunectl):
    doc = tunectl("apply", "-p", "every-class", "--json").doc
    assert set(doc) >= {"changed", "settings", "profile"}
    for s in doc["settings"]:
        assert {"device", "attribute", "before", "after", "status"} <= set(s)


def test_rollback_by_device_restores_only_that_device(tunectl, fake_tree):
    before = snapshot_all(fake_tree)
    assert tunectl("apply", "-p", "every-class").code == 0
    assert tunectl("rollback", "/dev/sda").code == 0
    after = snapshot_all(fake_tree)
    assert after["sda"] == before["sda"]
    assert after["sdb"] != before["sdb"]


def test_journal_keeps_the_first_original_across_applies(tunectl, fake_tree, tmp_path):
    original = snapshot(fake_tree, "sdb")["read_ahead_kb"]
    for ra in (64, 96):
        p = tmp_path / f"ra{ra}.yaml"
        p.write_text(f"classes:\n  ssd: {{read_ahead_kb: {ra}}}\n")
        assert tunectl("apply", "-p", str(p), "sdb").code == 0
    assert tunectl("rollback", "sdb").code == 0
    assert snapshot(fake_tree, "sdb")["read_ahead_kb"] == original


def test_unknown_device_is_a_usage_error(tunectl):
    r = tunectl("plan", "-p", "every-class", "sdz")
    assert r.code == 2
    assert "no block device 'sdz'" in r.err and "devices here:" in r.err


def test_partition_argument_means_its_disk(tunectl):
    r = tunectl("plan", "-p", "every-class", "sdb2", "--json")
    assert r.code == 0
    assert {s["device"] for s in r.doc["settings"]} == {"sdb"}


def test_missing_profile_is_a_usage_error(tunectl):
    r = tunectl("plan", "-p", "no-such-profile")
    assert r.code == 2 and "not found" in r.err


def test_json_errors_keep_stdout_one_document(tunectl):
    r = tunectl("plan", "-p", "no-such-profile", "--json")
    assert r.code == 2 and r.doc["ok"] is False


def test_global_options_after_the_command(tunectl):
    assert tunectl("status", "-q").code == 0
    assert tunectl("--json", "status").doc["devices"]


def test_state_dir_under_a_file_is_a_state_error(fake_tree, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = Tunectl(fake_tree, blocker / "state")("apply", "-p", "default")
    assert r.code == 5 and "state directory" in r.err


def test_values_the_kernel_resets_are_written_again(tunectl, fake_tree, tmp_path):
    """A limit write raises read_ahead_kb and an nr_requests write resets async_depth, even when both were in sync."""
    q = fake_tree.root / "block/sda/queue"
    depth = (q / "iosched/async_depth").read_text().strip()
    (q / "read_ahead_kb").write_text("64\n")
    p = tmp_path / "limits.yaml"
    p.write_text("classes:\n  rotational:\n    read_ahead_kb: 64\n"
                 f"    queue: {{add_random: {1 - int((q / 'add_random').read_text())}, nr_requests: 32}}\n"
                 f"    iosched: {{async_depth: {int(depth) if depth.isdigit() else 16}}}\n")
    plan = settings_of(tunectl("plan", "-p", str(p), "sda", "--json").doc, "sda")
    assert plan["read_ahead_kb"]["status"] == "change" and "reset" in plan["read_ahead_kb"]["reason"]
    assert tunectl("apply", "-p", str(p), "sda").code == 0
    assert (q / "read_ahead_kb").read_text().strip() == "64"
    assert tunectl("verify", "-p", str(p), "sda").code == 0
    assert tunectl("rollback", "sda").code == 0
    assert (q / "read_ahead_kb").read_text().strip() == "64"  # the journalled original


def test_naming_devices_reads_only_their_stacks_and_plans_them_exactly_as_a_full_run(tunectl, fake_tree, monkeypatch):
    """`plan sda` reads sda and the stacks above and below it, not every disk; the settings are the same."""
    full = tunectl("plan", "-p", "every-class", "--json").doc["settings"]
    from tunectl.devices import discover

    read: list[str] = []
    real = discover.read_device
    monkeypatch.setattr(discover, "read_device", lambda sysfs, udev, name, *rest: read.append(name) or
                        real(sysfs, udev, name, *rest))
    for name, stack in (("mmcblk0", {"mmcblk0", "dm-1"}), ("sdc", {"sdc", "md0", "dm-2"}),
                        ("dm-2", {"dm-2", "md0", "sdc", "sdd"}), ("vda", {"vda"})):
        read.clear()
        doc = tunectl("plan", "-p", "every-class", name, "--json").doc
        assert set(read) == stack, name
        assert doc["settings"] == [s for s in full if s["device"] == name], name
    below = settings_of(tunectl("plan", "-p", "every-class", "mmcblk0", "--json").doc, "mmcblk0")
    assert below["iosched/fifo_batch"]["source"].startswith("devices[0].below (from dm-1)")


def test_the_snapshot_sees_every_queue_attribute_tunectl_may_write(empty_fake_tree) -> None:
    """"rollback restores everything" checks compare snapshots: one blind to io_poll or write_cache sees nothing."""
    empty_fake_tree.add_disk("nvme0n1", bus="nvme")
    assert set(QUEUE) <= set(snapshot(empty_fake_tree, "nvme0n1"))



@pytest.mark.parametrize("nr_requests_by_hand", [False, True])
def test_a_rollback_says_changed_only_where_the_value_differs(tunectl, fake_tree, tmp_path,
                                                               nr_requests_by_hand: bool) -> None:
    """mq-deadline resets async_depth when nr_requests is written. A rollback wrote async_depth again whenever
    nr_requests was in its journal and said "changed" ("- -> 256") even when nr_requests was already back at its
    original (not written at all) and async_depth had not moved. Now each is decided on its value: in sync, or
    changed from the value it had when the rollback began."""
    kernel, q = fake_tree.sysfs, fake_tree.root / "block/sdb/queue"
    kernel.write("block/sdb/queue/scheduler", "mq-deadline")
    nr, depth = (q / "nr_requests").read_text().strip(), (q / "iosched/async_depth").read_text().strip()
    p = tmp_path / "depth.yaml"
    p.write_text("classes:\n  ssd: {scheduler: mq-deadline, queue: {nr_requests: 32}, iosched: {async_depth: 16}}\n")
    assert tunectl("apply", "-p", str(p), "sdb").code == 0
    assert (q / "iosched/async_depth").read_text().strip() == "16"
    if nr_requests_by_hand:  # the kernel resets async_depth to the depth: the original values, both
        kernel.write("block/sdb/queue/nr_requests", nr)
        assert (q / "iosched/async_depth").read_text().strip() == depth
    r = tunectl("rollback", "sdb", "--json")
    assert r.code == 0, r.err
    got = settings_of(r.doc, "sdb")
    assert (q / "nr_requests").read_text().strip() == nr and (q / "iosched/async_depth").read_text().strip() == depth
    if nr_requests_by_hand:
        assert got["nr_requests"]["status"] == got["iosched/async_depth"]["status"] == "ok"
        assert got["iosched/async_depth"]["before"] == int(depth) and r.doc["changed"] is False
    else:
        assert got["nr_requests"]["status"] == got["iosched/async_depth"]["status"] == "changed"
        assert got["iosched/async_depth"]["before"] == 16 and got["iosched/async_depth"]["after"] == int(depth)
    assert [s["attribute"] for s in r.doc["settings"] if s["status"] == "changed"] == \
        [s["attribute"] for s in r.doc["settings"] if s["before"] != s["after"]]


def _mq_deadline_sdb(fake_tree, tmp_path) -> tuple:
    """sdb on mq-deadline (async_depth: the depth, as 6.18 sets it), its queue directory, its nr_requests and
    async_depth, and a profile that changes both."""
    fake_tree.sysfs.write("block/sdb/queue/scheduler", "mq-deadline")
    q = fake_tree.root / "block/sdb/queue"
    p = tmp_path / "depth.yaml"
    p.write_text("classes:\n  ssd: {scheduler: mq-deadline, queue: {nr_requests: 32}, iosched: {async_depth: 16}}\n")
    return q, (q / "nr_requests").read_text().strip(), (q / "iosched/async_depth").read_text().strip(), p


def _writes_of(kernel, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queue attributes written from now on, in order."""
    writes: list[str] = []
    real = kernel.write

    def write(rel: str, value: str) -> None:
        writes.append(rel.split("/queue/", 1)[1])
        real(rel, value)

    monkeypatch.setattr(kernel, "write", write)
    return writes


def test_a_rollback_restores_async_depth_again_only_after_an_nr_requests_write_it_makes(
        tunectl, fake_tree, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a restore that is written disturbs async_depth (mq-deadline resets it on an nr_requests write): with
    nr_requests already back at its original (by hand, the kernel's reset putting async_depth back too), nothing
    is to be done; the plan does not list async_depth as one more write "the kernel resets"."""
    q, nr, depth, p = _mq_deadline_sdb(fake_tree, tmp_path)
    assert tunectl("apply", "-p", str(p), "sdb").code == 0
    fake_tree.sysfs.write("block/sdb/queue/nr_requests", nr)
    assert (q / "iosched/async_depth").read_text().strip() == depth
    r = tunectl("rollback", "sdb", "--check", "--json")
    assert r.code == 0, r.err
    got = settings_of(r.doc, "sdb")
    assert got["nr_requests"]["status"] == got["iosched/async_depth"]["status"] == "ok", got
    assert r.doc["changed"] is False
    r = tunectl("rollback", "sdb", "--print")
    assert r.code == 0 and "async_depth" not in r.out, r.out
    writes = _writes_of(fake_tree.sysfs, monkeypatch)
    assert tunectl("rollback", "sdb").code == 0
    assert writes == []


@pytest.mark.parametrize("original", ["the depth", "3/4 of it"])
def test_a_rollback_writes_async_depth_only_when_the_kernels_reset_did_not_restore_it(
        tunectl, fake_tree, tmp_path, monkeypatch: pytest.MonkeyPatch, original: str) -> None:
    """The nr_requests restore makes mq-deadline reset async_depth (to the depth on 6.18, 3/4 of it before): looked
    at again just before its own write, async_depth already at its original is not written; else it is, once."""
    q, nr, depth, p = _mq_deadline_sdb(fake_tree, tmp_path)
    if original == "3/4 of it":  # as a kernel before 6.18 set it
        depth = str(3 * int(nr) // 4)
        fake_tree.sysfs.write("block/sdb/queue/iosched/async_depth", depth)
    assert tunectl("apply", "-p", str(p), "sdb").code == 0
    writes = _writes_of(fake_tree.sysfs, monkeypatch)
    r = tunectl("rollback", "sdb", "--json")
    assert r.code == 0, r.err
    assert (q / "nr_requests").read_text().strip() == nr and (q / "iosched/async_depth").read_text().strip() == depth
    assert writes == ["nr_requests"] + (["iosched/async_depth"] if original == "3/4 of it" else []), writes
    got = settings_of(r.doc, "sdb")["iosched/async_depth"]
    assert (got["status"], got["before"], got["after"]) == ("changed", 16, int(depth)), got
