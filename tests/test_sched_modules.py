"""Schedulers built as modules (bfq and kyber on Debian 12): offered though not listed, loaded by the write.

The fake kernel's `as_modules` makes every queue list only ``none [mq-deadline]`` and
loads a scheduler on the first write of its name; the module trees under
tests/data/modules are recorded from distribution kernels.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.tuning_helpers import Tunectl
from tunectl.cli import main
from tunectl.context import Context
from tunectl.system.modules import KernelModules, module_name, parse_modules_builtin, parse_modules_dep
from tunectl.tuning.attributes import modular_schedulers

MODULES = Path(__file__).parent / "data" / "modules"
DEBIAN = "6.1.0-13-amd64"
UBUNTU = "6.8.0-31-generic"

DESKTOP_LIKE = """\
name: modular
classes:
  ssd: {scheduler: [bfq, mq-deadline], iosched: {low_latency: 0}}
  rotational: {scheduler: [kyber, mq-deadline]}
"""


@pytest.mark.parametrize("path, name", [
    ("kernel/block/bfq.ko", "bfq"),
    ("kernel/block/kyber-iosched.ko.zst", "kyber_iosched"),
    ("kernel/block/kyber_iosched.ko.xz", "kyber_iosched"),
    ("kernel/drivers/md/dm-mod.ko.gz", "dm_mod"),
    ("kernel/block/README", None),
    ("", None),
])
def test_module_name_is_kmods_spelling(path: str, name: str | None) -> None:
    assert module_name(path) == name


def test_recorded_trees_have_bfq_and_kyber_as_modules_and_mq_deadline_built_in() -> None:
    for release, suffix in ((DEBIAN, ".ko"), (UBUNTU, ".ko.zst")):
        found = modular_schedulers(KernelModules(MODULES, release).loadable())
        assert found == {"bfq": str(MODULES / release / f"kernel/block/bfq{suffix}"),
                         "kyber": str(MODULES / release / f"kernel/block/kyber-iosched{suffix}")}, release


def test_a_built_in_module_is_not_loadable_even_if_modules_dep_names_it() -> None:
    dep = parse_modules_dep("kernel/block/bfq.ko:\nkernel/block/mq-deadline.ko:\n")
    assert set(dep) == {"bfq", "mq_deadline"}
    assert parse_modules_builtin("kernel/block/mq-deadline.ko\n\n") == {"mq_deadline"}
    loadable = {"bfq": "/m/bfq.ko"}
    assert modular_schedulers(loadable) == {"bfq": "/m/bfq.ko"}


@pytest.mark.parametrize("root, release", [(None, DEBIAN), (MODULES, "5.10.0-no-such-release"), (MODULES, "")])
def test_no_tree_means_nothing_loadable(root, release) -> None:
    assert KernelModules(root, release).loadable() == {}


def test_context_reads_the_tree_from_the_environment(tmp_path: Path) -> None:
    env = {"TUNECTL_MODULES_ROOT": str(MODULES), "TUNECTL_KERNEL_RELEASE": DEBIAN, "TUNECTL_SYSFS_ROOT": str(tmp_path)}
    ctx = Context.create(env=env)
    assert set(modular_schedulers(ctx.modules.loadable())) == {"bfq", "kyber"}
    # A fake sysfs tree is not described by this machine's /lib/modules.
    fake = Context.create(env={"TUNECTL_SYSFS_ROOT": str(tmp_path), "TUNECTL_KERNEL_RELEASE": DEBIAN})
    assert fake.modules.root == tmp_path / ".modules" and fake.modules.loadable() == {}
    real = Context.create(env={})
    assert str(real.modules.root) == "/lib/modules"


@pytest.fixture
def modular(empty_fake_tree, tmp_path):
    """sdb (SSD) and sda (HDD) on a kernel with bfq and kyber as modules, none loaded."""
    tree = empty_fake_tree
    tree.add_disk("sda", rotational=True, wwn="0x5000c50000000001")
    tree.add_disk("sdb", wwn="0x5000c50000000002")
    tree.sysfs.as_modules("bfq", "kyber")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "modular.yaml").write_text(DESKTOP_LIKE)
    t = Tunectl(tree, tmp_path / "state", [tmp_path / "profiles"])
    t.ctx.modules = KernelModules(MODULES, DEBIAN)
    return t


def _sched_file(tree, name: str) -> str:
    return (tree.root / "block" / name / "queue" / "scheduler").read_text().strip()


def test_fake_lists_only_what_is_loaded(modular) -> None:
    assert _sched_file(modular.tree, "sdb") == "none [mq-deadline]"


def test_a_module_scheduler_is_planned_applied_read_back_and_verified(modular) -> None:
    plan = modular("plan", "-p", "modular", "--json")
    assert plan.code == 0, plan.err
    sched = {s["device"]: s for s in plan.doc["settings"] if s["attribute"] == "scheduler"}
    assert (sched["sdb"]["before"], sched["sdb"]["after"], sched["sdb"]["status"]) == ("mq-deadline", "bfq", "change")
    assert (sched["sda"]["after"], sched["sda"]["status"]) == ("kyber", "change")
    status = modular("status", "--json")
    assert {d["name"]: d["loadable"] for d in status.doc["devices"]} == {"sda": ["bfq", "kyber"], "sdb": ["bfq", "kyber"]}

    r = modular("apply", "-p", "modular", "--json")
    assert r.code == 0, r.out + r.err
    outcomes = {(o["device"], o["attribute"]): o for o in r.doc["settings"]}
    assert outcomes[("sdb", "scheduler")]["readback"] == "bfq"
    assert outcomes[("sdb", "scheduler")]["status"] == "changed"
    assert outcomes[("sdb", "iosched/low_latency")]["status"] == "changed"
    assert outcomes[("sda", "scheduler")]["readback"] == "kyber"
    # Loaded by the write: now listed on every blk-mq queue, as the kernel does.
    # (devices are written in parallel, so the load order -- and the list order -- may differ)
    assert sorted(_sched_file(modular.tree, "sdb").split()) == ["[bfq]", "kyber", "mq-deadline", "none"]
    assert sorted(_sched_file(modular.tree, "sda").split()) == ["[kyber]", "bfq", "mq-deadline", "none"]

    v = modular("verify", "--json")
    assert v.code == 0 and v.doc["in_sync"] is True, v.out
    again = modular("apply", "-p", "modular", "--json")
    assert again.doc["changed"] is False


def test_without_a_module_tree_the_unlisted_scheduler_falls_back_as_before(modular) -> None:
    modular.ctx.modules = KernelModules.none()
    plan = modular("plan", "-p", "modular", "--json")
    sched = {s["device"]: s for s in plan.doc["settings"] if s["attribute"] == "scheduler"}
    assert (sched["sdb"]["after"], sched["sdb"]["status"]) == ("mq-deadline", "ok")
    assert (sched["sda"]["after"], sched["sda"]["status"]) == ("mq-deadline", "ok")


def test_unavailable_reason_names_the_loadable_ones_too(modular) -> None:
    modular.ctx.modules = KernelModules(MODULES, UBUNTU)
    (modular.ctx.search_path[0] / "only.yaml").write_text("name: only\nclasses:\n  ssd: {scheduler: none}\n"
                                                           "  rotational: {scheduler: [bfq]}\n")
    modular.tree.sysfs.load_scheduler("bfq")
    plan = modular("plan", "-p", "only", "--json")
    sched = {s["device"]: s for s in plan.doc["settings"] if s["attribute"] == "scheduler"}
    assert sched["sda"]["status"] == "change"  # bfq is listed now
    (modular.ctx.search_path[0] / "only.yaml").write_text("name: only\nclasses:\n  rotational: {scheduler: [kyber]}\n")
    modular.ctx.modules = KernelModules.none()
    plan = modular("plan", "-p", "only", "--json")
    (s,) = [s for s in plan.doc["settings"] if s["attribute"] == "scheduler"]
    assert s["status"] == "unavailable" and "none of kyber" in s["reason"]


def test_a_module_that_will_not_load_is_a_failed_setting_not_a_crash(modular) -> None:
    """modules.dep names bfq but modprobe fails (blacklisted, modules_disabled): the write is EINVAL."""
    modular.tree.sysfs.modules.discard("bfq")
    r = modular("apply", "-p", "modular", "--json")
    assert r.code == 3, r.out
    outcomes = {(o["device"], o["attribute"]): o for o in r.doc["settings"]}
    assert outcomes[("sdb", "scheduler")]["status"] == "failed"
    assert outcomes[("sdb", "iosched/low_latency")]["status"] == "failed"
    assert outcomes[("sda", "scheduler")]["status"] == "changed"  # kyber loads; the rest goes on
    assert "internal error" not in r.err and "Traceback" not in r.err
    v = modular("verify", "-p", "modular", "--json")
    assert v.code == 1
    assert [(s["device"], s["attribute"]) for s in v.doc["settings"] if s["status"] == "change"] == [
        ("sdb", "scheduler"), ("sdb", "iosched/low_latency")]


def test_cli_env_gives_the_module_tree_to_status(empty_fake_tree, tmp_path) -> None:
    empty_fake_tree.add_disk("sdb", wwn="0x5000c50000000002")
    empty_fake_tree.sysfs.as_modules("bfq", "kyber")
    out, err = io.StringIO(), io.StringIO()
    env = {"TUNECTL_SYSFS_ROOT": str(empty_fake_tree.root), "TUNECTL_UDEV_ROOT": str(empty_fake_tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_MODULES_ROOT": str(MODULES),
           "TUNECTL_KERNEL_RELEASE": DEBIAN}
    code = main(["status", "-p", "desktop", "--json"], env=env, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    (dev,) = json.loads(out.getvalue())["devices"]
    assert dev["schedulers"] == ["none", "mq-deadline"] and dev["loadable"] == ["bfq", "kyber"]
    assert [(d["attribute"], d["after"]) for d in dev["drift"] if d["attribute"] == "scheduler"] == [("scheduler", "bfq")]
