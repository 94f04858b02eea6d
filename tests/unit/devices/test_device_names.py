"""Every form of a device name a sysadmin types, read by the one resolver, on a fake tree with a fake dev root.

The dev root stands for /dev: a regular file in it stands for the device node of its
name (no mknod without root); links in it are walked as on the real /dev, root's links
through directories no one else can change only. tests/root/devices/test_device_names_devices.py
runs the same forms against a real loop device and a hostile user's link.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl
from tunectl.devices.resolve import Resolver
from tunectl.errors import ExitCode, UsageError
from tunectl.system import devnode


@pytest.fixture
def dev(fake_tree: FakeTree, tmp_path: Path) -> Path:
    """The dev root of the machine `fake_tree` describes: nodes as files, udev's and LVM's links."""
    root = tmp_path / "dev"
    for sub in ("mapper", "vg0", "disk/by-id", "md"):
        (root / sub).mkdir(parents=True)
    for name in ("sda", "sda1", "sda2", "loop0", "dm-2", "md0", "sdc"):
        (root / name).write_text("")
    (root / "notes.txt").write_text("not a device")
    os.symlink("../dm-2", root / "mapper" / "vg0-data")
    os.symlink("../dm-2", root / "vg0" / "data")  # LVM's /dev/VG/LV
    os.symlink("../../sda", root / "disk" / "by-id" / "ata-HDD")
    os.symlink("../../sda1", root / "disk" / "by-id" / "ata-HDD-part1")
    os.symlink("/dev/md0", root / "md" / "data")  # an absolute target: resolved in the dev root, not on this machine
    os.symlink("/etc/passwd", root / "escape")
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    return root


@pytest.fixture
def t(fake_tree: FakeTree, dev: Path, tmp_path: Path) -> Tunectl:
    return Tunectl(fake_tree, tmp_path / "state", None, {"TUNECTL_DEV_ROOT": str(dev)})


@pytest.mark.parametrize("ref, name", [
    ("loop0", "loop0"),
    ("/dev/loop0", "loop0"),
    ("/dev/../dev/loop0", "loop0"),
    ("/dev//./loop0", "loop0"),
    ("/dev/loop0/", "loop0"),  # a trailing slash is dropped
    ("loop0/", "loop0"),
    ("/sys/block/loop0", "loop0"),
    ("/sys/block/loop0/", "loop0"),  # as a shell completes it
    ("/sys/class/block/sda1", "sda1"),
    ("/sys/block/sda/sda1", "sda1"),
    ("/sys/dev/block/7:0", "loop0"),
    ("7:0", "loop0"),
    ("8:1", "sda1"),
    ("sda1", "sda1"),
    ("/dev/sda1", "sda1"),
    ("/dev/mapper/vg0-data", "dm-2"),
    ("mapper/vg0-data", "dm-2"),
    ("/dev/vg0/data", "dm-2"),
    ("/dev/disk/by-id/ata-HDD", "sda"),
    ("/dev/disk/by-id/ata-HDD-part1", "sda1"),
    ("/dev/md/data", "md0"),
])
def test_each_form_names_its_device(t: Tunectl, ref: str, name: str) -> None:
    found = Resolver(t.ctx).lookup(ref)
    assert found.name == name, found


@pytest.mark.parametrize("ref, whole", [("/dev/sda1", "sda"), ("8:1", "sda"), ("/sys/block/sda/sda1", "sda"),
                                        ("/dev/disk/by-id/ata-HDD-part1", "sda"), ("/dev/vg0/data", "dm-2")])
def test_a_partition_or_a_link_stands_for_its_whole_device(t: Tunectl, ref: str, whole: str) -> None:
    assert Resolver(t.ctx).whole_devices([ref]) == [whole]
    r = t("status", "-p", "default", "-o", "device", "-n", ref)
    assert (r.code, r.out.split()) == (0, [whole]), r.err


@pytest.mark.parametrize("ref, words", [
    ("nosuch", "no block device 'nosuch'"),
    ("/dev/nosuch", "no block device /dev/nosuch: not present"),
    ("99:99", "no block device 99:99 (major:minor)"),
    ("/sys/block/sdz", "no block device 'sdz'"),
    ("/dev/notes.txt", "not present"),  # a regular file in /dev is no device node
    ("/dev/loop-a", "symbolic link loop"),
    ("/dev/escape", "leads outside /dev (/etc)"),  # a tree's link is never followed onto this machine
    ("", "is not a device name"),
    ("sda\0", "is not a device name"),
])
def test_what_is_no_device_is_refused_with_the_name_and_a_hint(t: Tunectl, ref: str, words: str) -> None:
    with pytest.raises(UsageError) as e:
        Resolver(t.ctx).whole_devices([ref])
    assert words in e.value.message and e.value.hint and e.value.where == ref, (e.value.message, e.value.hint)
    assert e.value.code == "unknown-device" and e.value.exit_code == ExitCode.USAGE


def test_a_link_through_a_directory_others_can_write_is_refused(t: Tunectl, dev: Path) -> None:
    shared = dev / "shared"
    shared.mkdir()
    os.symlink("../sda", shared / "disk")
    shared.chmod(0o1777)  # even with the sticky bit: what is in it may be another user's choice
    r = t("status", "-p", "default", "--json", "/dev/shared/disk")
    assert r.code == ExitCode.USAGE
    error = r.doc["error"]
    assert error["code"] == "untrusted-link" and error["where"] == "/dev/shared/disk"
    assert "/dev/shared: mode 1777: writable by others" in error["message"], error
    assert "name the device by its node under /dev" in error["hint"]
    # a node (not a link) in such a directory: a hard link another user made is no better
    (shared / "node").write_text("")
    os.rename(shared / "node", shared / "sda")
    found = Resolver(t.ctx).lookup("/dev/shared/sda")
    assert (found.name, found.code) == (None, "untrusted-link"), found
    assert "a device reached through a directory another user can change" in found.problem


def test_a_group_writable_directory_on_the_way_is_refused_too(t: Tunectl, dev: Path) -> None:
    (dev / "vg0").chmod(0o775)
    found = Resolver(t.ctx).lookup("/dev/vg0/data")
    assert (found.name, found.code) == (None, "untrusted-link")
    assert "/dev/vg0: mode 0775: writable by its group" in found.problem


def test_the_walk_reports_where_a_name_led(dev: Path) -> None:
    landed = devnode.follow("/dev/disk/by-id/../by-id/ata-HDD", str(dev))
    assert (landed.path, landed.untrusted) == ("/dev/sda", "")
    with pytest.raises(devnode.Refused) as e:
        devnode.follow("/dev/notes.txt/x", str(dev))
    assert "/dev/notes.txt is a regular file, not a directory" in e.value.message and not e.value.missing
    with pytest.raises(devnode.Refused) as e:
        devnode.follow("/dev/mapper/gone", str(dev))
    assert e.value.missing and "/dev/mapper/gone: no such file or device node" in e.value.message


def test_commands_read_names_the_same_way(t: Tunectl) -> None:
    for argv in (["plan", "-p", "default"], ["verify", "-p", "default"], ["status", "-p", "default"]):
        r = t(*argv, "--json", "/dev/../dev/vg0/data", "7:0", "/sys/block/sda/sda1")
        assert r.code in (0, 1), (argv, r.err)
        r = t(*argv, "/dev/shared-nowhere/x")
        assert r.code == ExitCode.USAGE and "no block device /dev/shared-nowhere/x" in r.err, (argv, r.err)


def test_a_file_swapped_for_a_device_between_two_looks_is_refused(t: Tunectl, dev: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench FILE`: the walk saw a regular file; if stat (which follows links) then finds a block device, whoever
    owns the file's directory swapped in a link to a disk between the looks: that disk is not the one named."""
    from tunectl.system import blockio

    target = str(dev / "notes.txt")
    monkeypatch.setattr(blockio, "inspect", lambda path: blockio.PathInfo(path, "block", "8:0", 0))
    with pytest.raises(UsageError) as e:
        Resolver(t.ctx).stack(target)
    assert e.value.code == "untrusted-link" and "changed while it was being looked up" in e.value.message
    monkeypatch.undo()
    try:  # unswapped, the same file is taken as a file (its filesystem's disk, or why none here)
        Resolver(t.ctx).stack(target)
    except UsageError as err:
        assert "changed while" not in err.message


def _swap_for_link(directory: Path, target: Path) -> None:
    """`directory` replaced by a link to `target`, as whoever owns the directory above it may do at any moment."""
    os.rename(directory, directory.with_name(directory.name + ".old"))
    os.symlink(target, directory)


def test_a_directory_swapped_for_a_link_between_two_steps_of_the_walk_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk looks at each component, then goes on from it: a directory replaced by a link between the look and
    the next step is refused as changed, never followed (a step taken by name would go where the link leads)."""
    mine, elsewhere = tmp_path / "mine", tmp_path / "elsewhere"
    for d in (mine, elsewhere):
        d.mkdir()
        (d / "f").write_text("")
    looks = {"stat": os.stat, "lstat": os.lstat}
    swapped: list[bool] = []

    def look_then_swap(kind: str):
        def look(path, *args, **kwargs):
            st = looks[kind](path, *args, **kwargs)
            if os.fspath(path) in ("mine", str(mine)) and not swapped:
                swapped.append(True)
                _swap_for_link(mine, elsewhere)  # just after the walk saw a directory there
            return st
        return look

    monkeypatch.setattr(os, "stat", look_then_swap("stat"))
    monkeypatch.setattr(os, "lstat", look_then_swap("lstat"))
    with pytest.raises(devnode.Refused) as e:
        devnode.follow(str(mine / "f"), "/dev")
    assert e.value.code == "untrusted-link", e.value.message
    assert f"{mine}: changed while tunectl looked at it" in e.value.message, e.value.message


@pytest.fixture
def live(t: Tunectl, fake_tree: FakeTree, tmp_path: Path) -> Tunectl:
    """`t` as on a live machine: paths walked on this one, mounts from a /proc whose mountinfo has / on sda1 and
    `tmp_path`/other on nvme0n1p1 (another filesystem's disk)."""
    from tests.fakesys import mountinfo_line

    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("\n".join([
        mountinfo_line(fake_tree, 20, "sda1", "/", "ext4", "/dev/sda1"),
        mountinfo_line(fake_tree, 21, "nvme0n1p1", str(tmp_path / "other"), "ext4", "/dev/nvme0n1p1")]) + "\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "f").write_text("")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "f").write_text("")
    t.ctx.roots = t.ctx.roots._replace(real=True, dev="/dev", proc=str(proc))
    return t


def test_a_path_swapped_after_its_walk_is_taken_where_the_walk_found_it(
        live: Tunectl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path argument (the disks under its filesystem): its mount is found from where the walk led, never by
    resolving the name again, which whoever owns a directory on the way could by then have pointed at another
    filesystem (a link swapped in between the two: root would tune that filesystem's disks)."""
    theirs = tmp_path / "theirs"
    assert Resolver(live.ctx).whole_devices([str(theirs)]) == ["sda"]
    looked_up = Resolver.lookup

    def lookup_then_swap(self: Resolver, ref: str):
        found = looked_up(self, ref)
        _swap_for_link(theirs, tmp_path / "other")  # between the walk and the look for its mount
        return found

    monkeypatch.setattr(Resolver, "lookup", lookup_then_swap)
    assert Resolver(live.ctx).whole_devices([str(theirs)]) == ["sda"]
    monkeypatch.undo()
    assert Resolver(live.ctx).whole_devices([str(theirs)]) == ["nvme0n1"]  # named now, the link is root's own


def test_a_file_swapped_for_another_files_link_after_its_walk_is_refused(
        live: Tunectl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench FILE`: the file stat finds (following links) is compared with the one the walk saw; another file, on
    another filesystem, swapped in between the two is refused as changed, not benched on its disk."""
    from tunectl.system import blockio

    target = tmp_path / "theirs" / "f"
    inspected = blockio.inspect

    def swap_then_inspect(path: str) -> blockio.PathInfo:
        target.unlink()
        os.symlink(tmp_path / "other" / "f", target)
        return inspected(path)

    monkeypatch.setattr(blockio, "inspect", swap_then_inspect)
    with pytest.raises(UsageError) as e:
        Resolver(live.ctx).stack(str(target))
    assert e.value.code == "untrusted-link" and "changed while it was being looked up (now another file)" in \
        e.value.message, e.value.message


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_a_directory_argument_through_another_users_link_is_refused(live: Tunectl, tmp_path: Path) -> None:
    """`explain DIR` (the stack of a directory's filesystem) walks DIR as a FILE argument is walked: another user's
    link on it is refused, not followed to the filesystem it leads to (before, it was looked up by name)."""
    theirs = tmp_path / "by-nobody"
    theirs.symlink_to(tmp_path / "other")
    os.lchown(theirs, 65534, 65534)
    with pytest.raises(UsageError) as e:
        Resolver(live.ctx).filesystem_stack(str(theirs))
    assert e.value.code == "untrusted-link" and f"{theirs}: a symbolic link owned by nobody" in e.value.message, \
        e.value.message


def test_a_directory_swapped_after_its_walk_is_taken_where_the_walk_found_it(
        live: Tunectl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`explain DIR`: the mount of a directory's filesystem is the one the walk reached, never the name looked up
    again after a link was swapped in on the way (to a directory on another filesystem)."""
    theirs = tmp_path / "theirs"

    def swap_then_name(self: Resolver, devnum: str) -> str:  # a fake tree has no real st_dev: / is on sda1
        if not theirs.is_symlink():
            _swap_for_link(theirs, tmp_path / "other")  # once the directory's device was found, before its mount
        return "sda1"

    monkeypatch.setattr(Resolver, "name_of_devnum", swap_then_name)
    stack = Resolver(live.ctx).filesystem_stack(str(theirs))
    assert stack.mount is not None and stack.mount.target == "/", stack.layers
