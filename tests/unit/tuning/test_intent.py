"""One record of intent (#21): every command without -p or DEV acts on what was applied, and no original is lost.

Fake kernel (tests/fakesys.py); the CLI runs in-process. The live counterpart
with real loop devices and a real udevd is tests/test_intent_live.py.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.fakesys import bump_block_stat
from tests.tuning_helpers import Tunectl, loop_machine, snapshot, snapshot_all
from tunectl.udev import install as udev_commands
from tunectl.udev.render import RULES_FILE

MYDB = """\
name: mydb
classes:
  loop:
    scheduler: mq-deadline
    iosched: {read_expire: 100}
    read_ahead_kb: 1024
"""
BFQ = """\
name: bfq-zero
classes:
  loop:
    scheduler: bfq
    iosched: {slice_idle: 0}
"""
DEADLINE = """\
name: deadline
classes:
  loop: {scheduler: mq-deadline}
"""


@pytest.fixture
def t(empty_fake_tree, tmp_path) -> Tunectl:
    return loop_machine(empty_fake_tree, tmp_path, {"mydb": MYDB, "bfq-zero": BFQ, "deadline": DEADLINE})


def _record(t: Tunectl) -> dict:
    return json.loads((t.ctx.state.dir / "active.json").read_text())


def _journal(t: Tunectl) -> dict:
    return json.loads((t.ctx.state.dir / "journal.json").read_text())


def test_bare_plan_and_apply_act_on_the_scope_of_the_last_apply(t: Tunectl) -> None:
    before = snapshot_all(t.tree)
    assert t("apply", "-p", "mydb", "loop0", "loop1").code == 0
    untouched = {n: before[n] for n in ("loop2", "loop3")}
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "128")  # drift inside the scope
    plan = t("plan")
    assert plan.code == 0 and plan.out.splitlines()[0] == "profile: mydb"
    assert "scope: loop0, loop1" in plan.out and "loop2" not in plan.out
    applied = t("apply", "--json")
    assert applied.code == 0 and {s["device"] for s in applied.doc["settings"]} == {"loop0", "loop1"}
    assert [s["device"] for s in applied.doc["settings"] if s["status"] == "changed"] == ["loop0"]
    assert {n: snapshot(t.tree, n) for n in ("loop2", "loop3")} == untouched
    assert _record(t)["scope"] == ["loop:/srv/images/d0.img", "loop:/srv/images/d1.img"]
    # --all: every device, and the record says so.
    assert t("apply", "--all").code == 0 and "scope" not in _record(t)


def test_the_record_names_a_file_by_absolute_path_with_its_hash(t: Tunectl, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path / "profiles")
    assert t("apply", "-p", "./mydb.yaml", "loop0").code == 0
    record = _record(t)
    assert record["ref"] == str((tmp_path / "profiles" / "mydb.yaml").resolve())
    assert len(record["profile_sha256"]) == 64
    monkeypatch.chdir(tmp_path)  # another directory: the record still finds the file
    assert t("verify").code == 0
    (tmp_path / "profiles" / "mydb.yaml").write_text(MYDB.replace("1024", "2048"))
    r = t("verify")
    assert r.code == 2 and "changed since it was applied" in r.err and "pass -p PROFILE" in r.err
    assert t("apply").code == 2 and t.tree.sysfs.read("block/loop0/queue/read_ahead_kb") == "1024"
    assert t("verify", "-p", str(tmp_path / "profiles" / "mydb.yaml")).code == 1  # -p: the new text


def test_nothing_applied_is_said_first_and_verify_exits_0(t: Tunectl) -> None:
    plan = t("plan")
    assert plan.err.splitlines()[0].startswith("tunectl: note: no profile applied yet")
    assert "'default'" in plan.err.splitlines()[0] and plan.out.startswith("profile: default")
    apply = t("apply", "--check")
    assert apply.err.splitlines()[0].startswith("tunectl: note: no profile applied yet")
    v = t("verify")
    assert v.code == 0 and v.out.startswith("nothing applied")
    assert t("verify", "--json").doc["applied"] is False


def test_a_state_dir_holding_a_newline_stays_on_the_note_line(empty_fake_tree, tmp_path: Path) -> None:
    # the note names the state dir a user chose: a newline in it is shown as \n, an escape as \x1b, never raw
    odd = tmp_path / "state\nhint: run as root\x1b[2J"
    odd.mkdir()
    t = loop_machine(empty_fake_tree, odd, {"mydb": MYDB})
    plan = t("plan")
    lines = plan.err.splitlines()
    assert lines[0].startswith("tunectl: note: no profile applied yet") and "state\\nhint: run as root\\x1b[2J" in lines[0]
    assert not any(line.startswith("hint:") for line in lines) and "\x1b" not in plan.err, plan.err


def test_a_full_rollback_clears_the_record(t: Tunectl) -> None:
    before = snapshot_all(t.tree)
    assert t("apply", "-p", "mydb", "loop0", "loop1").code == 0
    assert t("verify").code == 0
    assert t("rollback").code == 0
    assert snapshot_all(t.tree) == before
    v = t("verify")
    assert v.code == 0 and v.out.startswith("nothing applied"), v.out
    assert t("status", "--json").doc["applied"] is False


def test_a_partial_rollback_narrows_the_scope(t: Tunectl) -> None:
    assert t("apply", "-p", "mydb", "loop0", "loop1").code == 0
    assert t("rollback", "loop0").code == 0
    assert _record(t)["scope"] == ["loop:/srv/images/d1.img"]
    assert t("verify").code == 0  # loop0 is no longer expected to be tuned
    assert t("rollback", "loop1").code == 0
    assert t("verify").out.startswith("nothing applied")


def test_refused_writes_exit_4_and_record_nothing(t: Tunectl) -> None:
    t.tree.sysfs.write("block/loop0/queue/scheduler", "bfq")  # so the scheduler write is needed
    for i in range(4):
        for attr in ("queue/scheduler", "queue/read_ahead_kb", "queue/iosched/read_expire"):
            t.tree.sysfs.refuse(f"loop{i}", attr, errno.EPERM)
    r = t("apply", "-p", "mydb", "loop0")
    assert r.code == 4, (r.out, r.err)
    assert "nothing was changed or recorded" in r.err
    assert not (t.ctx.state.dir / "active.json").exists()
    assert _journal(t)["devices"] == {}


def test_applied_but_unrecorded_is_not_exit_5(t: Tunectl, monkeypatch) -> None:
    from tunectl.errors import StateError
    from tunectl.tuning import intent

    def fail(state, record):
        raise StateError("cannot write active.json: No space left on device")

    monkeypatch.setattr(intent, "save", fail)
    r = t("apply", "-p", "mydb", "loop0")
    assert r.code == 3 and "the settings were applied" in r.err and "could not be saved" in r.err
    assert t.tree.sysfs.read("block/loop0/queue/read_ahead_kb") == "1024"


def test_bfq_knobs_survive_bfq_deadline_bfq(t: Tunectl) -> None:
    """The kernel resets knobs on every switch: the first bfq values are bfq's originals."""
    t.tree.sysfs.write("block/loop0/queue/scheduler", "bfq")
    t.tree.sysfs.write("block/loop0/queue/iosched/slice_idle", "3")
    before = snapshot(t.tree, "loop0")
    assert t("apply", "-p", "deadline", "loop0").code == 0
    assert t("apply", "-p", "bfq-zero", "loop0").code == 0
    assert t.tree.sysfs.read("block/loop0/queue/iosched/slice_idle") == "0"
    assert t("rollback").code == 0
    assert snapshot(t.tree, "loop0") == before
    assert t.tree.sysfs.read("block/loop0/queue/iosched/slice_idle") == "3"


def test_two_loops_on_one_backing_file_are_told_apart(t: Tunectl) -> None:
    t.tree.add_loop("loop4", "/srv/images/d0.img")  # a second device on loop0's file
    before = snapshot_all(t.tree)
    r = t("apply", "-p", "mydb", "loop4", "--json")
    assert r.code == 0
    assert "loop4 shares its backing file" in r.err
    ids = {s["identity"] for s in r.doc["settings"]}
    assert ids == {"loop:/srv/images/d0.img#loop4"}
    assert snapshot(t.tree, "loop0") == before["loop0"]
    assert t("rollback").code == 0
    assert snapshot_all(t.tree) == before


def test_loops_on_one_file_at_other_offsets_are_told_apart_by_the_offset(t: Tunectl) -> None:
    from tunectl.udev.scope import identity_matches

    t.tree.add_loop("loop5", "/srv/images/d0.img")  # a partition of loop0's image: losetup -o 1048576
    (t.tree.root / "block" / "loop5" / "loop" / "offset").write_text("1048576\n")
    before = snapshot_all(t.tree)
    r = t("apply", "-p", "mydb", "loop5", "--json")
    assert r.code == 0 and "shares its backing file" not in r.err
    assert {s["identity"] for s in r.doc["settings"]} == {"loop:/srv/images/d0.img@offset=1048576"}
    assert snapshot(t.tree, "loop0") == before["loop0"]
    assert t("status", "loop0", "--json").doc["devices"][0]["identity"] == "loop:/srv/images/d0.img"
    keys = identity_matches("loop:/srv/images/d0.img@offset=1048576", [])
    assert keys == [['KERNEL=="loop*"', 'TEST=="loop/backing_file"', 'ATTR{loop/backing_file}=="/srv/images/d0.img"',
                     'ATTR{loop/offset}=="1048576"']]
    assert t("rollback").code == 0
    assert snapshot_all(t.tree) == before


class _Udevadm:
    """udevadm as a recorder: udevd 'running', every call succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv, timeout=None, check=True, **kwargs):
        from tunectl.system.runner import Completed

        self.calls.append(tuple(argv))
        return Completed(tuple(argv), 0, "252\n" if tuple(argv) == ("udevadm", "--version") else "", "")


@pytest.fixture
def udevadm(t: Tunectl, monkeypatch) -> _Udevadm:
    rec = _Udevadm()
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    t.ctx.run = rec
    return rec


def test_rules_installed_where_udev_never_reads_them_are_said_so_by_status_and_doctor(
        t: Tunectl, tmp_path: Path, udevadm: _Udevadm) -> None:
    # --rules-dir outside udev(7)'s directories: the file is there, but nothing loads it at boot or hot-plug;
    # status must not call it installed where doctor says not installed (both say where it is and why unread)
    assert t("apply", "-p", "mydb", "loop0").code == 0
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    assert t("udev", "install", "--rules-dir", str(rules_dir)).code == 0
    path = str(rules_dir / RULES_FILE)
    why = f"not read: udev does not read {rules_dir} (only /etc/udev/rules.d, /run/udev/rules.d and"
    status = t("status")
    assert f"udev rules: {path} (profile" in status.out and why in status.out, status.out
    doctor = t("doctor")
    assert f"tunectl's udev rules: {path}, {why}" in doctor.out, doctor.out
    assert "not installed" not in doctor.out


def test_rules_carry_the_scope_and_journal_first(t: Tunectl, tmp_path: Path, udevadm: _Udevadm) -> None:
    before = snapshot_all(t.tree)
    assert t("apply", "-p", "mydb", "loop0").code == 0
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    r = t("udev", "install", "--rules-dir", str(rules_dir), "--json")
    assert r.code == 0, r.err
    assert r.doc["scope"] == ["loop:/srv/images/d0.img"]
    text = (rules_dir / RULES_FILE).read_text()
    assert 'ATTR{loop/backing_file}=="/srv/images/d0.img", ENV{TUNECTL_IN_SCOPE}="1"' in text
    assert 'ENV{TUNECTL_IN_SCOPE}!="1", GOTO="tunectl_end"' in text
    assert _record(t)["rules"]["scope"] == ["loop:/srv/images/d0.img"]
    assert t("udev", "check", "--rules-dir", str(rules_dir)).code == 0
    # --all: every device; its originals are journalled before the file exists.
    r = t("udev", "install", "--all", "--rules-dir", str(rules_dir), "--json")
    assert r.code == 0 and r.doc["scope"] is None and r.doc["journalled"] > 0
    assert "TUNECTL_IN_SCOPE" not in (rules_dir / RULES_FILE).read_text()
    assert set(_journal(t)["devices"]) == {f"loop:/srv/images/d{i}.img" for i in range(4)}
    # The render of a named profile stays a pure function of it.
    assert "TUNECTL_IN_SCOPE" not in t("udev", "render", "-p", "mydb").out
    # A rollback the rules would undo is refused; --remove-rules removes them first.
    refused = t("rollback")
    assert refused.code == 2 and "--remove-rules" in refused.err and (rules_dir / RULES_FILE).exists()
    r = t("rollback", "--remove-rules", "--check", "--json")
    assert r.code == 0 and [n for n in r.doc["notes"] if n.startswith("would remove udev rules")], r.doc["notes"]
    r = t("rollback", "--remove-rules")
    assert r.code == 0 and f"tunectl: note: removed udev rules {rules_dir / RULES_FILE} (profile mydb)" in r.err, r.err
    assert not (rules_dir / RULES_FILE).exists() and ("udevadm", "control", "--reload") in udevadm.calls
    assert t("verify").out.startswith("nothing applied")
    # The rules (were they ever triggered) wrote nothing here; the journal still held every original.
    assert snapshot_all(t.tree) == before


def test_udev_install_keeps_the_originals_of_a_tuned_loop_whose_backing_file_was_renamed(
        t: Tunectl, tmp_path: Path, udevadm: _Udevadm, monkeypatch) -> None:
    """udev install takes the one originals-first step apply takes: a tuned loop device whose identity changed
    keeps its entry under the identity it has now, instead of journalling its tuned values as originals."""
    from tunectl.devices import discover

    image = tmp_path / "d40.img"
    image.write_bytes(b"")
    t.tree.add_loop("loop40", str(image))
    # The loop's proof as on a real machine, here from the backing file's inode alone (no /dev node is opened).
    monkeypatch.setattr(discover, "is_real_sysfs", lambda root: True)
    def inode(name: str, devnum: str, backing: str) -> str:
        if not os.path.exists(backing):
            return ""
        st = os.stat(backing)
        return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"

    monkeypatch.setattr(discover, "backing_inode", inode)
    original = int(t.tree.sysfs.read("block/loop40/queue/read_ahead_kb"))
    assert t("apply", "-p", "mydb", "loop40").code == 0
    moved = tmp_path / "moved.img"
    image.rename(moved)
    (t.tree.root / "block" / "loop40" / "loop" / "backing_file").write_text(f"{moved}\n")
    (tmp_path / "rules").mkdir()
    assert t("udev", "install", "--all", "--rules-dir", str(tmp_path / "rules")).code == 0
    devices = _journal(t)["devices"]
    assert f"loop:{image}" not in devices
    assert devices[f"loop:{moved}"]["attributes"]["read_ahead_kb"] == original


def test_udev_install_records_the_rules_before_it_writes_them(t: Tunectl, tmp_path: Path, udevadm: _Udevadm,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed between the two must leave rules the record names: else `rollback --remove-rules` restores the
    values and leaves the rules, which write them again at the next event. A write that fails puts the record back."""
    from tunectl.system import rulesfile

    assert t("apply", "-p", "mydb", "loop0").code == 0
    real_write, named = rulesfile.write, []

    def write(target: Path, data: bytes) -> bool:
        named.append(_record(t).get("rules", {}).get("path"))
        return real_write(target, data)

    monkeypatch.setattr(rulesfile, "write", write)
    assert t("udev", "install", "--rules-dir", str(tmp_path)).code == 0
    assert named == [str(tmp_path / RULES_FILE)]
    assert t("rollback", "--remove-rules").code == 0 and not (tmp_path / RULES_FILE).exists()

    def refused(target: Path, data: bytes) -> bool:
        named.append(_record(t).get("rules", {}).get("path"))
        raise rulesfile.denied(OSError(errno.EROFS, "Read-only file system"), f"write {target}")

    monkeypatch.setattr(rulesfile, "write", refused)
    assert t("apply", "-p", "mydb", "loop0").code == 0
    r = t("udev", "install", "--rules-dir", str(tmp_path))
    assert r.code != 0 and "Read-only file system" in r.err, r.err
    assert named[-1] == str(tmp_path / RULES_FILE) and "rules" not in _record(t)
    assert t("rollback").code == 0  # no rules recorded: nothing to refuse


def test_udev_remove_does_not_promise_what_rollback_cannot_do(t: Tunectl, tmp_path: Path, udevadm: _Udevadm) -> None:
    assert t("apply", "-p", "mydb", "loop0").code == 0
    assert t("udev", "install", "--rules-dir", str(tmp_path)).code == 0
    r = t("udev", "remove", "--rules-dir", str(tmp_path))
    assert r.code == 0 and "restores the originals" not in r.out and "keeps the rules' value" in r.out
    assert "rules" not in _record(t)
    assert t("rollback").code == 0


def test_a_device_the_rules_tuned_first_gets_the_originals_they_kept(t: Tunectl, tmp_path: Path,
                                                                     udevadm: _Udevadm) -> None:
    assert t("apply", "-p", "mydb", "loop0").code == 0
    assert t("udev", "install", "--all", "--rules-dir", str(tmp_path)).code == 0
    text = (tmp_path / RULES_FILE).read_text()
    assert 'IMPORT{db}="TUNECTL_ORIG_READ_AHEAD_KB"' in text
    assert 'ENV{TUNECTL_ORIG_READ_AHEAD_KB}="$attr{queue/read_ahead_kb}"' in text
    # Hot-plug: a new loop device, tuned by the rules (as udev would: originals kept in its database first).
    t.tree.add_loop("loop9", "/srv/images/new.img")
    original = snapshot(t.tree, "loop9")
    db = t.tree.udev_root / f"b{t.tree.devnum('loop9')}"
    kept = {"SCHEDULER": t.tree.sysfs.read("block/loop9/queue/scheduler"),
            "READ_AHEAD_KB": original["read_ahead_kb"], "NR_REQUESTS": original["nr_requests"],
            "IOSCHED_READ_EXPIRE": original["iosched/read_expire"]}
    db.write_text(db.read_text() + "".join(f"E:TUNECTL_ORIG_{k}={v}\n" for k, v in kept.items()))
    t.tree.sysfs.write("block/loop9/queue/iosched/read_expire", "100")
    t.tree.sysfs.write("block/loop9/queue/read_ahead_kb", "1024")
    r = t("verify")
    assert r.code == 0 and "journalled the originals the udev rules kept for loop9" in r.err
    entry = _journal(t)["devices"]["loop:/srv/images/new.img"]
    assert entry["attributes"]["read_ahead_kb"] == int(original["read_ahead_kb"])
    assert entry["iosched"]["mq-deadline"]["read_expire"] == int(original["iosched/read_expire"])
    assert "journalled" not in t("verify").err  # once
    assert t("rollback", "--remove-rules").code == 0
    assert snapshot(t.tree, "loop9") == original


def test_udev_remove_journals_what_the_rules_kept_before_it_forgets_them(t: Tunectl, tmp_path: Path,
                                                                        udevadm: _Udevadm) -> None:
    """#34: a value written under the rules on a device no tunectl command saw since (a hot-plugged disk, or a disk
    whose stack was made after install and whose below: the RUN wrote): `udev remove` then `rollback`, with no
    command between, restores it. Before, the remove dropped the rules from the record first, so nothing adopted."""
    assert t("apply", "-p", "mydb", "--all").code == 0
    assert t("udev", "install", "--rules-dir", str(tmp_path)).code == 0
    t.tree.add_loop("loop9", "/srv/images/new.img")
    original = snapshot(t.tree, "loop9")
    db = t.tree.udev_root / f"b{t.tree.devnum('loop9')}"
    db.write_text(db.read_text() + f"E:TUNECTL_ORIG_READ_AHEAD_KB={original['read_ahead_kb']}\n")
    t.tree.sysfs.write("block/loop9/queue/read_ahead_kb", "1024")
    r = t("udev", "remove", "--rules-dir", str(tmp_path))
    assert r.code == 0 and "journalled the originals the udev rules kept for loop9" in r.err, r.err
    assert "rules" not in _record(t)
    assert t("rollback").code == 0
    assert snapshot(t.tree, "loop9") == original


@pytest.mark.parametrize("event", [False, True], ids=["no-event", "card-event-after-run"])
def test_a_scheduler_the_run_set_below_a_stack_made_after_install_comes_back(t: Tunectl, tmp_path: Path,
                                                                             udevadm: _Udevadm, event: bool) -> None:
    """#34 as the VM tier runs it, on the fake kernel: rules first (no --trigger), then a dm device on the card,
    whose RUN (apply --stack) switches the card to bfq; udev remove + rollback bring back mq-deadline."""
    from tests.fakesys import dm_verity_over_mmc

    profile = tmp_path / "late.yaml"
    profile.write_text("name: late\nclasses:\n  mmc: {read_ahead_kb: 256}\n"
                       "devices:\n  - match: {class: dm}\n    below: {scheduler: bfq}\n")
    t.tree.add_disk("mmcblk0", rotational=False, bus="mmc", model="DG4016", serial="0x1a2b3c4d", size_sectors=30535680,
                    queue_depth=64, partitions=[(8192, 131072), (139264, 4194304), (4333568, 65536)])
    kernel = snapshot(t.tree, "mmcblk0")
    assert "[mq-deadline]" in kernel["scheduler"] and "bfq" in kernel["scheduler"], kernel
    assert t("apply", "-p", str(profile), "--all").code == 0
    [card] = [i for i, entry in _journal(t)["devices"].items() if entry["name"] == "mmcblk0"]
    exe = tmp_path / "tunectl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    t.ctx.env["TUNECTL_EXECUTABLE"] = str(exe)
    r = t("udev", "install", "--rules-dir", str(tmp_path))
    assert r.code == 0, r.err
    text = (tmp_path / RULES_FILE).read_text()
    assert 'IMPORT{db}="TUNECTL_ORIG_SCHEDULER"' in text
    # No event reached the card since (no --trigger): the record keeps what below: sets, as install found it.
    assert _record(t)["rules"]["kept"][card]["TUNECTL_ORIG_SCHEDULER"] == kernel["scheduler"]
    # A dm device opened on the card afterwards; its event runs the RUN.
    dm_verity_over_mmc(t.tree)
    assert t("apply", "-p", str(profile), "--stack", "dm-1", "-q").code == 0
    assert "[bfq]" in snapshot(t.tree, "mmcblk0")["scheduler"]
    if event:  # then an event of the card: the rules keep what it shows now, bfq (their IMPORT{db} was empty)
        db = t.tree.udev_root / f"b{t.tree.devnum('mmcblk0')}"
        db.write_text(db.read_text() + f"E:TUNECTL_ORIG_SCHEDULER={snapshot(t.tree, 'mmcblk0')['scheduler']}\n")
        # Re-installing keeps what the first install kept, not the bfq the RUN wrote since (and adopts it).
        assert t("udev", "install", "--rules-dir", str(tmp_path)).code == 0
        assert _record(t)["rules"]["kept"][card]["TUNECTL_ORIG_SCHEDULER"] == kernel["scheduler"]
    r = t("udev", "remove", "--rules-dir", str(tmp_path))
    assert r.code == 0 and _journal(t)["devices"][card]["attributes"]["scheduler"] == "mq-deadline", r.err
    assert event or "journalled the originals the udev rules kept for mmcblk0" in r.err, r.err
    assert t("rollback").code == 0
    assert snapshot(t.tree, "mmcblk0") == kernel


def test_below_originals_of_a_standalone_disk_are_not_adopted(t: Tunectl, tmp_path: Path, udevadm: _Udevadm) -> None:
    """Review 2, finding 1: install keeps what below: sets on every disk (the stack may come later), but on a disk
    under no stack a changed value is someone else's (an admin's blockdev --setra): neither install's kept value nor
    the database's is journalled, so a rollback never undoes it. (A disk under a stack still gets its original:
    test_a_scheduler_the_run_set_below_a_stack_made_after_install_comes_back.)"""
    profile = tmp_path / "below.yaml"
    profile.write_text("name: below\ndevices:\n  - match: {class: dm}\n    below: {read_ahead_kb: 4096}\n")
    t.tree.add_disk("mmcblk0", rotational=False, bus="mmc", model="DG4016", serial="0x1a2b3c4d", size_sectors=30535680,
                    queue_depth=64, partitions=[(8192, 131072), (139264, 4194304), (4333568, 65536)])
    exe = tmp_path / "tunectl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    t.ctx.env["TUNECTL_EXECUTABLE"] = str(exe)
    kernel = snapshot(t.tree, "mmcblk0")
    assert t("udev", "install", "-p", str(profile), "--rules-dir", str(tmp_path)).code == 0
    [card] = [i for i in _record(t)["rules"]["kept"] if "0x1a2b3c4d" in i]
    # The admin sets read-ahead on the standalone card; the database also says what the rules kept at its event.
    db = t.tree.udev_root / f"b{t.tree.devnum('mmcblk0')}"
    db.write_text(db.read_text() + f"E:TUNECTL_ORIG_READ_AHEAD_KB={kernel['read_ahead_kb']}\n")
    t.tree.sysfs.write("block/mmcblk0/queue/read_ahead_kb", "8192")
    r = t("status")
    assert r.code == 0 and "mmcblk0" not in r.err, r.err
    journalled = t.ctx.state.dir / "journal.json"
    assert not journalled.exists() or card not in _journal(t)["devices"], journalled.read_text()
    # Re-installed while the card is away: what the first install kept for it stays.
    first = _record(t)["rules"]["kept"][card]
    t.tree.sysfs.write("block/mmcblk0/queue/read_ahead_kb", kernel["read_ahead_kb"])
    t.tree.sysfs.vanish("mmcblk0")
    assert t("udev", "install", "-p", str(profile), "--rules-dir", str(tmp_path)).code == 0
    assert _record(t)["rules"]["kept"][card] == first


@pytest.mark.parametrize("stacked", [False, True], ids=["standalone", "stacked-later"])
def test_below_only_originals_of_a_disk_that_appeared_after_install(t: Tunectl, tmp_path: Path, udevadm: _Udevadm,
                                                                   stacked: bool) -> None:
    """A disk that appears after `udev install` is in no `kept` of the record; its below:-only originals are in
    udev's database alone (its first event). On a standalone disk a changed read-ahead is an admin's: not journalled,
    because the record says which originals only below: keeps. Once a stack is made over it, the RUN wrote it: the
    database's original is journalled and rollback brings it back (#34 for a disk that came late)."""
    from tests.fakesys import dm_verity_over_mmc

    profile = tmp_path / "below.yaml"
    profile.write_text("name: below\nclasses:\n  mmc: {queue: {nr_requests: 32}}\n"
                       "devices:\n  - match: {class: dm}\n    below: {read_ahead_kb: 4096}\n")
    exe = tmp_path / "tunectl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    t.ctx.env["TUNECTL_EXECUTABLE"] = str(exe)
    assert t("udev", "install", "-p", str(profile), "--rules-dir", str(tmp_path)).code == 0
    assert _record(t)["rules"]["below_only"] == ["TUNECTL_ORIG_READ_AHEAD_KB"]
    t.tree.add_disk("mmcblk0", rotational=False, bus="mmc", model="DG4016", serial="0x1a2b3c4d", size_sectors=30535680,
                    queue_depth=64, partitions=[(8192, 131072), (139264, 4194304), (4333568, 65536)])
    kernel = snapshot(t.tree, "mmcblk0")
    db = t.tree.udev_root / f"b{t.tree.devnum('mmcblk0')}"
    db.write_text(db.read_text() + f"E:TUNECTL_ORIG_READ_AHEAD_KB={kernel['read_ahead_kb']}\n")
    if stacked:
        dm_verity_over_mmc(t.tree)
    t.tree.sysfs.write("block/mmcblk0/queue/read_ahead_kb", "4096" if stacked else "8192")
    r = t("status")
    assert r.code == 0
    journalled = t.ctx.state.dir / "journal.json"
    if not stacked:
        assert "mmcblk0" not in r.err, r.err
        assert not journalled.exists() or not any(e["name"] == "mmcblk0" for e in _journal(t)["devices"].values())
        return
    assert "journalled the originals the udev rules kept for mmcblk0" in r.err, r.err
    assert t("rollback", "--remove-rules").code == 0
    assert snapshot(t.tree, "mmcblk0")["read_ahead_kb"] == kernel["read_ahead_kb"]


def test_every_skipped_device_gets_a_line_with_the_reason(t: Tunectl) -> None:
    r = t("apply", "-p", "default", "loop0", "--check")
    assert "skipped loop0: class loop is tuned only by a profile that names it" in r.out
    assert "`loop: {read_ahead_kb: 128}` under `classes:`" in r.out
    doc = t("plan", "-p", "default", "loop0", "loop1", "--json").doc
    assert [s["device"] for s in doc["skipped"]] == ["loop0", "loop1"]
    assert t("plan", "-p", "mydb", "loop0", "--json").doc["skipped"] == []


def test_a_lock_wait_says_who_holds_it_and_wait_bounds_it(t: Tunectl) -> None:
    from tunectl.system.state import StateStore

    other = StateStore(t.ctx.state.dir)
    other.command = "tunectl rollback"
    with other.locked():
        r = t("--wait", "0.3", "apply", "-p", "mydb", "loop0")
    assert r.code == 5, r.err
    assert "waiting for the lock" in r.err and "(at most 0.3 s, --wait)" in r.err
    assert f"held by tunectl rollback (pid {os.getpid()}, since " in r.err and "nothing was done" in r.err
    assert t.tree.sysfs.read("block/loop0/queue/read_ahead_kb") != "1024"
    assert t("apply", "-p", "mydb", "loop0").code == 0  # free again: no message, no wait


def test_a_bench_whose_device_vanished_says_what_it_could_not_restore(t: Tunectl) -> None:
    from tunectl.bench import stack as stacking
    from tunectl.bench.runner import Io, Sweep
    from tunectl.bench.sweep import plan_points

    bump_block_stat(t.tree, "loop0")
    stack = stacking.resolve(t.ctx, "loop0")
    reads = []

    def read(path: str, limit: int, block: int) -> tuple[int, float]:
        reads.append(path)
        if len(reads) == 2:
            t.tree.sysfs.vanish("loop0")  # detached under the sweep
        return limit, 0.01

    sweep = Sweep(t.ctx, stack, plan_points([16, 256], ["none", "bfq"], 1, seed=3), 1 << 20, 4096,
                  Io(read, lambda files, nodes: None))
    with pytest.raises(OSError):  # its statistics are gone too: the sweep stops, and restores what it can
        sweep.run()
    failed = {o.setting.attribute: o.error for o in sweep.restore_failures}
    assert {"read_ahead_kb", "scheduler"} <= set(failed)
    assert all("the device is gone" in why for why in failed.values())


def test_verify_names_a_running_bench_and_does_not_call_its_values_drift(t: Tunectl) -> None:
    """A real sweep: verify runs between its points, and learns the devices from bench's hold record."""
    from tunectl.bench import stack as stacking
    from tunectl.bench.runner import Io, Sweep
    from tunectl.bench.sweep import plan_points
    from tunectl.system.hold import HOLD

    assert t("apply", "-p", "mydb", "loop0", "loop1").code == 0
    bump_block_stat(t.tree, "loop0")
    seen = []

    def read(path: str, limit: int, block: int) -> tuple[int, float]:
        seen.append((t("verify"), oct((t.ctx.state.dir / HOLD).stat().st_mode & 0o7777)))
        return limit, 0.01

    sweep = Sweep(t.ctx, stacking.resolve(t.ctx, "loop0"), plan_points([16], [None], 1, seed=3), 1 << 20, 4096,
                  Io(read, lambda files, nodes: None))
    sweep.run()
    (r, mode), = seen
    assert r.code == 0 and "a bench is running on loop0" in r.err, r.err
    assert mode == "0o644"
    assert not (t.ctx.state.dir / HOLD).exists()  # removed when the sweep ended
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "16")  # a value the sweep left behind is drift again
    assert t("verify").code == 1


def test_verify_ignores_the_lock_line_and_the_hold_of_a_process_that_is_gone(t: Tunectl) -> None:
    """The lock's line is a message for waiting people, not data; a hold left by a killed bench is no hold."""
    import subprocess

    from tunectl.system.hold import HOLD, Hold, start_time
    from tunectl.system.state import StateStore

    assert t("apply", "-p", "mydb", "loop0", "loop1").code == 0
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "16")
    bench = StateStore(t.ctx.state.dir)
    bench.command = "tunectl bench on loop0"
    with bench.locked():
        r = t("verify")
    assert r.code == 1 and "a bench is running" not in r.err
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid runs no more
    mine = start_time(os.getpid())
    assert mine is not None
    # A real start time, so the record is read and only the dead pid makes it no hold.
    (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", gone.pid, mine, ("loop0",)).to_json()))
    r = t("verify")
    assert r.code == 1 and "a bench is running" not in r.err
    # Our own pid with another start time: the pid was reused by a later process.
    (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", os.getpid(), mine + 1, ("loop0",)).to_json()))
    assert t("verify").code == 1
    (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", os.getpid(), mine, ("loop0",)).to_json()))
    r = t("verify")
    assert r.code == 0 and "a bench is running on loop0" in r.err
    lines = r.out.splitlines()  # one story: the held drift is not "1 change" above the verdict "in sync"
    assert lines[-1] == "in sync" and "1 held by a running bench" in lines[-2] and "change" not in lines[-2], r.out
    # No start time (bench always writes one): any process under the pid, pid 1 too, would have held the devices.
    (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", os.getpid(), None, ("loop0",)).to_json()))
    r = t("verify")
    assert r.code == 1 and "a bench is running" not in r.err
    # A device name bench never writes (a line break forged verify's note; a path, a blank) is no hold at all.
    for odd in ("loop0\ntunectl: note: all clear", "../loop0", "loop 0", ""):
        (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", os.getpid(), mine, ("loop0", odd)).to_json()))
        r = t("verify")
        assert r.code == 1 and "a bench is running" not in r.err, odd


def test_a_hold_whose_start_time_cannot_be_read_is_no_hold(t: Tunectl, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review 2, finding 3: under /proc hidepid=2 a non-root verify cannot read the bench's start time; a live pid
    then proves nothing (it may be any later process), so the drift is reported, not passed over."""
    from tunectl.system import hold
    from tunectl.system.hold import HOLD, Hold, start_time

    assert t("apply", "-p", "mydb", "loop0").code == 0
    t.tree.sysfs.write("block/loop0/queue/read_ahead_kb", "16")
    mine = start_time(os.getpid())
    (t.ctx.state.dir / HOLD).write_text(json.dumps(Hold("tunectl bench", os.getpid(), mine, ("loop0",)).to_json()))
    assert t("verify").code == 0  # readable and the same: held
    monkeypatch.setattr(hold, "start_time", lambda pid: None)
    r = t("verify")
    assert r.code == 1 and "a bench is running" not in r.err, r.err


def test_align_without_dev_reads_every_disk_it_can_and_lists_the_others(t: Tunectl) -> None:
    from tunectl.align.check import check
    from tunectl.system.parted import Parted
    from tunectl.system.runner import CommandError, Completed

    t.tree.add_disks(3)  # sda sdb sdc
    t.ctx.roots = t.ctx.roots._replace(dev="/dev")  # node names only: parted below is a stand-in

    def parted(argv, timeout=None, check=True, **kwargs):
        if "/dev/sdb" in argv:
            raise CommandError(f"{' '.join(argv)} did not finish within 60 s")
        return Completed(tuple(argv), 1, "", "Error: /dev/x: unrecognised disk label")

    report = check(t.ctx, "default", None, parted=Parted(run=parted), workers=1)
    assert [(d.device, d.unreadable) for d in report.disks] == [("sdb", True)]
    assert not report.ok  # exit 1, as tunectl-align(8) documents for a disk parted could not read
    assert "did not finish" in report.disks[0].warnings[0]


def test_concurrent_applies_switching_schedulers_lose_no_original(t: Tunectl) -> None:
    """Four runs at once (as udev RUNs and a person would), each switching one device bfq -> mq-deadline -> bfq."""
    import threading

    from tunectl.context import Context
    from tunectl.system.state import StateStore

    for i in range(4):
        t.tree.sysfs.write(f"block/loop{i}/queue/scheduler", "bfq")
        t.tree.sysfs.write(f"block/loop{i}/queue/iosched/slice_idle", "3")
    before = snapshot_all(t.tree)
    codes: list[int] = []

    def run(name: str) -> None:
        own = Tunectl.__new__(Tunectl)
        own.tree = t.tree
        own.ctx = Context(t.tree.sysfs, t.tree.udev, StateStore(t.ctx.state.dir), t.ctx.search_path)
        for profile in ("deadline", "bfq-zero"):
            codes.append(own("apply", "-p", profile, name).code)

    threads = [threading.Thread(target=run, args=(f"loop{i}",)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert codes == [0] * 8
    assert set(_journal(t)["devices"]) == {f"loop:/srv/images/d{i}.img" for i in range(4)}
    assert t("rollback").code == 0
    assert snapshot_all(t.tree) == before


def test_two_disks_with_one_identity_warn_and_rollback_writes_only_the_journalled_one(t: Tunectl,
                                                                                      tmp_path: Path) -> None:
    # Two paths to one LUN (or two sticks with a cloned serial): nothing in sysfs tells them apart.
    t.tree.add_disk("sda", wwn="5000c50000000001", serial="ZA1", active="none")
    t.tree.add_disk("sdb", wwn="5000c50000000001", serial="ZA1", active="none")
    profile = tmp_path / "ssd.yaml"
    profile.write_text("name: ssd\nclasses:\n  ssd: {scheduler: mq-deadline, read_ahead_kb: 512}\n")
    before = snapshot_all(t.tree)
    assert t("apply", "-p", str(profile), "sda").code == 0  # reads sda's stack only: sdb unseen
    warning = "sda, sdb share the identity wwn:0x5000c50000000001"
    assert warning in t("plan", "-p", str(profile)).err and warning in t("status").err
    t.tree.sysfs.write("block/sdb/queue/scheduler", "bfq")  # someone else's value on the other path
    r = t("rollback")
    assert r.code == 0 and warning in r.err
    assert snapshot(t.tree, "sda") == before["sda"]
    assert t.tree.sysfs.read("block/sdb/queue/scheduler").split("[")[1].startswith("bfq]")  # never written


def test_warnings_name_only_devices_the_command_touches(t: Tunectl) -> None:
    """Another user's loop devices sharing a backing file are not this apply's or this rollback's business."""
    t.tree.add_loop("loop4", "/srv/images/d0.img")  # loop0 and loop4 share a file; nobody names them
    for argv in (("apply", "-p", "mydb", "loop1", "--json"), ("plan", "--json"), ("rollback", "--check", "--json"),
                 ("rollback", "--json")):
        r = t(*argv)
        assert r.code == 0, (argv, r.err)
        assert "shares its backing file" not in r.err and not [w for w in r.doc.get("warnings", []) if "loop4" in w], argv
    # named, it is warned about
    r = t("apply", "-p", "mydb", "loop4")
    assert r.code == 0 and "loop4 shares its backing file" in r.err
    r = t("rollback", "loop4")
    assert r.code == 0 and "loop4 shares its backing file" in r.err


def test_the_record_hashes_the_text_that_was_applied_not_one_read_later(t: Tunectl, tmp_path: Path, monkeypatch) -> None:
    """The file edited while apply waits for the state lock: apply writes what the text it read says, and the record
    keeps that text's hash (it read the file again for the hash, so the edit looked applied and went unnoticed)."""
    from tunectl.tuning import journal

    path = tmp_path / "profiles" / "mydb.yaml"
    load = journal.load

    def edited_meanwhile(state):  # called under the lock, before the record is made
        path.write_text(MYDB.replace("1024", "2048"))
        return load(state)

    monkeypatch.setattr(journal, "load", edited_meanwhile)
    assert t("apply", "-p", str(path), "loop0").code == 0
    monkeypatch.undo()
    assert t.tree.sysfs.read("block/loop0/queue/read_ahead_kb") == "1024"  # the text read at the start
    r = t("verify")
    assert r.code == 2 and "changed since it was applied" in r.err


def test_the_record_names_the_file_read_not_the_name_resolved_again(tmp_path: Path) -> None:
    """intent.of: the reference and the path of a profile named by path are one answer, the walk its read took.
    Taken again by name after the read (another walk, a realpath), a link put at the name in between made the
    record name another file than the one hashed, and a later command without -p loaded that one."""
    from tunectl.profile.resolve import load_profile
    from tunectl.tuning import intent

    read, other = tmp_path / "read.yaml", tmp_path / "other.yaml"
    read.write_text("name: read\nclasses:\n  ssd: {read_ahead_kb: 256}\n")
    other.write_text("name: other\nclasses:\n  ssd: {read_ahead_kb: 4096}\n")
    profile = load_profile(str(read), [])
    aside = tmp_path / "read.yaml.aside"
    read.rename(aside)
    read.symlink_to(other)  # the name leads elsewhere since the read
    record = intent.of(profile, str(read))
    assert (record.ref, record.path, record.files) == (str(read), str(read), (str(read),))
    assert record.profile_sha256 == profile.sha256
