"""`tunectl mounts` on fake trees: source resolution through the udev database and stacks,
check and fix through the real CLI, DEV paths for plan, and a bad-input table."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.fakesys import (
    FakeTree,
    add_filesystem,
    dm_crypt_over_ssd,
    lvm_over_md,
    mountinfo_line,
    sata_hdd,
    stack_discard,
)
from tests.harness import run_cli, run_process
from tunectl.context import Context
from tunectl.devices.resolve import Resolver
from tunectl.errors import UsageError
from tunectl.mounts import operations
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore

ROOT_UUID = "0a1b2c3d-1111-4222-8333-444455556666"
GONE_UUID = "deadbeef-0000-4000-8000-000000000000"

PROFILE = """\
name: fs-test
mounts:
  - match: {class: [ssd, nvme, rotational, dm, md]}
    options: [noatime]
    discard: online
  - match: {mountpoint: "/mnt/*"}
    options: [nofail]
  - match: {fstype: tmpfs}
    options: [noatime]
"""

FSTAB = f"""\
# <file system>  <mount point>  <type>  <options>  <dump>  <pass>
UUID={ROOT_UUID}  /  ext4  errors=remount-ro,relatime  0  1
UUID=7E1F-2A3B    /boot/efi  vfat  umask=0077  0  1
LABEL=my\\040data\t/srv/my\\040data\text4\tdefaults\t0\t2
/dev/mapper/vg0-data /var/lib/postgresql xfs noatime,discard 0 2
PARTUUID=9f8e7d6c-02 /srv/fast ext4 rw,noatime,discard
UUID={GONE_UUID} /mnt/old ext4 relatime 0 2
nas:/export /home nfs4 rw,hard 0 0
tmpfs /tmp tmpfs mode=1777,nosuid 0 0
/swapfile none swap sw 0 0
/srv/www /var/www none bind 0 0
"""


class Env:
    """A fake machine: sysfs + udev database, a proc root with mountinfo, a dev root, an fstab."""

    def __init__(self, base: Path) -> None:
        self.tree = tree = FakeTree.create(base)
        sata_hdd(tree, "sda")  # HDD, cannot discard
        add_filesystem(tree, "sda1", "ext4", uuid=ROOT_UUID)
        dm_crypt_over_ssd(tree, "dm-0", "sdb")  # LUKS2 on sdb2, SSD with discard
        stack_discard(tree, "dm-0", ["sdb2"])
        add_filesystem(tree, "sdb1", "vfat", uuid="7E1F-2A3B")
        add_filesystem(tree, "dm-0", "ext4", label="my data", uuid="1111aaaa-2222-4333-8444-555566667777")
        # LVM over md over two SSDs, sdd unable to discard
        tree.add_disk("sdc", rotational=False, bus="ata", model="Samsung SSD 870", serial="S1", wwn="0x5002538e00000001",
                      discard_max_bytes=2147450880)
        tree.add_disk("sdd", rotational=False, bus="ata", model="OLD SSD", serial="S2", wwn="0x5002538e00000002",
                      discard_max_bytes=0)
        lvm_over_md(tree, "dm-2", "md0", ("sdc", "sdd"))
        stack_discard(tree, "md0", ["sdc", "sdd"])
        stack_discard(tree, "dm-2", ["md0"])
        add_filesystem(tree, "dm-2", "xfs", uuid="22222222-3333-4444-8555-666677778888")
        tree.add_disk("nvme0n1", bus="nvme", model="Samsung SSD 980 PRO 1TB", serial="N1",
                      discard_max_bytes=2199023255040, partitions=[(2048, 1048576), (1050624, 1048576)])
        add_filesystem(tree, "nvme0n1p2", "ext4", uuid="33333333-4444-4555-8666-777788889999", partuuid="9f8e7d6c-02")
        self.proc = base / "proc"
        (self.proc / "self").mkdir(parents=True)
        self.mountinfo([
            mountinfo_line(tree, 20, "sda1", "/", "ext4", "/dev/sda1", "rw,relatime", "rw,errors=remount-ro"),
            "21 20 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw",
            mountinfo_line(tree, 22, "sdb1", "/boot/efi", "vfat", "/dev/sdb1", "rw,relatime", "rw,fmask=0077"),
            mountinfo_line(tree, 23, "dm-0", "/srv/my data", "ext4", "/dev/mapper/luks-x", "rw,noatime", "rw,discard"),
            mountinfo_line(tree, 24, "dm-2", "/var/lib/postgresql", "xfs", "/dev/mapper/vg0-data", "rw,noatime",
                           "rw,inode64"),
            mountinfo_line(tree, 25, "nvme0n1p2", "/srv/fast", "ext4", "/dev/nvme0n1p2", "rw,noatime", "rw,discard"),
            "26 20 0:30 / /tmp rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,mode=1777",
            "27 20 0:31 / /home rw,relatime shared:6 - nfs4 nas:/export rw,vers=4.2",
            mountinfo_line(tree, 28, "sda1", "/var/www", "ext4", "/dev/sda1", "rw,relatime", "rw", root="/srv/www"),
        ])
        self.dev = base / "dev"
        (self.dev / "disk" / "by-uuid").mkdir(parents=True)
        self.fstab = base / "fstab"
        self.fstab.write_text(FSTAB)
        os.chmod(self.fstab, 0o640)
        self.profile = base / "fs-test.yaml"
        self.profile.write_text(PROFILE)
        self.env = {"TUNECTL_PROC_ROOT": str(self.proc), "TUNECTL_DEV_ROOT": str(self.dev)}
        self.ctx = Context(tree.sysfs, tree.udev, StateStore(base / "state"), [shipped_profile_dir()], self.env)

    def mountinfo(self, lines: list[str]) -> None:
        (self.proc / "self" / "mountinfo").write_text("\n".join(lines) + "\n")

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        r = run_cli(*argv, context=self.ctx)
        return r.code, r.out, r.err


@pytest.fixture
def env(fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.setattr(operations, "fstrim_timer_state", lambda run: "enabled")
    return Env(fake_root)


# --- source resolution ------------------------------------------------------------------------------

@pytest.mark.parametrize("source, device, disks", [
    (f"UUID={ROOT_UUID}", "sda1", ["sda"]),
    (f"UUID={ROOT_UUID.upper()}", "sda1", ["sda"]),
    ("UUID=7E1F-2A3B", "sdb1", ["sdb"]),
    ("LABEL=my data", "dm-0", ["sdb"]),
    ('LABEL="my data"', "dm-0", ["sdb"]),
    ("PARTUUID=9f8e7d6c-02", "nvme0n1p2", ["nvme0n1"]),
    ("UUID=22222222-3333-4444-8555-666677778888", "dm-2", ["sdc", "sdd"]),
    ("/dev/mapper/vg0-data", "dm-2", ["sdc", "sdd"]),
    ("/dev/md/0", "md0", ["sdc", "sdd"]),
    ("/dev/disk/by-id/md-uuid-3f1c5d2a:9be04c1e:7a6d8f02:c4b1e9d3", "md0", ["sdc", "sdd"]),
    ("/dev/disk/by-uuid/1111aaaa-2222-4333-8444-555566667777", "dm-0", ["sdb"]),
    ("/dev/sdb2", "sdb2", ["sdb"]),
    ("/dev/nvme0n1", "nvme0n1", ["nvme0n1"]),
])
def test_source_resolution(env: Env, source: str, device: str, disks: list) -> None:
    r = Resolver(env.ctx)
    found = r.source(source)
    assert found.name == device, found.problem
    assert r.disks_below(found.name) == disks


def test_source_resolution_through_the_dev_root_when_udev_has_no_record(env: Env) -> None:
    (env.tree.udev_root / f"b{env.tree.devnum('sdc')}").unlink()
    (env.dev / "sdc").write_text("")
    os.symlink("../../sdc", env.dev / "disk" / "by-uuid" / "cafe-0001")
    r = Resolver(env.ctx)
    assert r.source("UUID=cafe-0001").name == "sdc"
    assert r.source("/dev/disk/by-uuid/cafe-0001").name == "sdc"


@pytest.mark.parametrize("source, problem", [
    (f"UUID={GONE_UUID}", "no device with UUID"),
    ("LABEL=nothing", "no device with LABEL"),
    ("/dev/sdz9", "not present"),
    ("nas:/export", "not a block device"),
    ("/dev/../etc/passwd", "not present"),
])
def test_unresolvable_sources_say_why(env: Env, source: str, problem: str) -> None:
    found = Resolver(env.ctx).source(source)
    assert found.name is None and problem in found.problem


@pytest.mark.parametrize("path, disks", [
    ("/var/lib/postgresql", ["sdc", "sdd"]),
    ("/var/lib/postgresql/16/main/base", ["sdc", "sdd"]),
    ("/srv/my data/x", ["sdb"]),
    ("/etc/hostname", ["sda"]),
    ("/var/www/index.html", ["sda"]),  # a bind mount: the disk of the filesystem it shows
])
def test_disks_under_path(env: Env, path: str, disks: list) -> None:
    assert Resolver(env.ctx).path(path) == disks


def test_plan_takes_a_mountpoint_as_dev(env: Env) -> None:
    code, out, err = env("plan", "-p", "database", "/var/lib/postgresql", "--json")
    assert code == 0, err
    assert {s["device"] for s in json.loads(out)["settings"]} == {"sdc", "sdd"}
    code, _, err = env("plan", "-p", "database", "/home/user")
    assert code == 2 and "nfs4" in err and "no block device" in err


def _on_this_machine(env: Env) -> Context:
    """env's tree, taken for the running kernel's (as a run without TUNECTL_SYSFS_ROOT would be)."""
    return Context(env.tree.sysfs, env.tree.udev, env.ctx.state, [shipped_profile_dir()], env.env,
                   roots=env.ctx.roots._replace(real=True))


@pytest.mark.parametrize("command", [("plan", "-p", "database"), ("explain",)])
def test_a_relative_path_that_does_not_exist_is_refused_not_taken_for_root(env: Env, command: tuple) -> None:
    # every path is under `/`, so a typo used to plan (and apply to) the root disk sda
    code, out, err = env(*command, "nothere/x")
    assert code == 2 and "nothere/x: no such file or directory" in err and "name a device" in err, err
    assert "sda" not in out + err


def test_an_absolute_path_that_does_not_exist_is_refused_on_the_running_kernel(env: Env) -> None:
    r = run_cli("plan", "-p", "database", "/mnt/typo", context=_on_this_machine(env))
    assert r.code == 2 and "/mnt/typo: no such file or directory" in r.err, r.err
    with pytest.raises(UsageError, match="no such file or directory"):
        Resolver(_on_this_machine(env)).path("/typo/path")
    # a fake tree's mount points exist only in its mountinfo: there the path stands as written
    assert Resolver(env.ctx).path("/var/lib/postgresql/16") == ["sdc", "sdd"]


# --- check ------------------------------------------------------------------------------------------

def _by_target(doc: dict) -> dict:
    return {fs["target"]: fs for fs in doc["filesystems"]}


def test_check_reports_wanted_live_fstab_and_drift(env: Env) -> None:
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    assert code == 1, err
    doc = json.loads(out)
    assert doc["in_sync"] is False and doc["profile"] == "fs-test"
    fs = _by_target(doc)
    assert set(fs) == {"/", "/boot/efi", "/srv/my data", "/var/lib/postgresql", "/srv/fast", "/mnt/old", "/tmp"}
    root = fs["/"]
    assert root["disks"] == ["sda"] and root["fstab_line"] == 2 and root["wanted"] == ["noatime"]
    assert root["live"] == ["rw", "relatime", "errors=remount-ro"]
    assert root["skipped"] == [{"option": "discard", "reason": "sda cannot discard (queue/discard_max_bytes is 0)"}]
    assert {(d["where"], d["change"], d["option"]) for d in root["drift"]} == {("live", "add", "noatime"),
                                                                           ("fstab", "add", "noatime")}
    # LVM over md over two SSDs, one unable to discard: a typed skip naming it, never drift
    pg = fs["/var/lib/postgresql"]
    assert pg["disks"] == ["sdc", "sdd"] and pg["device"] == "dm-2"
    assert pg["skipped"] == [{"option": "discard", "reason": "sdd cannot discard (queue/discard_max_bytes is 0)"}]
    assert pg["drift"] == []
    # the LUKS volume on the SSD can discard: wanted, and in sync live, missing in fstab
    luks = fs["/srv/my data"]
    assert luks["wanted"] == ["noatime", "discard"] and luks["fstab"] == ["defaults"]
    assert [d["where"] for d in luks["drift"]] == ["fstab", "fstab"]
    assert fs["/srv/fast"]["drift"] == [] and fs["/srv/fast"]["fstab_line"] == 6
    # a removed disk: rules that need no device still hold, the class rule is skipped with its reason
    old = fs["/mnt/old"]
    assert old["live"] is None and old["disks"] == [] and old["wanted"] == ["nofail"]
    assert {s["option"] for s in old["skipped"]} == {"noatime", "discard: online"}
    assert all("matches on the device (class)" in s["reason"] and GONE_UUID in s["reason"] for s in old["skipped"])
    # tmpfs only because a rule names its fstype; nfs, swap and the bind mount are left alone
    assert fs["/tmp"]["wanted"] == ["noatime"] and fs["/tmp"]["disks"] == []
    assert fs["/boot/efi"]["wanted"] == ["noatime", "discard"]


def test_check_in_sync_after_fstab_and_live_agree(env: Env) -> None:
    env.profile.write_text("name: quiet\nmounts:\n  - match: {mountpoint: /srv/fast}\n    options: [noatime]\n")
    # without the line of the removed disk, whose source no device answers to (flagged: see below)
    env.fstab.write_text(FSTAB.replace(f"UUID={GONE_UUID} /mnt/old ext4 relatime 0 2\n", ""))
    code, out, _ = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    assert code == 0 and json.loads(out)["in_sync"] is True
    code, out, _ = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 0 and "/srv/fast" in out and "in sync" in out


def _a_line_with_nine_fields(env: Env) -> int:
    """A profile in sync but for /srv/fast's fstab line, which ends in " 0 2 # fast disk" (9 fields): its number."""
    env.profile.write_text("name: quiet\nmounts:\n  - match: {mountpoint: /srv/fast}\n    options: [noatime]\n")
    fstab = FSTAB.replace(f"UUID={GONE_UUID} /mnt/old ext4 relatime 0 2\n", "")
    lines = fstab.splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines, 1) if " /srv/fast " in line)
    lines[n - 1] = lines[n - 1].rstrip("\n") + " 0 2 # fast disk\n"
    env.fstab.write_text("".join(lines))
    return n


def test_check_reports_a_line_with_more_than_six_fields_as_an_error_with_its_file_and_line(env: Env) -> None:
    # libmount drops fields past the 6th without a word (findmnt --verify: 0 parse errors): a trailing comment or an
    # option after a space silently does nothing. In sync otherwise, the line alone makes the check fail.
    n = _a_line_with_nine_fields(env)
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 1, (out, err)
    assert f"tunectl: error: {env.fstab}:{n}: 9 fields, but fstab(5) has 6 " in err, err
    assert "mount ignores '# fast disk': put a comment on a line of its own starting with #" in err, err
    code, out, _ = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["in_sync"] is False and not any("fields, but" in w for w in doc["warnings"])
    assert [e.split(": ", 1)[0] for e in doc["errors"]] == [f"{env.fstab}:{n}"] and ": 9 fields, but " in doc["errors"][0]
    assert [fs["target"] for fs in doc["filesystems"] if fs["target"] == "/srv/fast"]  # the entry is still checked


def test_fix_reports_the_line_with_more_than_six_fields_as_check_does(env: Env) -> None:
    # fix mends options, not extra fields: the line stays wrong, so fix says error and exits 1 as check does
    # (--check or not), and its JSON keeps it in errors, not warnings
    n = _a_line_with_nine_fields(env)
    for check in (["--check"], []):
        code, out, err = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), *check)
        assert code == 1, (check, out, err)
        assert f"tunectl: error: {env.fstab}:{n}: 9 fields, but fstab(5) has 6 " in err, err
        assert "tunectl: warning:" not in err, err
        code, out, _ = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--json", *check)
        doc = json.loads(out)
        assert code == 1 and not any("fields, but" in w for w in doc["warnings"]), doc
        assert [e.split(": ", 1)[0] for e in doc["errors"]] == [f"{env.fstab}:{n}"]
    assert env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))[0] == 1


def test_a_mount_point_holding_a_newline_or_escape_stays_on_its_warning_line(env: Env) -> None:
    # fstab writes a newline in a field as \012: the warning naming the entry is one line, the newline shown as \n,
    # ESC as \x1b (never sent to the terminal); --json keeps the exact name
    env.profile.write_text("name: quiet\nmounts:\n  - match: {mountpoint: /srv/fast}\n    options: [noatime]\n")
    env.fstab.write_text("LABEL=gone /srv/a\\012tunectl:\\040warning:\\040fake\\033[31m ext4 defaults 0 2\n")
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 1, (out, err)
    lines = [line for line in err.splitlines() if "srv/a" in line]
    assert len(lines) == 1 and "/srv/a\\ntunectl: warning: fake\\x1b[31m" in lines[0], err
    assert not [line for line in err.splitlines() if line.startswith("tunectl: warning: fake")], err
    assert "\x1b" not in err + out and "srv/a\\ntunectl" in out, out
    doc = json.loads(env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert any("/srv/a\ntunectl: warning: fake\x1b[31m" in w for w in doc["warnings"]), doc["warnings"]


def test_check_periodic_discard_needs_fstrim_timer(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.profile.write_text("name: p\nmounts:\n  - match: {mountpoint: /srv/fast}\n    options: [noatime]\n"
                           "    discard: periodic\n")
    code, out, _ = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    doc = json.loads(out)
    assert code == 1 and _by_target(doc)["/srv/fast"]["drift"] == [
        {"where": "live", "change": "remove", "option": "discard"},
        {"where": "fstab", "change": "remove", "option": "discard"}]
    assert doc["fstrim_timer"] == {"wanted": "enabled", "state": "enabled", "ok": True}
    monkeypatch.setattr(operations, "fstrim_timer_state", lambda run: "disabled")
    doc = json.loads(env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert doc["fstrim_timer"]["ok"] is False and any("systemctl enable --now fstrim.timer" in w for w in doc["warnings"])
    monkeypatch.setattr(operations, "fstrim_timer_state", lambda run: "no systemd")
    doc = json.loads(env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert doc["fstrim_timer"]["ok"] is True and any("systemd is not running" in w for w in doc["warnings"])


# --- fix ----------------------------------------------------------------------------------------------

EXPECTED_FIX = FSTAB.replace(
    "ext4  errors=remount-ro,relatime  0  1", "ext4  errors=remount-ro,noatime   0  1").replace(  # column kept
    "vfat  umask=0077  0  1", "vfat  umask=0077,noatime,discard 0  1").replace(
    "ext4\tdefaults\t0\t2", "ext4\tdefaults,noatime,discard\t0\t2").replace(
    "ext4 relatime 0 2", "ext4 relatime,nofail 0 2").replace(
    "tmpfs mode=1777,nosuid 0 0", "tmpfs mode=1777,nosuid,noatime 0 0")


def test_fix_check_diff_writes_nothing(env: Env) -> None:
    before = env.fstab.read_bytes()
    code, out, err = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--check", "--diff")
    assert code == 0, err
    assert env.fstab.read_bytes() == before and not Path(str(env.fstab) + ".tunectl.bak").exists()
    assert "-UUID=7E1F-2A3B    /boot/efi  vfat  umask=0077  0  1" in out
    assert "+UUID=7E1F-2A3B    /boot/efi  vfat  umask=0077,noatime,discard 0  1" in out
    assert "would be rewritten" in out
    doc = json.loads(env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--check", "--json")[1])
    assert doc["changed"] is True and doc["check"] is True and doc["backup"] is None and doc["diff"].startswith("--- ")


def test_fix_rewrites_only_changed_options_keeps_mode_and_leaves_a_backup(env: Env) -> None:
    before = env.fstab.read_bytes()
    code, out, err = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["changed"] is True and doc["problems"] == [] and doc["remounts"] == []
    assert env.fstab.read_text() == EXPECTED_FIX
    assert Path(doc["backup"]).read_bytes() == before
    assert os.stat(env.fstab).st_mode & 0o7777 == 0o640
    assert not [p for p in env.fstab.parent.iterdir() if p.name.startswith(".fstab.")]  # no temp file left
    # the fstab side is now in sync; a second fix changes nothing
    doc = json.loads(env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert doc["changed"] is False and doc["diff"] == ""
    check = json.loads(env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert all(d["where"] == "live" for fs in check["filesystems"] for d in fs["drift"])


def test_fix_refuses_when_libmount_disagrees(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    before = env.fstab.read_bytes()
    calls = []

    def fake_findmnt(data: bytes, run, shown="") -> list:
        calls.append(data)
        return [{"target": str(len(calls))}]  # a different parse each time

    monkeypatch.setattr(operations, "_findmnt", fake_findmnt)
    code, out, _ = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    doc = json.loads(out)
    assert code == 3 and "not replacing" in doc["problems"][0]
    assert env.fstab.read_bytes() == before
    assert not [p for p in env.fstab.parent.iterdir() if p.name.startswith(".fstab.")]


# --- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("case, argv_extra, code, text", [
    ("no action", None, 2, "usage"),
    ("missing profile", ["-p", "no-such-profile"], 2, "no-such-profile"),
    ("fstab is a directory", "DIR", 2, "is a directory"),
    ("missing fstab", "MISSING", 2, "no such fstab file"),
    ("garbage fstab", "GARBAGE", 1, "libmount cannot parse"),
    ("garbage mountinfo", "BADINFO", 1, "not a mount record"),
    ("unknown option", ["--frobnicate"], 2, "unrecognized"),
])
def test_bad_input(env: Env, capsys: pytest.CaptureFixture, case: str, argv_extra, code: int, text: str) -> None:
    argv = ["mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab)]
    if argv_extra is None:
        argv = ["mounts"]
    elif argv_extra == "DIR":
        argv[-1] = str(env.fstab.parent)
    elif argv_extra == "MISSING":
        argv[-1] = str(env.fstab) + ".nope"
    elif argv_extra == "GARBAGE":
        env.fstab.write_bytes(b"\x00\xff\xfe garbage\n\x89PNG\r\n\x1a\n" + os.urandom(64).replace(b"\n", b" ") + b"\n")
    elif argv_extra == "BADINFO":
        (env.proc / "self" / "mountinfo").write_text("this is not mountinfo\n")
    else:
        argv = argv[:2] + argv_extra + argv[2:] if argv_extra[0] != "-p" else ["mounts", "check", *argv_extra]
    got, out, err = env(*argv)
    err += capsys.readouterr().err  # argparse writes to sys.stderr
    assert got == code, (out, err)
    assert text in (out + err) and "Traceback" not in err


@pytest.mark.parametrize("verb", ["check", "fix"])
def test_a_named_fstab_that_does_not_exist_is_an_error(env: Env, verb: str) -> None:
    """--fstab with a typo: exit 2 and what to do, not a warning under an exit 0 that reads as "in sync"."""
    missing = str(env.fstab) + ".nope"
    code, out, err = env("mounts", verb, "-p", str(env.profile), "--fstab", missing, "--json")
    assert code == 2, (code, out, err)
    error = json.loads(out)["error"]
    assert error["message"] == f"{missing}: no such fstab file" and "--fstab" in error["hint"], error
    assert not os.path.exists(missing)


def test_the_default_fstab_missing_is_a_warning(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """/etc/fstab itself may be absent (a container, an initramfs): the live mounts are still checked."""
    missing = str(env.fstab) + ".nope"
    monkeypatch.setattr(operations, "FSTAB", missing)  # the built-in default, here a file that is not there
    env.ctx.roots = env.ctx.roots._replace(fstab=missing)
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--json")
    doc = json.loads(out)
    assert code != 2 and doc["fstab_path"] == missing, (code, err)
    assert f"{missing} does not exist; only live mounts are checked" in doc["warnings"]


@pytest.mark.parametrize("given", ["--fstab", "the default"])
def test_an_fstab_that_is_no_file_hints_what_was_not_done_yet(env: Env, monkeypatch: pytest.MonkeyPatch,
                                                              given: str) -> None:
    """A named pipe where the fstab should be: to someone who gave --fstab, "give --fstab FILE" told them to do
    what they had done; they are told to name a regular file or leave it out. Without it: give one."""
    fifo = env.fstab.parent / "pipe"
    os.mkfifo(fifo)
    argv = ["mounts", "check", "-p", str(env.profile), "--json"]
    if given == "--fstab":
        argv += ["--fstab", str(fifo)]
    else:
        monkeypatch.setattr(operations, "FSTAB", str(fifo))  # the built-in default, here a pipe
        env.ctx.roots = env.ctx.roots._replace(fstab=str(fifo))
    code, out, err = env(*argv)
    error = json.loads(out)["error"]
    assert code == 2 and error["message"] == f"{fifo} is a named pipe, not an fstab file", (code, out, err)
    want = ("name a regular file with --fstab (or TUNECTL_FSTAB), or leave both out for " if given == "--fstab"
            else "name a regular file with --fstab FILE")
    assert error["hint"].startswith(want), error


def test_fix_bad_input_unwritable_directory(env: Env) -> None:
    argv = ["mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab)]
    os.chmod(env.fstab.parent, 0o555)
    try:
        if os.geteuid() != 0:
            code, _, err = env(*argv)
        else:  # root writes anywhere: drop the capability that lets it, so it meets the mode like a user
            done = run_process(
                *argv, prefix=["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all", "--"],
                env={"PATH": os.environ.get("PATH", ""), "TUNECTL_SYSFS_ROOT": str(env.tree.root),
                     "TUNECTL_UDEV_ROOT": str(env.tree.udev_root), "TUNECTL_STATE_DIR": str(env.fstab.parent / "state"),
                     **env.env}, timeout=120)
            code, err = done.code, done.err
    finally:
        os.chmod(env.fstab.parent, 0o755)
    assert code == 4 and "cannot write" in err, err


def test_unreadable_proc_root(env: Env) -> None:
    env.env["TUNECTL_PROC_ROOT"] = str(env.proc / "nowhere")
    c = env.ctx
    env.ctx = Context(c.sysfs, c.udev, c.state, c.search_path, c.env, c.modules)  # roots follow the new env
    code, _, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 2 and "cannot read" in err and "TUNECTL_PROC_ROOT" in err


def test_duplicate_targets_are_warned_and_the_later_line_meets_the_live_mount(env: Env) -> None:
    env.fstab.write_text("/dev/nvme0n1p2 /srv/fast ext4 relatime 0 2\n# again\n"
                         "PARTUUID=9f8e7d6c-02 /srv/fast ext4 relatime 0 2\n")
    code, out, _ = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")
    doc = json.loads(out)
    assert code == 1
    assert any(":3: /srv/fast is also the mountpoint of line 1" in w for w in doc["warnings"])
    fast = [fs for fs in doc["filesystems"] if fs["target"] == "/srv/fast"]
    assert [(fs["fstab_line"], fs["live"] is not None) for fs in fast] == [(1, False), (3, True)]
    new = json.loads(env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert new["changed"] is True
    assert env.fstab.read_text() == ("/dev/nvme0n1p2 /srv/fast ext4 noatime,discard 0 2\n# again\n"
                                     "PARTUUID=9f8e7d6c-02 /srv/fast ext4 noatime,discard 0 2\n")


def test_fix_keeps_bytes_that_are_not_utf8(env: Env) -> None:
    data = b"# caf\xe9 (latin-1 comment)\n/dev/\xff /odd\xfe ext4 rw 0 0\n/dev/nvme0n1p2 /srv/fast ext4 relatime 0 2"
    env.fstab.write_bytes(data)
    code, out, err = env("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--diff")
    assert code == 0, err
    assert env.fstab.read_bytes() == data.replace(b"ext4 relatime 0 2", b"ext4 noatime,discard 0 2")
    assert "caf\ufffd" in out
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 1 and "/odd\\xfe" in out and "/srv/fast" in out  # the byte itself, escaped: never raw


def test_fix_waits_for_the_tunectl_lock(env: Env) -> None:
    import fcntl
    import threading

    env.ctx.state.dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(env.ctx.state.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another tunectl run holds the lock
    before = env.fstab.read_bytes()
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(env("mounts", "fix", "-p", str(env.profile),
                                                              "--fstab", str(env.fstab))[0]))
    try:
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and env.fstab.read_bytes() == before
    finally:
        os.close(fd)
    worker.join(30)
    assert codes == [0] and env.fstab.read_text() == EXPECTED_FIX


def test_remount_with_a_given_fstab_stays_within_the_mounts_it_lists(env: Env) -> None:
    env.fstab.write_text(f"UUID={ROOT_UUID}  /  ext4  errors=remount-ro,relatime  0  1\n")
    argv = ("mounts", "fix", "-p", str(env.profile), "--fstab", str(env.fstab), "--remount", "--check")
    code, out, err = env(*argv, "--json")
    doc = json.loads(out)
    assert code == 0 and [r["target"] for r in doc["remounts"]] == ["/"], doc["remounts"]
    assert any("does not list them" in w and "/boot/efi" in w for w in doc["warnings"]), doc["warnings"]
    code, out, err = env(*argv)
    assert "tunectl: warning: not remounted, as" in err and "--all-mounts" in err, err
    # --all-mounts: every drifting live mount, as without --fstab
    doc = json.loads(env(*argv, "--all-mounts", "--json")[1])
    assert {"/", "/boot/efi"} <= {r["target"] for r in doc["remounts"]}, doc["remounts"]


def test_check_flags_a_source_no_device_answers_to(env: Env) -> None:
    env.profile.write_text("name: quiet\nmounts:\n  - match: {mountpoint: /srv/fast}\n    options: [noatime]\n")
    env.fstab.write_text(FSTAB.replace(f"UUID={GONE_UUID} /mnt/old ext4 relatime 0 2",
                                       "LABEL=doesnotexist /mnt/old ext4 relatime 0 2"))
    code, out, err = env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab))
    assert code == 1, out + err
    assert re.search(r"^/mnt/old .* source not found$", out, re.M), out
    assert "LABEL=doesnotexist (/mnt/old): no device with LABEL" in err and "add nofail" in err, err
    doc = json.loads(env("mounts", "check", "-p", str(env.profile), "--fstab", str(env.fstab), "--json")[1])
    assert doc["in_sync"] is False and any("LABEL=doesnotexist" in w for w in doc["warnings"])
