"""Who set each value: status -v / verify name tunectl, a foreign udev rule, sysfs.conf, tmpfiles, tuned or the
kernel default, on a fake tree with a fake configuration root (TUNECTL_CONFIG_ROOT)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness import run_cli
from tests.tuning_helpers import loop_machine
from tunectl.owners import sources
from tunectl.owners.model import KernelDefault, TunectlMark
from tunectl.owners.sources import Assignment, Target
from tunectl.owners.writers import Writer, conflicts, owner_of

PROFILE = """\
name: loops
classes:
  loop: {read_ahead_kb: 1024}
"""


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def machine(empty_fake_tree, tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    return loop_machine(empty_fake_tree, tmp_path, {"loops": PROFILE}, env={"TUNECTL_CONFIG_ROOT": str(config)}), config


def _owners(doc: dict, device: str) -> dict:
    return next(d["owners"] for d in doc["devices"] if d["name"] == device)


def test_status_names_tunectl_a_udev_rule_sysfs_conf_and_the_kernel_default(machine) -> None:
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    # loop1: a foreign rule; loop2: sysfs.conf; loop3: untouched
    _write(config, "/run/udev/rules.d/99-foreign.rules",
           '# pins read-ahead\nACTION=="add|change", KERNEL=="loop1", ATTR{queue/read_ahead_kb}="512"\n')
    t.tree.sysfs.write("block/loop1/queue/read_ahead_kb", "512")
    _write(config, "/etc/sysfs.conf", "mode block/loop2/queue/scheduler = 0644\nblock/loop2/queue/read_ahead_kb = 256\n")
    t.tree.sysfs.write("block/loop2/queue/read_ahead_kb", "256")

    doc = t("status", "--all", "--json").doc
    assert doc["version"] == 3
    ra = {dev: _owners(doc, dev)["read_ahead_kb"] for dev in ("loop0", "loop1", "loop2", "loop3")}
    assert ra["loop0"]["kind"] == "tunectl" and ra["loop0"]["profile"] == "loops" and ra["loop0"]["at"]
    assert ra["loop1"]["kind"] == "udev-rule" and ra["loop1"]["where"] == "/run/udev/rules.d/99-foreign.rules:2"
    assert ra["loop2"]["kind"] == "sysfs.conf" and ra["loop2"]["where"] == "/etc/sysfs.conf:2"
    assert ra["loop3"]["kind"] == "kernel-default" and "2 x max_sectors_kb" in ra["loop3"]["detail"]

    text = t("status", "--all", "-v").out
    assert "/run/udev/rules.d/99-foreign.rules:2 writes 512" in text
    assert "tunectl apply -p loops at" in text


def test_verify_names_the_writer_that_undid_tunectl(machine) -> None:
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    _write(config, "/etc/tmpfiles.d/ra.conf", "w /sys/block/loop0/queue/read_ahead_kb - - - - 4096\n")
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "4096")
    v = t("verify", "--json")
    assert v.code == 1 and v.doc["version"] == 3
    (setting,) = [s for s in v.doc["settings"] if s["attribute"] == "read_ahead_kb"]
    assert setting["owner"]["kind"] == "tmpfiles" and setting["owner"]["where"] == "/etc/tmpfiles.d/ra.conf:1"
    human = t("verify", "-v")
    assert "systemd-tmpfiles /etc/tmpfiles.d/ra.conf:1 writes 4096" in human.out


def test_plain_text_finds_no_owner_but_every_output_that_shows_one_does(machine) -> None:
    """status and verify show owners in --json, with -v, and in verify's OWNER column when -o names it; their
    plain text shows none and finds none (#33), yet reads the journal as finding them does: a journal that
    cannot be read fails plain status as it fails status --json."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    _write(config, "/etc/tmpfiles.d/ra.conf", "w /sys/block/loop0/queue/read_ahead_kb - - - - 4096\n")
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "4096")
    tmpfiles = "systemd-tmpfiles /etc/tmpfiles.d/ra.conf:1 writes 4096"
    picked = t("verify", "-o", "device,attribute,owner")
    assert picked.code == 1 and tmpfiles in picked.out
    plain = t("verify")
    assert plain.code == 1 and "loop0" in plain.out and "tmpfiles" not in plain.out  # OWNER is hidden
    assert tmpfiles in t("status", "-v").out and "tmpfiles" not in t("status").out

    state = t.ctx.state.dir
    for path in state.glob("journal.json*"):
        path.write_text("{")
    damaged = [t(*argv) for argv in (("status",), ("status", "--json"), ("verify",))]
    assert [r.code for r in damaged] == [5, 5, 5], [r.err for r in damaged]
    assert "journal.json" in damaged[0].err


def test_a_same_named_file_in_etc_hides_the_vendor_rule_and_dev_null_masks_it(machine) -> None:
    t, config = machine
    rule = 'KERNEL=="loop3", ATTR{queue/read_ahead_kb}="256"\n'
    _write(config, "/usr/lib/udev/rules.d/60-vendor.rules", rule)
    t.tree.sysfs.write("block/loop3/queue/read_ahead_kb", "256")
    owner = _owners(t("status", "--all", "--json").doc, "loop3")["read_ahead_kb"]
    assert owner["where"] == "/usr/lib/udev/rules.d/60-vendor.rules:1"
    (config / "etc/udev/rules.d").mkdir(parents=True)
    (config / "etc/udev/rules.d/60-vendor.rules").symlink_to("/dev/null")
    owner = _owners(t("status", "--all", "--json").doc, "loop3")["read_ahead_kb"]
    assert owner["kind"] == "unknown"


def test_udev_order_is_by_name_across_directories_with_etc_winning() -> None:
    order = sources.udev_order({"/usr/lib/udev/rules.d": ["60-a.rules", "99-z.rules", "README"],
                                "/etc/udev/rules.d": ["99-z.rules", "10-first.rules"],
                                "/run/udev/rules.d": ["65-tunectl.rules"]})
    assert [f.path for f in order] == ["/etc/udev/rules.d/10-first.rules", "/usr/lib/udev/rules.d/60-a.rules",
                                       "/run/udev/rules.d/65-tunectl.rules", "/etc/udev/rules.d/99-z.rules"]
    assert order[-1].hidden == ("/usr/lib/udev/rules.d/99-z.rules",)


def test_udev_rule_parsing_keeps_conditions_and_finds_run_echo() -> None:
    text = ('SUBSYSTEM=="block", ACTION=="add|change", KERNEL=="sd[a-z]|nvme*", \\\n'
            '  ATTR{queue/rotational}=="1", ATTR{queue/scheduler}="bfq"\n'
            'ACTION=="remove", KERNEL=="sda", ATTR{queue/scheduler}="none"\n'
            'ENV{DEVTYPE}=="partition", ATTR{queue/scheduler}="none"\n'
            'KERNEL=="sdb", RUN+="/bin/sh -c \'echo 4096 > /sys/block/%k/queue/read_ahead_kb\'"\n'
            'KERNEL=="sdc", ENV{ID_BUS}=="usb", ATTR{bdi/read_ahead_kb}="64"\n')
    found = sources.parse_udev_rules("/etc/udev/rules.d/x.rules", text)
    assert [(a.attribute, a.value, a.line) for a in found] == [
        ("scheduler", "bfq", 1), ("read_ahead_kb", "4096", 5), ("read_ahead_kb", "64", 6)]
    first, _, usb = found
    assert first.target.holds({"KERNEL": "sdb", "ATTR{queue/rotational}": "1"}) is True
    assert first.target.holds({"KERNEL": "sdb", "ATTR{queue/rotational}": "0"}) is False
    assert first.target.holds({"KERNEL": "vda", "ATTR{queue/rotational}": "1"}) is False
    assert usb.target.holds({"KERNEL": "sdc"}) is None  # ID_BUS unknown: it may match


def test_lines_that_name_no_queue_attribute_are_skipped_but_one_spelled_in_pieces_is_still_found() -> None:
    """The parsers skip lines that cannot write a queue attribute before splitting them: a name that udev joins
    across a line end, or that shlex puts together from quotes or a backslash, must still be seen."""
    rules = ('KERNEL=="sd*", ATTR{que\\\nue/scheduler}="bfq"\n'
             'KERNEL=="sd*", ATTR{power/control}="auto"\n'
             'KERNEL=="sd*", ATTR{bdi/read_ahead_kb}="64"\n')
    found = sources.parse_udev_rules("/etc/udev/rules.d/x.rules", rules)
    assert [(a.attribute, a.value, a.line) for a in found] == [("scheduler", "bfq", 1), ("read_ahead_kb", "64", 4)]
    tmpfiles = ('w /sys/block/sda/qu\\eue/scheduler - - - - bfq\n'
                'w "/sys/block/sdb/que""ue/read_ahead_kb" - - - - 512\n'
                'w /sys/devices/system/cpu/smt/control - - - - off\n')
    found = sources.parse_tmpfiles("/etc/tmpfiles.d/a.conf", tmpfiles)
    assert [(a.attribute, a.value, a.line, a.target.kernels) for a in found] == [
        ("scheduler", "bfq", 1, ("sda",)), ("read_ahead_kb", "512", 2, ("sdb",))]
    # A whole file is passed over when it names no queue attribute: one named only across a line end, or only
    # through quotes or a backslash, is still found.
    assert [a.attribute for a in sources.parse_udev_rules("/x.rules", 'ATTR{que\\\nue/scheduler}="bfq"\n')] == ["scheduler"]
    assert [a.attribute for a in sources.parse_tmpfiles("/a.conf", "w /sys/block/sda/qu\\eue/nr_requests - - - - 64\n")] \
        == ["nr_requests"]
    assert sources.parse_udev_rules("/x.rules", 'KERNEL=="sd*", ATTR{power/control}="auto"\n') == []
    # The type is the first field: a line whose first letter cannot make it w or w+ is not split; a quoted one is.
    assert [a.attribute for a in sources.parse_tmpfiles("/a.conf", '"w" /sys/block/sda/queue/nr_requests - - - - 64\n'
                                                        'f+! /run/nologin 0644 - - - "System is booting up."\n')] \
        == ["nr_requests"]


def test_tmpfiles_sysfs_conf_and_cmdline_parsers() -> None:
    (w,) = sources.parse_tmpfiles("/etc/tmpfiles.d/a.conf", "# c\nw /sys/block/sda/queue/scheduler - - - - bfq\n"
                                                             "d /run/x 0755 root root -\n")
    assert (w.attribute, w.value, w.line, w.target.kernels) == ("scheduler", "bfq", 2, ("sda",))
    (s,) = sources.parse_sysfs_conf("/etc/sysfs.conf", "block/sdb/queue/iosched/read_expire = 100 # fast\n")
    assert (s.attribute, s.value) == ("iosched/read_expire", "100")
    (c,) = sources.parse_cmdline("/proc/cmdline", "ro quiet elevator=deadline")
    assert c.value == "deadline" and "ignored" in c.note


def _writer(kind: str, value: str, order: int = 0, runs: str = sources.BOTH, name: str = "x") -> Writer:
    return Writer("sda", Assignment(kind, "read_ahead_kb", value, f"/etc/{name}", 1, Target(), runs), order)


def test_owner_prefers_the_journal_then_the_last_writer_then_the_default() -> None:
    mark = TunectlMark("hdd", "2026-11-26T12:00:00Z")
    default = KernelDefault(2560, "2 x max_sectors_kb")
    early, late = _writer("udev-rule", "512", 1, name="a"), _writer("sysfs.conf", "512", 0, sources.BOOT, "b")
    assert owner_of("read_ahead_kb", 512, [early, late], mark, True).kind == "tunectl"
    assert owner_of("read_ahead_kb", 512, [early, late], mark, False).kind == "sysfs.conf"
    assert owner_of("read_ahead_kb", 512, [early]).where == "/etc/a:1"
    assert owner_of("read_ahead_kb", 2560, [early], default=default).kind == "kernel-default"
    assert owner_of("read_ahead_kb", 4096, [early], mark, False).kind == "unknown"
    # the kernel stores read-ahead in pages: 4097 reads back as 4096
    assert owner_of("read_ahead_kb", 4096, [_writer("tuned", "4097")]).kind == "tuned"


def test_conflicts_a_rule_after_tunectls_undoes_it_at_hotplug_one_before_does_not() -> None:
    before = _writer("udev-rule", "128", order=1, name="60-early.rules")
    after = _writer("udev-rule", "128", order=5, name="99-late.rules")
    boot_only = _writer("tmpfiles", "128", order=0, runs=sources.BOOT, name="tmp.conf")
    same = _writer("udev-rule", "4096", order=6, name="same.rules")
    found = {c.writer.assignment.path: c for c in conflicts({("sda", "read_ahead_kb"): 4096},
                                                           [before, after, boot_only, same], "/etc/65-tunectl.rules", 3)}
    assert found["/etc/60-early.rules"].undoes_at == ()
    assert found["/etc/99-late.rules"].undoes_at == ("boot", "hotplug")
    assert found["/etc/tmp.conf"].undoes_at == ("boot",)
    assert found["/etc/same.rules"].agrees and not found["/etc/same.rules"].undoes
    without_rules = conflicts({("sda", "read_ahead_kb"): 4096}, [before], None)
    assert without_rules[0].undoes_at == ("boot", "hotplug")


def test_doctor_reports_a_rule_after_tunectls_that_undoes_it_and_exits_1(machine) -> None:
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "loop1", "--json").code == 0
    clean = t("doctor", "--json")
    assert clean.code == 0 and clean.doc["writers"] == [] and clean.doc["undone"] is False
    _write(config, "/etc/udev/rules.d/99-late.rules", 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n')
    _write(config, "/etc/udev/rules.d/10-early.rules", 'KERNEL=="loop*", ATTR{queue/read_ahead_kb}="1024"\n')
    _write(config, "/etc/sysfs.conf", "block/loop1/queue/read_ahead_kb = 64\n")
    r = t("doctor", "--json")
    assert r.code == 1 and r.doc["undone"] is True
    got = {(w["device"], w["writer"]["file"]): (w["agrees"], w["undoes_at"]) for w in r.doc["writers"]}
    assert got == {("loop0", "/etc/udev/rules.d/99-late.rules"): (False, ["boot", "hotplug"]),
                   ("loop0", "/etc/udev/rules.d/10-early.rules"): (True, []),
                   ("loop1", "/etc/udev/rules.d/10-early.rules"): (True, []),
                   ("loop1", "/etc/sysfs.conf"): (False, ["boot"])}
    text = t("doctor")
    assert text.code == 1
    assert "resolve: delete or edit line 1 of /etc/udev/rules.d/99-late.rules" in text.out
    assert "2 writer(s) would undo tunectl" in text.out


def test_doctor_with_tunectls_rules_installed_a_rule_before_them_loses_at_hotplug(machine) -> None:
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    rules = _write(config, "/etc/udev/rules.d/65-tunectl.rules", "# generated by tunectl\n")
    from tunectl.record import replace
    from tunectl.tuning import intent

    record = intent.load(t.ctx.state)
    intent.save(t.ctx.state, replace(record, rules=intent.Rules("/etc/udev/rules.d/65-tunectl.rules", "loops", None,
                                                                None, None)))
    assert rules.exists()
    _write(config, "/etc/udev/rules.d/60-early.rules", 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n')
    _write(config, "/etc/udev/rules.d/70-late.rules", 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="256"\n')
    r = t("doctor", "--json")
    assert r.code == 1 and r.doc["rules"] == "/etc/udev/rules.d/65-tunectl.rules"
    got = {w["writer"]["file"]: w["undoes_at"] for w in r.doc["writers"]}
    assert got == {"/etc/udev/rules.d/60-early.rules": [], "/etc/udev/rules.d/70-late.rules": ["boot", "hotplug"]}


def test_udev_install_warns_about_a_rule_that_undoes_its_rules(machine, monkeypatch) -> None:
    t, config = machine
    _as_root(t, monkeypatch)
    rules_dir = config / "etc" / "udev" / "rules.d"
    rules_dir.mkdir(parents=True)
    r = t("udev", "install", "-p", "loops", "--rules-dir", str(rules_dir))
    assert r.code == 0 and "undoes" not in r.err, r.err
    _write(config, "/etc/udev/rules.d/90-pin.rules", 'KERNEL=="loop2", ATTR{queue/read_ahead_kb}="128"\n')
    r = t("udev", "install", "-p", "loops", "--rules-dir", str(rules_dir))
    assert r.code == 0
    assert ("loop2 read_ahead_kb: udev rule /etc/udev/rules.d/90-pin.rules:1 writes 128, which undoes tunectl's "
            "rules at boot and hotplug") in r.err


SWITCH = """\
name: switch
classes:
  loop: {scheduler: bfq, read_ahead_kb: {min: 512, max: 4096}, iosched: {slice_idle: 0}}
"""


def _as_root(t, monkeypatch: pytest.MonkeyPatch, trigger=None) -> None:  # noqa: ANN001
    """`udev install` as root, udevadm answering as 252 does; udevd not running, or with `trigger` running, and
    `trigger()` then run at the change events (what the rules would write)."""
    from tunectl.system.runner import Completed
    from tunectl.udev import install as udev_commands

    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)

    def run(argv, timeout=60, check=True, input_text=None):  # noqa: ANN001, ANN202
        if tuple(argv[:2]) == ("udevadm", "trigger") and trigger is not None:
            trigger()
        down = trigger is None and tuple(argv[:3]) == ("udevadm", "control", "--ping")
        return Completed(tuple(argv), 1 if down else 0,
                         "252\n" if tuple(argv) == ("udevadm", "--version") else "", "")

    t.ctx.run = run


def test_udev_install_plans_once_and_warns_as_a_plan_after_its_rules_wrote_would(empty_fake_tree, tmp_path,
                                                                                 monkeypatch) -> None:
    """The other writers an install warns about come from the plan its originals were journalled from, made before
    the rules wrote anything: one plan, not a second after the change events. The same writers and verdicts as the
    doctor's own plan finds once the rules switched the scheduler and moved read-ahead into its range (it reads of
    a plan the devices and what is wanted of them, never the values they hold; the writers it reads itself, after)."""
    from tunectl.owners import doctor
    from tunectl.tuning import operations

    config = tmp_path / "config"
    config.mkdir()
    t = loop_machine(empty_fake_tree, tmp_path, {"switch": SWITCH}, env={"TUNECTL_CONFIG_ROOT": str(config)})
    assert t("apply", "-p", "switch", "loop0", "loop1", "--json").code == 0  # the record's scope: loop0, loop1
    for name in ("loop0", "loop1"):  # back as the kernel had them: the rules change them again at the events
        t.tree.sysfs.write(f"block/{name}/queue/scheduler", "mq-deadline")
        t.tree.sysfs.write(f"block/{name}/queue/read_ahead_kb", "128")
    _write(config, "/etc/udev/rules.d/90-pin.rules",
           'KERNEL=="loop1", ATTR{queue/read_ahead_kb}="128", ATTR{queue/scheduler}="mq-deadline"\n'
           'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="1024"\n'  # inside the range: agrees
           'KERNEL=="loop2", ATTR{queue/read_ahead_kb}="128"\n')  # outside the rules' scope

    def rules_write() -> None:
        for name in ("loop0", "loop1"):
            t.tree.sysfs.write(f"block/{name}/queue/scheduler", "bfq")
            t.tree.sysfs.write(f"block/{name}/queue/read_ahead_kb", "512")

    _as_root(t, monkeypatch, rules_write)
    plans, found = [], []
    real_plan, real_diagnose = operations.plan, doctor.diagnose
    monkeypatch.setattr(operations, "plan", lambda *a, **kw: plans.append(a) or real_plan(*a, **kw))
    monkeypatch.setattr(doctor, "diagnose", lambda *a, **kw: found.append((a, kw, real_diagnose(*a, **kw))) or
                        found[-1][2])
    rules_dir = config / "etc" / "udev" / "rules.d"
    r = t("udev", "install", "-p", "switch", "--rules-dir", str(rules_dir), "--trigger")
    assert r.code == 0, r.err
    assert len(plans) == 1 and len(found) == 1
    assert t.tree.sysfs.read("block/loop1/queue/scheduler").strip().endswith("[bfq]")  # the rules' values, now
    (_, profile), kw, said = found[0]
    after = real_diagnose(t.ctx, profile, scoped=True, rules_path=kw["rules_path"])  # a plan made now, as before
    assert [c.to_json() for c in said.found] == [c.to_json() for c in after.found]
    assert {(c.device, c.attribute) for c in said.undone} == {("loop1", "read_ahead_kb"), ("loop1", "scheduler")}
    assert "loop1 read_ahead_kb: udev rule /etc/udev/rules.d/90-pin.rules:1 writes 128, which undoes" in r.err
    assert "loop2" not in r.err and "loop0" not in r.err


def test_udev_install_all_warns_about_the_writers_on_every_device_its_rules_match(machine, monkeypatch) -> None:
    """--all writes rules for every device, also those outside the last apply's scope: a writer that undoes them
    there is warned about (it was not: the warnings kept to the scope the rules no longer had)."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    _as_root(t, monkeypatch)
    rules_dir = config / "etc" / "udev" / "rules.d"
    _write(config, "/etc/udev/rules.d/90-pin.rules", 'KERNEL=="loop2", ATTR{queue/read_ahead_kb}="128"\n')
    r = t("udev", "install", "-p", "loops", "--rules-dir", str(rules_dir))
    assert r.code == 0 and "undoes" not in r.err, r.err  # scoped to loop0: the pin on loop2 undoes nothing of theirs
    r = t("udev", "install", "-p", "loops", "--rules-dir", str(rules_dir), "--all")
    assert r.code == 0
    assert ("loop2 read_ahead_kb: udev rule /etc/udev/rules.d/90-pin.rules:1 writes 128, which undoes tunectl's "
            "rules at boot and hotplug") in r.err


def test_tuned_active_profile_is_a_writer(machine) -> None:
    t, config = machine
    _write(config, "/etc/tuned/active_profile", "mine\n")
    _write(config, "/etc/tuned/mine/tuned.conf", "[main]\nsummary=mine\n\n[disk]\ndevices=loop1\nreadahead=4096\n")
    t.tree.sysfs.write("block/loop1/queue/read_ahead_kb", "4096")
    owner = _owners(t("status", "--all", "--json").doc, "loop1")["read_ahead_kb"]
    assert owner["kind"] == "tuned" and owner["where"] == "/etc/tuned/mine/tuned.conf", owner
    assert "tuned /etc/tuned/mine/tuned.conf writes 4096" in owner["detail"]
    assert t("apply", "-p", "loops", "loop1", "--json").code == 0
    r = t("doctor", "--json")
    assert r.code == 1 and r.doc["tuned_profile"] == "mine"
    (w,) = r.doc["writers"]
    assert (w["writer"]["kind"], w["undoes_at"]) == ("tuned", ["boot", "hotplug"])
    assert "tuned is not running now" in w["writer"]["note"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from('KERNEL=="sd*",ATTR{queue/scheduler}"bfq\\\n #RUN+echo >/sys/block/%k|!:{}w- '),
               max_size=200))
def test_parsers_take_any_text(text: str) -> None:
    for parse in (sources.parse_udev_rules, sources.parse_sysfs_conf, sources.parse_tmpfiles, sources.parse_cmdline):
        for a in parse("/etc/x", text):
            assert a.attribute and a.line >= 0 and isinstance(a.target.text(), str)
            assert a.target.holds({"KERNEL": "sda"}) in (True, False, None)


def test_garbage_in_sysfs_and_config_files_is_no_crash(machine) -> None:
    t, config = machine
    t.tree.sysfs.path("block/loop0/queue/optimal_io_size").write_text("garbage\n")
    (config / "etc/udev/rules.d").mkdir(parents=True)
    (config / "etc/udev/rules.d/50-dir.rules").mkdir()  # a directory where a file should be
    (config / "etc/udev/rules.d/51-bad.rules").write_bytes(b'\xff\xfeKERNEL=="loop0", ATTR{queue/read_ahead_kb}="9"\n')
    (config / "etc/udev/rules.d/52-dangling.rules").symlink_to("/nonexistent/x.rules")
    _write(config, "/etc/sysfs.conf", "=\n= =\nblock/ = 3\n")
    r = t("status", "--all", "--json")
    assert r.code == 0
    assert "read_ahead_kb" not in [a for a, o in _owners(r.doc, "loop0").items() if o["kind"] == "kernel-default"]
    d = t("doctor", "--all", "--json")
    assert d.code in (0, 1) and any("50-dir.rules" in u for u in d.doc["unread"]), d.doc["unread"]


def test_a_rules_file_past_the_size_cap_is_said_unread_not_read_in_part(machine) -> None:
    """The read stops one byte past MAX_FILE; its first 4 MiB were taken as the whole file, so a rule after them
    that undoes tunectl was never seen: doctor said "no other writer", exit 0."""
    from tunectl.owners.collect import MAX_FILE

    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    rule = 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n'
    _write(config, "/etc/udev/rules.d/99-big.rules", "#" * (MAX_FILE - 1) + "\n" + rule)
    r = t("doctor", "--json")
    assert r.doc["unread"] == [f"/etc/udev/rules.d/99-big.rules: larger than {MAX_FILE} bytes"], r.doc
    assert "not read: /etc/udev/rules.d/99-big.rules: larger than" in t("doctor").err
    _write(config, "/etc/udev/rules.d/99-big.rules", "#" * (MAX_FILE - len(rule) - 1) + "\n" + rule)  # fits
    r = t("doctor", "--json")
    assert r.code == 1 and r.doc["unread"] == [] and len(r.doc["writers"]) == 1, r.doc


@pytest.mark.parametrize("written", ["9" * 5000, "\u00b2", "4096\u0663"])
def test_doctor_on_a_range_takes_a_rule_value_no_kernel_would_parse(machine, written: str) -> None:
    """A 5000-digit value or a Unicode digit in someone's rule: reported as not what the profile wants, no internal
    error (int() raised on both)."""
    t, config = machine
    (config.parent / "profiles" / "ranged.yaml").write_text("name: ranged\nclasses:\n  loop: {read_ahead_kb: {min: 256}}\n")
    _write(config, "/etc/udev/rules.d/99-late.rules", f'KERNEL=="loop0", ATTR{{queue/read_ahead_kb}}="{written}"\n')
    r = t("doctor", "-p", "ranged", "loop0", "--json")
    assert r.code == 1, r.err
    [w] = r.doc["writers"]
    assert w["agrees"] is False and w["wanted"] == {"min": 256}
    text = t("doctor", "-p", "ranged", "loop0")
    row = next(line for line in text.out.splitlines() if line.startswith("loop0"))
    assert " 256.. " in row and "{" not in row, row  # the range as profiles write it, not a Python dict


def test_doctor_on_devices_the_profile_skips_says_why_not_on_no_device(machine) -> None:
    t, _ = machine
    r = t("doctor", "-p", "default", "loop0")
    assert r.code == 0, r.err
    assert "on no device" not in r.out
    assert "skipped loop0: class loop is tuned only by a profile that names it" in r.out, r.out
    assert "default sets nothing on these devices" in r.out
    assert "DEVICE" not in r.out  # no empty table


def test_a_configuration_root_others_can_write_is_refused_before_a_link_in_it_is_read(machine, tmp_path) -> None:
    """TUNECTL_CONFIG_ROOT was the one root check_trusted left out: a link another user put in it made root read
    any file (here a 0600 one) and print its lines as a udev rule's ("writes 777"). (The link is an absolute one,
    resolved in the tree: /secret is the tree's.)"""
    t, config = machine
    secret = config / "secret"
    secret.write_text('KERNEL=="loop1", ATTR{queue/read_ahead_kb}="777"\n')
    secret.chmod(0o600)
    (config / "etc" / "udev" / "rules.d").mkdir(parents=True)
    (config / "etc" / "udev" / "rules.d" / "50-x.rules").symlink_to("/secret")
    t.tree.sysfs.write("block/loop1/queue/read_ahead_kb", "777")
    env = {"TUNECTL_SYSFS_ROOT": str(t.tree.root), "TUNECTL_UDEV_ROOT": str(t.tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_CONFIG_ROOT": str(config)}
    mine = run_cli("status", "--all", "-v", env=env)  # the tree is the caller's own: its links are followed
    assert mine.code == 0 and "/etc/udev/rules.d/50-x.rules:1 writes 777" in mine.out
    config.chmod(0o777)
    theirs = run_cli("status", "--all", "-v", env=env)
    assert theirs.code == 2 and "writes 777" not in theirs.out + theirs.err
    assert f"the root {config} (TUNECTL_CONFIG_ROOT) cannot be trusted" in theirs.err
    assert "writable by others" in theirs.err


def test_an_absolute_link_in_the_configuration_root_is_read_from_the_tree_not_this_machine(machine, tmp_path) -> None:
    """A tree's rules file that is an absolute link (``x.rules -> /usr/lib/udev/rules.d/x.rules``, as a vendor
    package makes it) names the tree's file, as udev running in that tree reads it: it was read from this
    machine's path of that name (realpath), here a host file that says 777 where the tree's says 256. A link to a
    path the tree lacks reads nothing, even where this machine has that file; a directory that is an absolute link
    (``/lib -> /usr/lib``) is listed in the tree too."""
    t, config = machine
    host = tmp_path / "host" / "udev"  # "this machine's" copy, at the path the link names
    host.mkdir(parents=True)
    (host / "70-vendor.rules").write_text('KERNEL=="loop1", ATTR{queue/read_ahead_kb}="777"\n')
    (host / "71-only-here.rules").write_text('KERNEL=="loop2", ATTR{queue/read_ahead_kb}="778"\n')
    _write(config, f"{host}/70-vendor.rules", 'KERNEL=="loop1", ATTR{queue/read_ahead_kb}="256"\n')
    rules = config / "etc" / "udev" / "rules.d"
    rules.mkdir(parents=True)
    (rules / "70-vendor.rules").symlink_to(host / "70-vendor.rules")
    (rules / "71-only-here.rules").symlink_to(host / "71-only-here.rules")
    _write(config, "/usr/lib/udev/rules.d/72-merged.rules", 'KERNEL=="loop3", ATTR{queue/read_ahead_kb}="512"\n')
    (config / "lib").symlink_to("/usr/lib")  # resolved in the tree: this machine's /lib is not listed
    for dev, value in (("loop1", "256"), ("loop2", "778"), ("loop3", "512")):
        t.tree.sysfs.write(f"block/{dev}/queue/read_ahead_kb", value)
    doc = t("status", "--all", "--json").doc
    owners = {dev: _owners(doc, dev)["read_ahead_kb"] for dev in ("loop1", "loop2", "loop3")}
    assert owners["loop1"]["kind"] == "udev-rule", owners
    assert owners["loop1"]["where"] == "/etc/udev/rules.d/70-vendor.rules:1"
    assert owners["loop2"]["kind"] != "udev-rule", owners  # 71-only-here names no file in the tree
    assert owners["loop3"]["kind"] == "udev-rule" and owners["loop3"]["where"].endswith("/72-merged.rules:1")
    text = t("status", "--all", "-v").out
    assert "70-vendor.rules:1 writes 256" in text and "777" not in text and "778" not in text, text


def test_tuned_profiles_are_read_from_the_tree_through_its_absolute_links(machine, tmp_path) -> None:
    """Probe 6, item 2: tuned's directories were found with this machine's isdir and its profile files read through
    this machine's links, so a tree's ``/etc/tuned/mine -> /usr/lib/tuned/mine`` (an absolute link) was read from
    the host's path of that name: here one that sets loop2 where the tree's sets loop1 (through its variables file,
    read beside it). Now tuned's files are the tree's, as tuned running there reads them. A pid file in the tree
    says tuned runs (its O_PATH probe failed with EINVAL on every tree before, so it never did)."""
    t, config = machine
    host = tmp_path / "host" / "tuned"  # "this machine's" copy, at the path the link names
    conf = "[main]\nsummary=s\n\n[variables]\ninclude=${i:PROFILE_DIR}/vars.conf\n\n[disk]\ndevices=${DISKS}\nreadahead=%s\n"
    _write(host, "mine/tuned.conf", conf % 777)
    _write(host, "mine/vars.conf", "DISKS=loop2\n")
    _write(config, f"{host}/mine/tuned.conf", conf % 256)
    _write(config, f"{host}/mine/vars.conf", "DISKS=loop1\n")
    _write(config, "/etc/tuned/active_profile", "mine\n")
    (config / "etc" / "tuned" / "mine").symlink_to(host / "mine")
    _write(config, "/run/tuned/tuned.pid", "1\n")
    t.tree.sysfs.write("block/loop1/queue/read_ahead_kb", "256")
    t.tree.sysfs.write("block/loop2/queue/read_ahead_kb", "777")
    doc = t("status", "--all", "--json").doc
    owner = _owners(doc, "loop1")["read_ahead_kb"]
    assert owner["kind"] == "tuned" and owner["where"] == "/etc/tuned/mine/tuned.conf", owner
    assert "writes 256" in owner["detail"], owner
    assert _owners(doc, "loop2")["read_ahead_kb"]["kind"] != "tuned"
    assert "writes 777" not in t("status", "--all", "-v").out
    assert t("apply", "-p", "loops", "loop1", "--json").code == 0
    (w,) = t("doctor", "--json").doc["writers"]
    assert w["writer"]["kind"] == "tuned" and "not running" not in w["writer"]["note"], w


def test_doctor_without_proc_reads_the_rules_files_still(machine, no_proc: list[str]) -> None:
    """In a bare chroot (no /proc) every rules file's read failed at its reopen through /proc/self/fd: doctor saw
    no rule and said "no other writer". The file looked at is found in the tree again and compared with the look."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    _write(config, "/etc/udev/rules.d/99-foreign.rules", 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n')
    r = t("doctor", "--json")
    assert no_proc, "the reopen was not tried"
    assert r.code == 1 and r.doc["unread"] == [], r.doc
    (w,) = r.doc["writers"]
    assert (w["writer"]["file"], w["writer"]["value"]) == ("/etc/udev/rules.d/99-foreign.rules", "128"), w


def test_a_named_pipe_in_a_rules_directory_is_said_unread_not_taken_as_a_mask(machine) -> None:
    """A drop-in of size 0 was a mask, a named pipe too: doctor passed over it in silence and let it hide the vendor
    rule of its name. udev masks only an empty file or a character device (`_masks`); a pipe is that name's file,
    which udev opens and doctor does not: it says so, and the vendor rule stays hidden behind it, as in udev."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    _write(config, "/usr/lib/udev/rules.d/60-vendor.rules", 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n')
    (config / "etc/udev/rules.d").mkdir(parents=True)
    os.mkfifo(config / "etc/udev/rules.d/60-vendor.rules")
    r = t("doctor", "--json")
    assert r.doc["unread"] == ["/etc/udev/rules.d/60-vendor.rules: a named pipe, not a regular file"], r.doc
    assert r.code == 0 and r.doc["writers"] == [], r.doc


def test_what_masks_a_drop_in_is_systemds_null_or_empty() -> None:
    """systemd's null_or_empty: an empty regular file or any character device (no device numbers compared); a named
    pipe or a block device (size 0 as well) is none."""
    from tunectl.owners.collect import _masks

    def looked(mode: int, size: int = 0) -> os.stat_result:
        return os.stat_result((mode | 0o644, 1, 1, 1, 0, 0, size, 0, 0, 0))

    assert _masks(looked(stat.S_IFREG)) and _masks(looked(stat.S_IFCHR))
    assert not _masks(looked(stat.S_IFREG, 1)) and not _masks(looked(stat.S_IFIFO))
    assert not _masks(looked(stat.S_IFBLK)) and not _masks(looked(stat.S_IFDIR))


@pytest.mark.skipif(os.geteuid() != 0, reason="a device node is made with mknod (root)")
def test_a_device_node_in_a_rules_directory_is_never_opened(machine) -> None:
    """A character device masks (udev's rule: /dev/null's bind mounts and systemd's inaccessible nodes are such);
    a block device is no mask: said unread from a look at it, never opened (an open of a device acts on it: this
    one's numbers name no device, so an open would have said "No such device or address")."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop0", "--json").code == 0
    rule = 'KERNEL=="loop0", ATTR{queue/read_ahead_kb}="128"\n'
    _write(config, "/usr/lib/udev/rules.d/60-char.rules", rule)
    _write(config, "/usr/lib/udev/rules.d/61-block.rules", rule)
    (config / "etc/udev/rules.d").mkdir(parents=True)
    os.mknod(config / "etc/udev/rules.d/60-char.rules", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod(config / "etc/udev/rules.d/61-block.rules", stat.S_IFBLK | 0o600, os.makedev(240, 77))
    r = t("doctor", "--json")
    assert r.doc["unread"] == ["/etc/udev/rules.d/61-block.rules: a block device, not a regular file"], r.doc
    assert r.code == 0 and r.doc["writers"] == [], r.doc


def test_a_tuned_file_doctor_cannot_read_is_said_unread(machine) -> None:
    """A [variables] include that cannot be read was only a note of the import, which doctor never shows: its
    variables stayed undefined, the unit that used them wrote nothing, and doctor said nothing. A tuned.conf that
    is no regular file in the tree was "not found" with the search list, never what stands there."""
    t, config = machine
    assert t("apply", "-p", "loops", "loop1", "--json").code == 0
    _write(config, "/etc/tuned/active_profile", "mine\n")
    _write(config, "/etc/tuned/mine/tuned.conf",
           "[variables]\ninclude=/etc/tuned/vars.conf\n\n[disk]\ndevices=loop1\nreadahead=${R}\n")
    os.mkfifo(config / "etc/tuned/vars.conf")
    r = t("doctor", "--json")
    assert r.doc["unread"] == ["/etc/tuned/vars.conf: a named pipe, not a regular file (a [variables] include of "
                               "tuned profile mine: its variables stay undefined)"], r.doc
    (config / "etc/tuned/mine/tuned.conf").unlink()
    (config / "etc/tuned/mine/tuned.conf").mkdir()
    r = t("doctor", "--json")
    assert r.doc["unread"] == ["tuned profile mine: tuned profile 'mine' not found (/etc/tuned/mine/tuned.conf: a "
                               "directory, not a regular file: tuned takes only a regular tuned.conf)"], r.doc
    assert "\nhint:" not in t("doctor").err  # one line each: the hint of the import is not doctor's
