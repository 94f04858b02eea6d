"""Issue #34: paths root is given that nobody can make point elsewhere (or exist later); reads that never block."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from tests.root.system import test_trust_attacks as attacks
from tests.root.system.test_trust_attacks import Arena, as_nobody, run_cli
from tunectl.cli import main
from tunectl.context import Context
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore

pytestmark = pytest.mark.root

arena = attacks.arena


def test_udev_install_refuses_a_tunectl_executable_that_does_not_exist_yet(arena: Arena) -> None:
    state, rules = arena.base / "state", arena.base / "rules"
    rules.mkdir()
    profile = arena.base / "below.yaml"  # root's: its below: settings make the rules RUN tunectl
    profile.write_text("name: below\nclasses:\n  dm:\n    below: {read_ahead_kb: 4096}\n")
    later = arena.open / "bin" / "tunectl"  # nobody may create it whenever they like
    for exe, allow in ((later, []), (later, ["--allow-untrusted-profile"]), (Path("/nonexistent/tunectl"), [])):
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                      {"TUNECTL_EXECUTABLE": str(exe)})
        err = io.StringIO()
        code = main(["udev", "install", "-p", str(profile), "--rules-dir", str(rules), *allow], stdout=io.StringIO(),
                    stderr=err, context=ctx)
        assert code == 2 and f"tunectl executable {exe}: does not exist" in err.getvalue(), err.getvalue()
        assert os.listdir(rules) == []


FSTAB = "tmpfs /srv/tunectl-x tmpfs defaults 0 0\n"
NOATIME = "name: noatime\nmounts:\n  - match: {fstype: tmpfs}\n    options: [noatime]\n"


def mounts(arena: Arena, *argv: str) -> subprocess.CompletedProcess:
    return run_cli("--state-dir", str(arena.base / "state"), "mounts", *argv, timeout=30)


def test_mounts_fix_follows_no_link_another_user_owns(arena: Arena) -> None:
    etc = arena.base / "etc"
    etc.mkdir()
    (etc / "fstab").write_text(FSTAB)
    profile = arena.base / "noatime.yaml"
    profile.write_text(NOATIME)
    as_nobody("ln", "-s", str(etc / "fstab"), str(arena.open / "fstab"))
    before = sorted(os.listdir(etc))
    for argv in (("fix", "-p", str(profile), "--fstab", str(arena.open / "fstab")),
                 ("rollback", "--fstab", str(arena.open / "fstab"))):
        done = mounts(arena, *argv)
        assert done.returncode == 2 and "symbolic link owned by nobody" in done.stderr, (argv, done.stderr)
        assert (etc / "fstab").read_text() == FSTAB and sorted(os.listdir(etc)) == before
        assert sorted(os.listdir(arena.open)) == ["fstab"]
    (arena.base / "mine").symlink_to(etc / "fstab")  # root's own link is followed: the file behind it is fixed
    done = mounts(arena, "fix", "-p", str(profile), "--fstab", str(arena.base / "mine"))
    assert done.returncode == 0, done.stderr
    assert "noatime" in (etc / "fstab").read_text() and (etc / "fstab.tunectl.orig").read_text() == FSTAB


def test_an_fstab_that_is_a_named_pipe_blocks_nothing(arena: Arena) -> None:
    """The FIFO cases in a process of their own: one that blocks fails the test at the timeout."""
    profile = arena.base / "noatime.yaml"
    profile.write_text(NOATIME)
    fifo = arena.open / "fstab"
    as_nobody("mkfifo", str(fifo))
    (arena.base / "fstab").write_text(FSTAB)  # root's fstab with an original kept, then swapped for a pipe
    assert mounts(arena, "fix", "-p", str(profile), "--fstab", str(arena.base / "fstab")).returncode == 0
    for argv, path in ((("fix", "-p", str(profile)), fifo), (("rollback",), fifo), (("check", "-p", str(profile)), fifo),
                       (("rollback",), arena.base / "fstab")):
        if path == arena.base / "fstab":
            (arena.base / "fstab").unlink()
            os.mkfifo(arena.base / "fstab")
        done = mounts(arena, *argv, "--fstab", str(path))
        said = "named pipe" in done.stderr or (path == fifo and "no original" in done.stderr)  # nothing to restore
        assert done.returncode in (2, 3) and said, (argv, path, done.stderr)
    assert (arena.base / "fstab.tunectl.orig").read_text() == FSTAB


def test_rollback_on_a_state_disk_nobody_filled_says_the_devices_were_restored(arena: Arena) -> None:
    mnt = arena.base / "var"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        (mnt / "tmp").mkdir(mode=0o1777)
        os.chmod(mnt / "tmp", 0o1777)
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(mnt / "state"), [shipped_profile_dir()], {})
        attr = arena.tree.root / "block" / "sda" / "queue" / "read_ahead_kb"
        before = attr.read_text()
        assert main(["apply", "-p", "throughput-performance"], stdout=io.StringIO(), stderr=io.StringIO(),
                    context=ctx) == 0
        assert attr.read_text() != before
        subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", f"cat /dev/zero > {mnt / 'tmp' / 'fill'}"],
                       check=False, capture_output=True, timeout=60)  # until the disk is full
        err = io.StringIO()
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(mnt / "state"), [shipped_profile_dir()], {})
        code = main(["rollback"], stdout=io.StringIO(), stderr=err, context=ctx)
        assert code == 5 and "The devices were restored (1 changed: sda)" in err.getvalue(), err.getvalue()
        assert attr.read_text() == before
        (mnt / "tmp" / "fill").unlink()
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(mnt / "state"), [shipped_profile_dir()], {})
        assert main(["rollback"], stdout=io.StringIO(), stderr=io.StringIO(), context=ctx) == 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
