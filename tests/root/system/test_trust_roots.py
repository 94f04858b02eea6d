"""Issue #34: fake roots (--sysfs-root, --udev-root, TUNECTL_*_ROOT) another user controls; root runs tunectl.

The user nobody builds or changes the tree; root runs the CLI in a process of its
own. Each test fails when root prints the secret, changes the victim, writes the
real state directory or remounts a real filesystem.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.harness import REPO, run_process
from tests.root.system import test_trust_attacks as attacks
from tests.root.system.test_trust_attacks import SECRET, Arena, as_nobody, run_cli
from tunectl.system.roots import STATE

pytestmark = pytest.mark.root

THROUGHPUT = "throughput-performance"
arena = attacks.arena  # the same arena: root's base, nobody's directory, a victim and a secret


def chown_nobody(path: Path) -> None:
    subprocess.run(["chown", "-R", "nobody:", str(path)], check=True)


def nobody_tree(arena: Arena) -> FakeTree:
    """A fake machine with one disk, wholly nobody's."""
    tree = FakeTree.create(arena.open / "t")
    tree.add_disk("sdb", wwn="0x5000000000000002")
    chown_nobody(arena.open / "t")
    return tree


def real_state_snapshot() -> dict[str, str]:
    """The real state directory's files and their hashes: a fake-root run must leave them as they are."""
    if not os.path.isdir(STATE):
        return {}
    seen = {}
    for root, _, names in os.walk(STATE):
        for name in names:
            path = Path(root, name)
            seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "?"
    return seen


def test_a_tree_another_user_owns_is_refused_before_anything_in_it_is_read(arena: Arena) -> None:
    tree = nobody_tree(arena)
    attr = tree.devdir("sdb") / "queue" / "read_ahead_kb"
    as_nobody("rm", str(attr))
    as_nobody("ln", "-s", str(arena.secret), str(attr))
    roots = ["--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root)]
    state = ["--state-dir", str(arena.base / "state")]
    for argv in (["status"], ["apply", "-p", THROUGHPUT], ["status", "--json"]):
        done = run_cli(*roots, *state, *argv)
        assert done.code == 2, done.out + done.err
        assert f"the root {tree.root} (--sysfs-root / TUNECTL_SYSFS_ROOT) cannot be trusted" in done.err + \
            done.out and "owned by nobody" in done.err + done.out
        assert "s3cr3t" not in done.out + done.err
    assert arena.secret.read_text() == SECRET
    # the environment variables are the same roots
    for var, path in (("TUNECTL_SYSFS_ROOT", tree.root), ("TUNECTL_UDEV_ROOT", tree.udev_root),
                      ("TUNECTL_PROC_ROOT", arena.open), ("TUNECTL_DEV_ROOT", arena.open),
                      ("TUNECTL_MODULES_ROOT", arena.open), ("TUNECTL_CONFIG_ROOT", arena.open)):
        done = run_process(*state, "status", env=dict(os.environ, **{var: str(path)}), timeout=60)
        assert done.code == 2 and "cannot be trusted" in done.err and var in done.err, (var, done.err)
        assert "s3cr3t" not in done.out + done.err
    # a root that does not exist yet, in a directory anyone may create it in, is refused too
    done = run_cli("--sysfs-root", "/tmp/tunectl-no-such-tree-34", *state, "status")
    assert done.code == 2 and "writable by others" in done.err, done.err


@pytest.fixture
def root_tree_nobody_queue(arena: Arena) -> Iterator[FakeTree]:
    """A tree root owns, but one device directory in it is nobody's (as a careless copy leaves it)."""
    tree = FakeTree.create(arena.base / "t")
    tree.add_disk("sdb", wwn="0x5000000000000002")
    chown_nobody(tree.devdir("sdb"))
    yield tree


def test_nothing_inside_a_fake_tree_is_followed_through_a_link_nor_used_when_another_user_owns_it(
        arena: Arena, root_tree_nobody_queue: FakeTree) -> None:
    tree = root_tree_nobody_queue
    queue = tree.devdir("sdb") / "queue"
    roots = ["--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root),
             "--state-dir", str(arena.base / "state")]
    elsewhere = arena.open / "q"
    as_nobody("mkdir", str(elsewhere))
    plants = {
        "a link at the attribute": lambda: as_nobody("ln", "-sf", str(arena.secret), str(queue / "read_ahead_kb")),
        "a link to the victim": lambda: as_nobody("ln", "-sf", str(arena.victim), str(queue / "read_ahead_kb")),
        "nobody's own file": lambda: (as_nobody("rm", "-f", str(queue / "read_ahead_kb")),
                                      as_nobody("sh", "-c", f"echo 4096 > {queue / 'read_ahead_kb'}")),
        "a directory link out of the tree": lambda: (
            as_nobody("ln", "-sf", str(arena.victim), str(elsewhere / "read_ahead_kb")),
            as_nobody("mv", str(queue), str(queue) + ".old"),
            as_nobody("ln", "-s", str(elsewhere), str(queue))),
    }
    for what, plant in plants.items():
        plant()
        for argv in (["status", "-v"], ["apply", "-p", THROUGHPUT], ["verify", "-p", THROUGHPUT],
                     ["rollback"]):
            done = run_cli(*roots, *argv)
            # what cannot be opened safely is shown as missing ("-", skipped), never as written
            assert done.code != 70, (what, argv, done.err)
            if argv[0] == "apply":
                assert "changed 0 setting" in done.out or done.code != 0, (what, done.out)
            assert "Traceback" not in done.err and "s3cr3t" not in done.out + done.err, (what, argv)
            assert arena.victim.read_text() == "precious\n", (what, argv)
            assert arena.secret.read_text() == SECRET
        if what == "nobody's own file":
            assert (queue / "read_ahead_kb").read_text() == "4096\n"  # not written: it is not root's


# set by rerun_with_a_private_var_lib in the process it starts: the mount namespace that process left
PRIVATE_VAR_LIB = "TUNECTL_TEST_PRIVATE_VAR_LIB"


def rerun_with_a_private_var_lib(nodeid: str) -> None:
    """Run the test `nodeid` again in a pytest of its own, in a mount namespace of its own (private propagation)
    with a tmpfs over /var/lib, without TUNECTL_STATE_DIR: a /var/lib/tunectl it makes there never shows on this
    machine (made on the machine, it failed the state guard of any other tree's tests running beside it)."""
    env = {k: v for k, v in os.environ.items() if k != "TUNECTL_STATE_DIR"}
    env.update({PRIVATE_VAR_LIB: os.readlink("/proc/self/ns/mnt"), "PYTHONPATH": str(REPO)})
    mount = 'mount -t tmpfs -o mode=0755,size=4m tunectl-test /var/lib && exec "$@"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, "sh",
                           sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def in_a_private_var_lib(left: str) -> bool:
    """This process is in a mount namespace other than `left` (the one its starter ran in; pid 1's may not be
    readable in a container) and /var/lib in it is a tmpfs."""
    if os.readlink("/proc/self/ns/mnt") == left:
        return False
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/var/lib" and fields[fields.index("-") + 1] == "tmpfs":
            return True
    return False


@pytest.mark.parametrize("real_state", ["as-found", "present"])
def test_a_run_on_a_fake_tree_never_writes_the_real_state_directory(arena: Arena, real_state: str,
                                                                   request: pytest.FixtureRequest,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """As found (absent on a fresh machine: nothing may create it), and present, as on any machine tunectl has
    tuned: status and a refused apply added profile verdicts to its validation cache (seen only once an earlier
    run had left /var/lib/tunectl behind). Present, it is made in a mount namespace of this test's own, over a
    tmpfs on /var/lib: tunectl cannot tell it from the machine's (the same path), no one else sees it."""
    monkeypatch.delenv("TUNECTL_STATE_DIR", raising=False)  # the runs without --state-dir must mean the real one
    if real_state == "present":
        if not os.environ.get(PRIVATE_VAR_LIB):
            rerun_with_a_private_var_lib(request.node.nodeid)
            return
        assert in_a_private_var_lib(os.environ[PRIVATE_VAR_LIB]), \
            f"{PRIVATE_VAR_LIB} set, but this is no mount namespace of its own with a tmpfs on /var/lib"
    tree = FakeTree.create(arena.base / "t")  # root's own tree, so only the state directory is at stake
    tree.add_disk("sdb", wwn="0x5000000000000002")
    (tree.udev_root / f"b{tree.devnum('sdb')}").write_text("E:TUNECTL_ORIG_NOMERGES=2\nE:ID_BUS=ata\n")
    existed = os.path.exists(STATE)
    if real_state == "present" and not existed:
        os.makedirs(STATE, mode=0o755)
    before = real_state_snapshot()
    try:
        runs_on_a_fake_tree(arena, tree, before, made_here=real_state == "present" and not existed)
    finally:
        if not existed and os.path.isdir(STATE):  # made for the test, or a regression wrote this machine's state
            shutil.rmtree(STATE)


def runs_on_a_fake_tree(arena: Arena, tree: FakeTree, before: dict[str, str], made_here: bool) -> None:
    roots = ["--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root)]
    for state in ([], ["--state-dir", STATE]):
        for argv in (["status"], ["apply", "-p", THROUGHPUT], ["rollback"]):
            done = run_cli(*roots, *state, *argv)
            if argv != ["status"]:  # status reads; it would write only to adopt originals rules kept
                assert done.code == 2 and "does not write the real state directory" in done.err, \
                    (state, argv, done.out + done.err)
            assert real_state_snapshot() == before
    assert made_here or not os.path.exists(STATE) or before  # not created by these runs
    done = run_cli(*roots, "--state-dir", str(arena.base / "state"), "apply", "-p", THROUGHPUT)
    assert done.code == 0, done.err  # its own state directory: the tree is tuned


@pytest.fixture
def hardened_tmpfs() -> Iterator[Path]:
    mnt = Path(tempfile.mkdtemp(prefix="tunectl-noexec-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec,size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        mnt.rmdir()


def live_options(target: Path) -> set[str]:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(target):
            return set(fields[5].split(","))
    raise AssertionError(f"{target} is not mounted")


def test_a_fake_proc_never_makes_root_remount_a_real_filesystem(arena: Arena, hardened_tmpfs: Path) -> None:
    mnt = hardened_tmpfs
    assert {"nosuid", "nodev", "noexec"} <= live_options(mnt)
    line = f"90 1 0:99 / {mnt} rw,relatime shared:1 - tmpfs tmpfs rw\n"  # the flags left out
    profile = arena.base / "m.yaml"
    profile.write_text(f"name: m\nmounts:\n  - match: {{mountpoint: '{mnt}'}}\n    options: [noatime]\n")
    fstab = arena.base / "fstab"
    fstab.write_text(f"tmpfs {mnt} tmpfs defaults 0 0\n")
    mine, theirs = arena.base / "proc", arena.open / "proc"
    (mine / "self").mkdir(parents=True)
    (mine / "self" / "mountinfo").write_text(line)
    as_nobody("mkdir", "-p", str(theirs / "self"))
    as_nobody("sh", "-c", f"printf '%s' '{line}' > {theirs / 'self' / 'mountinfo'}")
    for proc, said in ((theirs, "cannot be trusted"), (mine, "no real filesystem is remounted")):
        done = run_process("--state-dir", str(arena.base / "state"), "mounts", "fix", "-p", str(profile), "--fstab",
                           str(fstab), "--remount", env=dict(os.environ, TUNECTL_PROC_ROOT=str(proc)), timeout=60)
        assert done.code == 2 and said in done.err, (proc, done.out + done.err)
        assert {"nosuid", "nodev", "noexec"} <= live_options(mnt) and "noatime" not in live_options(mnt)
    shutil.rmtree(mine)
