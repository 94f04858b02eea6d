"""fstab over a machine's life (#21): two fixes, another writer, a killed fix, a rollback.

The original is kept for good (FSTAB.tunectl.orig), each fix leaves a numbered
backup, an edit by another writer while a fix runs is never lost, and no temp
file outlives the next run. findmnt (libmount) is the real one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.harness import REPO, run_cli
from tunectl.context import Context
from tunectl.mounts import operations
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore

FSTAB = "# static file system information\ntmpfs /tmp tmpfs mode=1777 0 0\ntmpfs /run/x tmpfs size=1m 0 0\n"
NOATIME = "name: noatime\nmounts:\n  - match: {fstype: tmpfs}\n    options: [noatime]\n"
NOSUID = "name: nosuid\nmounts:\n  - match: {fstype: tmpfs}\n    options: [noatime, nosuid]\n"


class Machine:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.tree = FakeTree.create(base)
        (base / "proc" / "self").mkdir(parents=True)
        (base / "proc" / "self" / "mountinfo").write_text("")
        self.fstab = base / "etc" / "fstab"
        self.fstab.parent.mkdir()
        self.fstab.write_text(FSTAB)
        for name, text in (("noatime", NOATIME), ("nosuid", NOSUID)):
            (base / f"{name}.yaml").write_text(text)
        self.env = {"TUNECTL_PROC_ROOT": str(base / "proc"), "TUNECTL_FSTAB": str(self.fstab)}
        self.ctx = Context(self.tree.sysfs, self.tree.udev, StateStore(base / "state"), [shipped_profile_dir()],
                           self.env)

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        r = run_cli(*argv, context=self.ctx)
        return r.code, r.out, r.err

    def fix(self, profile: str) -> tuple[int, str, str]:
        return self("mounts", "fix", "-p", str(self.base / f"{profile}.yaml"))

    def leftovers(self) -> list[str]:
        return sorted(e for e in os.listdir(self.fstab.parent) if e.startswith(".fstab"))


@pytest.fixture
def m(fake_root: Path) -> Machine:
    return Machine(fake_root)


def test_two_fixes_keep_the_first_original_and_number_their_backups(m: Machine) -> None:
    assert m.fix("noatime")[0] == 0
    after_first = m.fstab.read_bytes()
    assert b"mode=1777,noatime" in after_first
    code, out, _ = m.fix("nosuid")
    assert code == 0 and "backup" in out and "fstab.tunectl.bak.2" in out
    etc = m.fstab.parent
    assert (etc / "fstab.tunectl.orig").read_text() == FSTAB
    assert (etc / "fstab.tunectl.bak.1").read_text() == FSTAB
    assert (etc / "fstab.tunectl.bak.2").read_bytes() == after_first
    assert m.leftovers() == []
    code, out, _ = m("mounts", "rollback")
    assert code == 0 and "restored from" in out and m.fstab.read_text() == FSTAB
    assert (etc / "fstab.tunectl.orig").read_text() == FSTAB  # never overwritten
    assert (etc / "fstab.tunectl.bak.3").exists()  # the replaced file is kept too
    assert "already is the original" in m("mounts", "rollback")[1]


def test_an_edit_by_another_writer_during_a_fix_is_never_lost(m: Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = operations.libmount_agrees
    added = "tmpfs /added tmpfs size=2m 0 0\n"

    def meanwhile(*args) -> None:  # libmount checks the new file; another writer appends in that very moment
        real(*args)
        with open(m.fstab, "a") as f:
            f.write(added)

    monkeypatch.setattr(operations, "libmount_agrees", meanwhile)
    code, _, err = m.fix("noatime")
    assert code == 3 and "changed by another writer" in err
    assert m.fstab.read_text() == FSTAB + added  # their line stays, ours was not written
    assert m.leftovers() == []
    monkeypatch.setattr(operations, "libmount_agrees", real)
    assert m.fix("noatime")[0] == 0  # the next run starts from the file as it is now
    assert "tmpfs /added tmpfs size=2m,noatime 0 0\n" in m.fstab.read_text()
    assert "mode=1777,noatime" in m.fstab.read_text()
    assert (m.fstab.parent / "fstab.tunectl.orig").read_text() == FSTAB


def test_a_change_between_read_and_write_stops_the_fix(m: Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    from tunectl.mounts import fstab_file

    real = fstab_file.next_backup
    added = "tmpfs /early tmpfs size=3m 0 0\n"

    def early(path: Path) -> Path:  # the other writer lands after the read, before any backup
        with open(m.fstab, "a") as f:
            f.write(added)
        return real(path)

    monkeypatch.setattr(fstab_file, "next_backup", early)
    code, _, err = m.fix("noatime")
    assert code == 3 and "changed by another writer" in err and m.fstab.read_text() == FSTAB + added
    assert m.leftovers() == []


def test_a_killed_fix_leaves_the_fstab_whole_and_the_next_run_sweeps(m: Machine, tmp_path: Path) -> None:
    """SIGKILL while libmount reads the temp file (a findmnt that waits there): the next fix removes it."""
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    marker = tmp_path / "reached"
    real = shutil.which("findmnt")
    assert real is not None
    (bindir / "findmnt").write_text(
        "#!/bin/sh\ncase \"$*\" in *--tab-file*) : > " + str(marker) + "; exec sleep 600;; esac\n"
        f'exec {real} "$@"\n')
    (bindir / "findmnt").chmod(0o755)
    env = {**os.environ, **m.env, "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "TUNECTL_SYSFS_ROOT": str(m.tree.root), "TUNECTL_UDEV_ROOT": str(m.tree.udev_root),
           "TUNECTL_STATE_DIR": str(m.base / "state"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "tunectl", "mounts", "fix", "-p", str(m.base / "noatime.yaml")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the fix never reached libmount's check of the temp file"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any("tunectl-tmp" in e for e in m.leftovers())  # what a kill leaves
    assert m.fstab.read_text() == FSTAB  # never half a file
    assert (m.fstab.parent / "fstab.tunectl.orig").read_text() == FSTAB
    code, _, err = m.fix("noatime")
    assert code == 0 and "left by a tunectl run that was killed" in err
    assert m.leftovers() == [] and "noatime" in m.fstab.read_text()
    assert m("mounts", "rollback")[0] == 0 and m.fstab.read_text() == FSTAB


@pytest.mark.parametrize("command", [("mounts", "fix", "-p"), ("mounts", "rollback")])
def test_the_sweep_removes_only_tunectls_own_temp_files(m: Machine, tmp_path: Path, command: tuple) -> None:
    """Its name pattern, a regular file the caller owns, no link (the same sweep as bench's --csv/--plot)."""
    assert m.fix("noatime")[0] == 0
    etc = m.fstab.parent
    (etc / ".fstab.tunectl-tmp.0123456789ab").write_text("a killed fix's")
    (tmp_path / "target").write_text("not tunectl's")
    (etc / ".fstab.tunectl-tmp.aaaaaaaaaaaa").symlink_to(tmp_path / "target")
    (etc / ".fstab.tunectl-tmp.0123456789abcd").write_text("another pattern")
    kept = [".fstab.tunectl-tmp.0123456789abcd", ".fstab.tunectl-tmp.aaaaaaaaaaaa"]
    if os.geteuid() == 0:
        (etc / ".fstab.tunectl-tmp.bbbbbbbbbbbb").write_text("another user's")
        os.chown(etc / ".fstab.tunectl-tmp.bbbbbbbbbbbb", 65534, 65534)
        kept.append(".fstab.tunectl-tmp.bbbbbbbbbbbb")
    argv = command + ((str(m.base / "nosuid.yaml"),) if command[1] == "fix" else ())
    assert m(*argv)[0] == 0
    assert m.leftovers() == sorted(kept) and (tmp_path / "target").read_text() == "not tunectl's"


def test_rollback_check_writes_nothing(m: Machine) -> None:
    """`mounts rollback --check` only reads: a killed fix's temp file stays for the next real run to sweep, and no
    state directory is made for a lock it does not need (it swept, and took the lock, as rollback does)."""
    assert m.fix("noatime")[0] == 0
    shutil.rmtree(m.base / "state")
    (m.fstab.parent / ".fstab.tunectl-tmp.0123456789ab").write_text("a killed fix's")
    before = m.fstab.read_bytes()
    code, out, err = m("mounts", "rollback", "--check")
    assert code == 0, err
    assert m.leftovers() == [".fstab.tunectl-tmp.0123456789ab"], m.leftovers()
    assert m.fstab.read_bytes() == before and not (m.base / "state").exists()


def test_rollback_without_an_original_says_so(m: Machine) -> None:
    code, _, err = m("mounts", "rollback")
    assert code == 2 and "tunectl never changed it" in err


def test_an_original_or_backup_that_is_a_symlink_is_never_followed(m: Machine, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("# not an fstab\n")
    orig = m.fstab.with_name("fstab.tunectl.orig")
    orig.symlink_to(elsewhere)
    code, _, err = m.fix("noatime")
    assert code == 3 and "is a symbolic link" in err, err
    assert m.fstab.read_text() == FSTAB and elsewhere.read_text() == "# not an fstab\n"
    code, _, err = m("mounts", "rollback")
    assert code == 3 and "is a symbolic link" in err and m.fstab.read_text() == FSTAB
    orig.unlink()
    assert m.fix("noatime")[0] == 0
    orig.rename(m.fstab.with_name("moved"))
    orig.symlink_to(m.fstab.with_name("moved"))  # the real original, but reached through a link: still refused
    code, _, err = m("mounts", "rollback")
    assert code == 3 and "is a symbolic link" in err and "noatime" in m.fstab.read_text()


def test_libmount_checks_the_bytes_tunectl_wrote_not_what_a_name_in_the_directory_holds_meanwhile(
        m: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fstab in a directory another user owns (`--fstab` is any file): findmnt was handed the temp file and the
    fstab by name, so that user could swap the temp for a link to a file root alone reads while libmount read it,
    and root printed its first field in "reads untouched line 2 differently". libmount now reads tunectl's
    own copies of the old and new bytes."""
    secret = tmp_path / "secret"
    secret.write_text(FSTAB.replace("tmpfs /tmp", "s3cr3t-source /tmp"))
    secret.chmod(0o600)
    real = operations._findmnt
    seen: list[str] = []

    def swapping(*args):  # the other user's loop, at the moment libmount reads
        for name in os.listdir(m.fstab.parent):
            if "tunectl-tmp" in name:
                os.replace(m.fstab.parent / name, m.fstab.parent / (name + ".moved"))
                os.symlink(secret, m.fstab.parent / name)
        found = real(*args)
        seen.append(repr(found))
        return found

    monkeypatch.setattr(operations, "_findmnt", swapping)
    code, out, err = m.fix("noatime")
    assert seen and not any("s3cr3t" in s for s in seen) and "s3cr3t" not in out + err
    assert code == 0, err


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_an_fstab_directory_swapped_for_a_link_after_the_look_is_refused_not_read_through(
        m: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resolve() judged the path's links, then the fstab was opened by name, following any link on the way: a
    directory another user swapped for a link to a root-only one in between had root check (and print) that
    directory's fstab. The file is now opened through no link."""
    from tunectl.mounts import fstab_file

    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    (hidden / "fstab").write_text("s3cr3t-source /x ext4 defaults 0 0\n")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    (theirs / "d").mkdir()
    (theirs / "d" / "fstab").write_text(FSTAB)
    real_resolve = fstab_file.resolve

    def then_swapped(path):  # the other user's loop, right after the look
        found = real_resolve(path)
        if (theirs / "d").is_dir() and not (theirs / "d").is_symlink():
            os.rename(theirs / "d", theirs / "d.real")
            os.symlink(hidden, theirs / "d")
            os.lchown(theirs / "d", 65534, 65534)
        return found

    monkeypatch.setattr(fstab_file, "resolve", then_swapped)
    for argv in (["check"], ["fix"]):
        code, out, err = m("mounts", *argv, "-p", str(m.base / "noatime.yaml"), "--fstab", str(theirs / "d" / "fstab"))
        assert "s3cr3t" not in out + err and code == 2, (argv, out, err)
        # check reads right after its one look; fix looks again (the sweep, then the read) and meets the link
        assert ("changed while tunectl looked at it" if argv == ["check"] else "owned by nobody") in err, err
        (theirs / "d").unlink()
        os.rename(theirs / "d.real", theirs / "d")
    assert (hidden / "fstab").read_text().startswith("s3cr3t") and sorted(os.listdir(hidden)) == ["fstab"]


def _theirs_with_root_only_beside(tmp_path: Path) -> tuple[Path, Path]:
    """A directory a user owns (`--fstab` is any file) holding d/fstab, and a root-only directory holding an
    original (a 0600 fstab with a password) and a temp file of tunectl's own name."""
    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    (hidden / "fstab.tunectl.orig").write_text("//srv/x /x cifs password=s3cr3t 0 0\n")
    (hidden / "fstab.tunectl.orig").chmod(0o600)
    (hidden / ".fstab.tunectl-tmp.0123456789ab").write_text("root's\n")
    theirs = tmp_path / "theirs"
    (theirs / "d").mkdir(parents=True)
    (theirs / "d" / "fstab").write_text(FSTAB)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
        os.chown(theirs / "d", 65534, 65534)
        os.chown(theirs / "d" / "fstab", 65534, 65534)
    return theirs, hidden


def _swap(theirs: Path, hidden: Path, to_link: bool) -> None:
    """The user's loop of renames: d becomes a link to the root-only directory, or itself again."""
    d = theirs / "d"
    if to_link and not d.is_symlink():
        os.rename(d, theirs / "d.real")
        os.symlink(hidden, d)
        if os.geteuid() == 0:
            os.lchown(d, 65534, 65534)
    elif not to_link and d.is_symlink():
        d.unlink()
        os.rename(theirs / "d.real", d)


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_the_sweep_after_the_look_never_removes_through_a_directory_swapped_for_a_link(
        m: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep listed and removed temp files by name, through the path again: a directory on the way swapped for
    a link after resolve() looked had root remove a file of tunectl's temp name in the directory it pointed at."""
    from tunectl.mounts import fstab_file

    theirs, hidden = _theirs_with_root_only_beside(tmp_path)
    real_resolve = fstab_file.resolve

    def then_swapped(path):
        found = real_resolve(path)
        _swap(theirs, hidden, True)
        return found

    monkeypatch.setattr(fstab_file, "resolve", then_swapped)
    m("mounts", "rollback", "--fstab", str(theirs / "d" / "fstab"))
    assert (hidden / ".fstab.tunectl-tmp.0123456789ab").read_text() == "root's\n"


def test_a_rollback_never_reads_an_original_through_a_directory_swapped_for_a_link(
        m: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """restore_original opened FSTAB.tunectl.orig by name (O_NOFOLLOW on its last part only): a directory swapped
    for a link to a root-only one after resolve() looked, and back before the fstab was read again, had root
    "restore" that directory's original into the user's fstab, owned by the user: a root-only file disclosed."""
    from tunectl.mounts import fstab_file

    theirs, hidden = _theirs_with_root_only_beside(tmp_path)
    real_resolve, real_current = fstab_file.resolve, fstab_file.read_current

    def then_swapped(path):
        found = real_resolve(path)
        _swap(theirs, hidden, True)
        return found

    def swapped_back(real):
        _swap(theirs, hidden, False)
        return real_current(real)

    monkeypatch.setattr(fstab_file, "resolve", then_swapped)
    monkeypatch.setattr(fstab_file, "read_current", swapped_back)
    with pytest.raises(fstab_file.NotReplaced, match="changed while tunectl looked at it"):
        fstab_file.restore_original(theirs / "d" / "fstab")
    _swap(theirs, hidden, False)
    assert sorted(os.listdir(theirs / "d")) == ["fstab"] and (theirs / "d" / "fstab").read_text() == FSTAB


@pytest.mark.parametrize("grown", ["fstab", "fstab.tunectl.orig"])
def test_a_rollback_never_takes_the_first_bytes_of_a_file_past_the_cap_as_the_whole(
        m: Machine, monkeypatch: pytest.MonkeyPatch, grown: str) -> None:
    """The reads stop a byte past the cap: an fstab grown past it was kept as a backup of its first bytes only
    ("the file it replaced is kept as" a cut copy), an original past it was restored cut."""
    from tunectl.mounts import fstab_file

    assert m.fix("noatime")[0] == 0
    path = m.fstab.with_name(grown)
    path.write_text(path.read_text() + "".join(f"tmpfs /mnt/{i} tmpfs defaults 0 0\n" for i in range(40)))
    before = {p.name: p.read_bytes() for p in m.fstab.parent.iterdir()}
    monkeypatch.setattr(fstab_file, "MAX_FSTAB_BYTES", 512)
    code, _, err = m("mounts", "rollback")
    assert code == 3 and f"{path} is larger than 512 bytes" in err and "nothing was replaced" in err, err
    assert {p.name: p.read_bytes() for p in m.fstab.parent.iterdir()} == before


@pytest.mark.parametrize("whose", ["group-writable", "another user's"])
def test_fix_refuses_an_fstab_in_a_directory_others_can_write_as_udev_install_does(m: Machine, tmp_path: Path,
                                                                                    whose: str) -> None:
    """fix (and rollback) write FSTAB.tunectl.orig and .bak.N beside the fstab: in another user's directory (or
    one others may write) those copies were that user's to read or swap. Refused as `udev install --rules-dir`
    refuses such a directory (exit 2, what to do), before anything is written."""
    if whose == "another user's" and os.geteuid() != 0:
        pytest.skip("a directory another user owns is made with chown (root)")
    d = tmp_path / "theirs"
    d.mkdir()
    fstab = d / "fstab"
    fstab.write_text(FSTAB)
    if whose == "group-writable":
        d.chmod(0o775)
    else:
        os.chown(d, 65534, 65534)
    why = "writable by its group" if whose == "group-writable" else "owned by nobody"
    for verb in (["fix", "-p", str(m.base / "noatime.yaml")], ["rollback"]):
        code, out, err = m("mounts", *verb, "--fstab", str(fstab))
        assert code == 2 and f"cannot write {fstab}: {d}: " in err and why in err, (verb, out, err)
        # its own plain hint: the shared "..., or move it aside" read oddly of the fstab's own directory
        assert f"hint: make it root's and not group/world-writable (chown root: {d}; chmod go-w {d}), fix a copy in " \
               "a directory of your own, or run as that directory's owner\n" in err, err
        assert "aside" not in err, err
        assert sorted(os.listdir(d)) == ["fstab"] and fstab.read_text() == FSTAB
    code, _, err = m("mounts", "fix", "-p", str(m.base / "noatime.yaml"), "--fstab", str(fstab), "--check")
    assert code == 0, err  # --check writes nothing: nothing to refuse
