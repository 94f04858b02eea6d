"""Schedulers built as modules (bfq and kyber on Debian 12): offered though not listed, loaded by the write.

The fake kernel's `as_modules` makes every queue list only ``none [mq-deadline]`` and
loads a scheduler on the first write of its name; the module trees under
tests/data/modules are recorded from distribution kernels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import DATA as TEST_DATA
from tests.harness import REPO, run_cli
from tests.tuning_helpers import Tunectl
from tunectl.attributes import SCHEDULER_MODULE_NAMES, modular_schedulers
from tunectl.context import Context
from tunectl.system.modules import (
    KernelModules,
    loadable_modules,
    module_name,
    parse_modules_builtin,
    parse_modules_dep,
)

MODULES = TEST_DATA / "modules"
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


@pytest.mark.parametrize("release", [DEBIAN, UBUNTU])
def test_asking_for_the_schedulers_finds_what_the_whole_tree_does(release: str) -> None:
    """The schedulers' lines only (one scan, the rest never split): the same files as parsing every line."""
    whole = KernelModules(MODULES, release).loadable()
    assert len(whole) > 3  # more than the schedulers: the others are left out
    wanted = KernelModules(MODULES, release).loadable(SCHEDULER_MODULE_NAMES)
    assert wanted == {k: v for k, v in whole.items() if k in {"bfq", "kyber_iosched", "mq_deadline"}}
    assert modular_schedulers(wanted) == modular_schedulers(whole)


def test_a_wanted_module_is_found_in_any_spelling_and_nowhere_else() -> None:
    """Generated trees: each wanted module with '-' or '_', any suffix, any directory, named as a dependency of
    another, built in or not, beside modules whose names contain or extend the wanted ones."""
    import random

    rng = random.Random(18)
    names = ["bfq", "kyber-iosched", "kyber_iosched", "mq-deadline", "xbfq", "bfq2", "bfq-extra", "kyber", "dm-mod",
             "mq_deadline_x", "deadline"]
    for _ in range(400):
        lines, built = [], []
        for name in rng.sample(names, rng.randint(0, len(names))):
            where = rng.choice(["", "kernel/", "kernel/block/", "updates/dkms/"])
            path = f"{where}{name}{rng.choice(['.ko', '.ko.xz', '.ko.zst', '.ko.gz', '.o'])}"
            deps = " ".join(rng.sample(["kernel/block/bfq.ko", "kernel/lib/x.ko", "kyber-iosched.ko"],
                                       rng.randint(0, 2)))
            lines.append(f"{rng.choice(['', ' '])}{path}{rng.choice(['', ' '])}:{(' ' + deps) if deps else ''}")
            if rng.random() < 0.3:
                built.append(path)
        dep, builtin = "\n".join(lines) + "\n", "\n".join(built) + "\n"
        whole = loadable_modules(dep, builtin, "/m")
        wanted = loadable_modules(dep, builtin, "/m", SCHEDULER_MODULE_NAMES)
        assert wanted == {k: v for k, v in whole.items() if k in {"bfq", "kyber_iosched", "mq_deadline"}}, dep


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
    env = {"TUNECTL_SYSFS_ROOT": str(empty_fake_tree.root), "TUNECTL_UDEV_ROOT": str(empty_fake_tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_MODULES_ROOT": str(MODULES),
           "TUNECTL_KERNEL_RELEASE": DEBIAN}
    r = run_cli("status", "-p", "desktop", "--json", env=env)
    assert r.code == 0, r.err
    (dev,) = r.doc["devices"]
    assert dev["schedulers"] == ["none", "mq-deadline"] and dev["loadable"] == ["bfq", "kyber"]
    assert [(d["attribute"], d["after"]) for d in dev["drift"] if d["attribute"] == "scheduler"] == [("scheduler", "bfq")]


# --- udev rules: the module list is an explicit input of render ------------------------------------------------

import os  # noqa: E402
import re  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.udevsim import (  # noqa: E402
    MiniUdev,
    apply_plan,
    build_tree,
    exact_case,
    profile_data,
    queue_state,
)
from tunectl.devices.discover import discover  # noqa: E402
from tunectl.profile.resolve import load_profile  # noqa: E402
from tunectl.status import Status  # noqa: E402
from tunectl.system.sysfs import Sysfs  # noqa: E402
from tunectl.system.udevdb import UdevDb  # noqa: E402
from tunectl.tuning.plan import make_plan  # noqa: E402
from tunectl.udev.lint import lint  # noqa: E402
from tunectl.udev.render import render_rules  # noqa: E402

ROOT = REPO
GOLDEN = ROOT / "tests" / "golden" / "udev-modules"
TUNECTL = "/usr/sbin/tunectl"


def _debian_modules() -> dict[str, str]:
    """The recorded Debian 12 tree as it lies on a Debian machine (a fixed path: golden files stay put)."""
    found = modular_schedulers(KernelModules(MODULES, DEBIAN).loadable())
    return {k: "/lib/modules/" + os.path.relpath(v, MODULES) for k, v in found.items()}


def test_golden_with_debian_modules() -> None:
    name = "desktop"
    profile = load_profile(name, [ROOT / "profiles"])
    rendered = render_rules(profile, TUNECTL, modules=_debian_modules())
    assert lint(rendered.text) == []
    golden = GOLDEN / f"{name}.rules"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered.text)
    assert rendered.text == golden.read_text(), f"{golden} differs; regenerate with UPDATE_GOLDEN=1 if intended"
    plain = render_rules(profile, TUNECTL)
    assert plain.text == (ROOT / "tests" / "golden" / "udev" / f"{name}.rules").read_text()  # no modules: as before
    assert plain.digest != rendered.digest


def test_modules_a_profile_cannot_choose_change_nothing() -> None:
    """balanced names only mq-deadline and none: its rules (and digest) do not depend on the kernel's modules."""
    profile = load_profile("balanced", [ROOT / "profiles"])
    assert render_rules(profile, TUNECTL, modules=_debian_modules()) == render_rules(profile, TUNECTL)


def test_desktop_offers_bfq_from_the_module_file() -> None:
    text = (GOLDEN / "desktop.rules").read_text()
    assert ('ENV{TUNECTL_HAS_SCHEDULER}=="1", TEST=="/lib/modules/6.1.0-13-amd64/kernel/block/bfq.ko", '
            'ENV{TUNECTL_SCHEDULER}="bfq"') in text.splitlines()
    # The module line comes right after its own glob line: the preference order is kept.
    lines = text.splitlines()
    i = lines.index('ATTR{queue/scheduler}=="*bfq*", ENV{TUNECTL_SCHEDULER}="bfq"')
    assert lines[i - 1] == 'ATTR{queue/scheduler}=="*mq-deadline*", ENV{TUNECTL_SCHEDULER}="mq-deadline"'
    assert "TEST==" in lines[i + 1]


@pytest.mark.parametrize("path", ["relative/bfq.ko", "/lib/modules/6.1 x/bfq.ko", '/lib/"bfq.ko', "/lib/../x/bfq.ko"])
def test_a_module_path_udev_cannot_test_is_left_out_with_a_note(path: str) -> None:
    profile = load_profile("desktop", [ROOT / "profiles"])
    rendered = render_rules(profile, TUNECTL, modules={"bfq": path})
    assert "TEST==" not in rendered.text.split("# classes.", 1)[1].split("\n# writes", 1)[0] or \
        'TEST=="' + path not in rendered.text
    assert any("bfq is a module" in n for n in rendered.notes)
    assert rendered.text == render_rules(profile, TUNECTL).text


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                                  HealthCheck.function_scoped_fixture])
@given(profile_data(), st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
       st.sets(st.sampled_from(["mq-deadline", "bfq", "kyber"])), st.booleans(), st.data())
def test_rules_and_plan_agree_on_module_schedulers(tmp_path_factory, data: dict, seeds: list, modular: set,
                                                   file_present: bool, draw) -> None:
    """Random profiles and devices on a kernel with some schedulers as modules (unlisted until written):
    the rules' writes == the plan's writes; with the module file gone (another kernel booted), the
    rules fall back to what is listed, as a plan without modules does."""
    from hypothesis import assume

    profile, devices = exact_case(data, len(seeds), draw, TUNECTL)
    # A bare "naa." wwid (no digits) is read as WWN "0x" by discovery but not by the rules: a mismatch
    # of the base equivalence test's generator, unrelated to modules (reported in the issue note).
    assume(not any(d["attrs"].get(k) == "naa." for d in devices for k in ("wwid", "device/wwid")))
    for d in devices:  # a module is listed only once loaded (the active one is loaded)
        if d["offered"] != ["none"]:
            d["offered"] = [s for s in d["offered"] if s not in modular or s == d["active"]]
    tree_dir = tmp_path_factory.mktemp("modules")
    files = {s: str(tree_dir / f"{s}.ko") for s in modular}
    for path in files.values():
        if file_present:
            Path(path).write_text("")
    rules_root, apply_root = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("apply")
    loadable = modular if file_present else set()
    by_rules, events = build_tree(rules_root, devices, loadable)
    by_apply, _ = build_tree(apply_root, devices, loadable)
    udev = MiniUdev(rules_root, render_rules(profile, TUNECTL, modules=files).text)
    for name, (devpath, env) in events.items():
        udev.event(name, devpath, env, by_rules)
    apply_plan(by_apply, profile, sorted(loadable))  # as apply does, ranges decided on live values
    assert queue_state(by_rules) == queue_state(by_apply)


def _device(name: str, rotational: str) -> dict:
    return {"name": name, "offered": ["none", "mq-deadline"], "active": "mq-deadline", "rotational": rotational,
            "removable": "0", "size": "2000", "env": {}, "attrs": {}, "bus_path": "pci0000:00/ata1/host0"}


@pytest.mark.parametrize("file_present", [True, False], ids=["module-file", "other-kernel"])
def test_rules_load_the_module_scheduler_as_apply_does(tmp_path: Path, file_present: bool) -> None:
    """The case the random test above only meets now and then, spelt out: an SSD and an HDD listing
    ``none [mq-deadline]`` on a kernel with bfq and kyber as modules."""
    profile = load_profile(str(_write(tmp_path / "modular.yaml", DESKTOP_LIKE)), [ROOT / "profiles"])
    files = {"bfq": str(tmp_path / "bfq.ko"), "kyber": str(tmp_path / "kyber-iosched.ko")}
    if file_present:
        for path in files.values():
            Path(path).write_text("")
    loadable = set(files) if file_present else set()
    devices = [_device("sda", "1"), _device("sdb", "0")]
    by_rules, events = build_tree(tmp_path / "rules", devices, loadable)
    by_apply, _ = build_tree(tmp_path / "apply", devices, loadable)
    udev = MiniUdev(tmp_path / "rules", render_rules(profile, TUNECTL, modules=files).text)
    for name, (devpath, env) in events.items():
        udev.event(name, devpath, env, by_rules)
    found = discover(Sysfs(tmp_path / "apply"), UdevDb(tmp_path / "apply" / ".udev-data"), modular=sorted(loadable))
    for s in make_plan(found, profile):
        if s.status == Status.CHANGE:
            by_apply.write(f"block/{s.device}/queue/{s.attribute}", str(s.after))
    shown = queue_state(by_rules)
    assert shown == queue_state(by_apply)
    expected = {"sda": "kyber", "sdb": "bfq"} if file_present else {"sda": "mq-deadline", "sdb": "mq-deadline"}
    assert {n: re.search(r"\[(.+?)\]", d["queue/scheduler"]).group(1) for n, d in shown.items()} == expected
    if file_present:
        assert shown["sdb"]["queue/iosched/low_latency"] == "0"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _cli(argv: list[str], env: dict) -> tuple[int, str, str]:
    r = run_cli(*argv, env=env)
    return r.code, r.out, r.err


def test_udev_render_and_check_read_the_running_kernels_modules(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_SYSFS_ROOT": "/sys",
           "TUNECTL_MODULES_ROOT": str(MODULES), "TUNECTL_KERNEL_RELEASE": DEBIAN}
    code, out, err = _cli(["udev", "render", "-p", "desktop", "--as-installed"], env)  # what install writes
    assert code == 0, err
    assert f'TEST=="{MODULES}/{DEBIAN}/kernel/block/bfq.ko"' in out
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    (rules_dir / "65-tunectl.rules").write_text(out)
    assert _cli(["udev", "check", "-p", "desktop", "--rules-dir", str(rules_dir)], env)[0] == 0
    # Booted into another kernel: the rules name the old release's module files, so they are stale.
    code, out, err = _cli(["udev", "check", "-p", "desktop", "--rules-dir", str(rules_dir)],
                          dict(env, TUNECTL_KERNEL_RELEASE=UBUNTU))
    assert code == 1, out + err
