"""Issue #34: paths root is given that nobody can make point elsewhere (or exist later); reads that never block."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness import CliResult
from tests.harness import run_cli as run_in_process
from tests.root.system import test_trust_attacks as attacks
from tests.root.system.test_trust_attacks import Arena, as_nobody, run_cli
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
        r = run_in_process("udev", "install", "-p", str(profile), "--rules-dir", str(rules), *allow, context=ctx)
        assert r.code == 2 and f"tunectl executable {exe}: does not exist" in r.err, r.err
        assert os.listdir(rules) == []


FSTAB = "tmpfs /srv/tunectl-x tmpfs defaults 0 0\n"
NOATIME = "name: noatime\nmounts:\n  - match: {fstype: tmpfs}\n    options: [noatime]\n"


def mounts(arena: Arena, *argv: str) -> CliResult:
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
        assert done.code == 2 and "symbolic link owned by nobody" in done.err, (argv, done.err)
        assert (etc / "fstab").read_text() == FSTAB and sorted(os.listdir(etc)) == before
        assert sorted(os.listdir(arena.open)) == ["fstab"]
    (arena.base / "mine").symlink_to(etc / "fstab")  # root's own link is followed: the file behind it is fixed
    done = mounts(arena, "fix", "-p", str(profile), "--fstab", str(arena.base / "mine"))
    assert done.code == 0, done.err
    assert "noatime" in (etc / "fstab").read_text() and (etc / "fstab.tunectl.orig").read_text() == FSTAB


def test_an_fstab_that_is_a_named_pipe_blocks_nothing(arena: Arena) -> None:
    """The FIFO cases in a process of their own: one that blocks fails the test at the timeout. A pipe nobody put
    in their own directory: fix and rollback refuse that directory before they open anything in it (what they keep
    beside the fstab would be nobody's), check (which writes nothing) reaches the pipe and names it. A pipe in
    root's directory (root's fstab, with its original kept, swapped for one) is named as such by all three."""
    profile = arena.base / "noatime.yaml"
    profile.write_text(NOATIME)
    fifo = arena.open / "fstab"
    as_nobody("mkfifo", str(fifo))
    for argv in (("fix", "-p", str(profile)), ("rollback",)):
        done = mounts(arena, *argv, "--fstab", str(fifo))
        assert done.code == 2 and f"cannot write {fifo}: {arena.open}: owned by nobody" in done.err, (argv, done.err)
        assert "fix a copy in a directory of your own" in done.err and "named pipe" not in done.err, done.err
    done = mounts(arena, "check", "-p", str(profile), "--fstab", str(fifo))
    assert done.code == 2 and f"{fifo} is a named pipe" in done.err, done.err
    assert sorted(os.listdir(arena.open)) == ["fstab"]
    mine = arena.base / "fstab"
    mine.write_text(FSTAB)
    assert mounts(arena, "fix", "-p", str(profile), "--fstab", str(mine)).code == 0
    mine.unlink()
    os.mkfifo(mine)
    for argv in (("fix", "-p", str(profile)), ("rollback",), ("check", "-p", str(profile))):
        done = mounts(arena, *argv, "--fstab", str(mine))
        assert done.code in (2, 3) and "named pipe" in done.err, (argv, done.err)
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
        assert run_in_process("apply", "-p", "throughput-performance", context=ctx).code == 0
        assert attr.read_text() != before
        subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", f"cat /dev/zero > {mnt / 'tmp' / 'fill'}"],
                       check=False, capture_output=True, timeout=60)  # until the disk is full
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(mnt / "state"), [shipped_profile_dir()], {})
        r = run_in_process("rollback", context=ctx)
        assert r.code == 5 and "The devices were restored (1 changed: sda)" in r.err, r.err
        assert attr.read_text() == before
        (mnt / "tmp" / "fill").unlink()
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(mnt / "state"), [shipped_profile_dir()], {})
        assert run_in_process("rollback", context=ctx).code == 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_mounts_fix_copies_owner_and_mode_from_the_fstab_it_read_not_a_file_put_there_since(
        arena: Arena, monkeypatch: pytest.MonkeyPatch) -> None:
    """--fstab in a directory nobody owns is refused (exit 2), nothing written there: the original and backups
    kept beside it would be nobody's to read or swap. In root's directory: after the fix read root's fstab, another
    writer puts a file of nobody's (the same text, mode 0666) at its name. The original, the backup and the new
    fstab take the owner and mode of the file that was read (root's, 0644), never the swapped-in one's: a second
    open by name copied nobody's, and root then left an fstab (and its kept copies) that nobody may rewrite."""
    from tunectl.mounts import fstab_file

    profile = arena.base / "noatime.yaml"
    profile.write_text(NOATIME)
    theirs = arena.open / "fstab"
    theirs.write_text(FSTAB)
    os.chmod(theirs, 0o644)
    code, _, err = attacks.tunectl(arena, arena.base / "state", "mounts", "fix", "-p", str(profile), "--fstab",
                                   str(theirs))
    assert code == 2 and f"cannot write {theirs}: {arena.open}: owned by nobody" in err, err
    assert f"chown root: {arena.open}" in err and "fix a copy in a directory of your own" in err, err
    assert sorted(os.listdir(arena.open)) == ["fstab"] and theirs.read_text() == FSTAB

    etc = arena.base / "etc"
    etc.mkdir(mode=0o755)
    fstab = etc / "fstab"
    fstab.write_text(FSTAB)
    os.chmod(fstab, 0o644)
    numbered = fstab_file.next_backup

    def then_swap(real: Path) -> Path:
        swapped = etc / "swapped"
        swapped.write_text(fstab.read_text())
        os.chown(swapped, attacks.NOBODY.pw_uid, attacks.NOBODY.pw_gid)
        os.chmod(swapped, 0o666)
        os.rename(swapped, fstab)
        return numbered(real)

    monkeypatch.setattr(fstab_file, "next_backup", then_swap)
    code, _, err = attacks.tunectl(arena, arena.base / "state", "mounts", "fix", "-p", str(profile), "--fstab",
                                   str(fstab))
    assert code == 0, err
    assert "noatime" in fstab.read_text()
    for kept in (fstab, etc / "fstab.tunectl.orig", etc / "fstab.tunectl.bak.1"):
        st = os.stat(kept)
        assert (st.st_uid, oct(st.st_mode & 0o7777)) == (0, "0o644"), kept
