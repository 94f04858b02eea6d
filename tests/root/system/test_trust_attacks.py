"""Issue #20: an unprivileged user (nobody, through runuser) plants files; root runs tunectl.

Every test checks what root must not do: the victim file is unchanged, nothing
outside the fake queue/ attributes and tunectl's own files was written, and the
exit code is the documented one (5: state directory, 2: profile, list, rules).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.fakesys import FakeTree
from tests.harness import CliResult, run_process
from tests.harness import run_cli as run_in_process
from tunectl.context import Context
from tunectl.profile.library import _checker_digest, shipped_profile_dir
from tunectl.system.state import StateStore

pytestmark = pytest.mark.root

NOBODY = pwd.getpwnam("nobody")
SECRET = "root:$6$s3cr3t-hash$Zq:19000:0:99999:7:::\nadmin:$6$other-hash$Yq:19000:0:99999:7:::\n"
PROFILE = "name: mine\nclasses:\n  ssd: {read_ahead_kb: 256}\n"


class Arena(NamedTuple):
    base: Path  # root's, 0755
    open: Path  # nobody's
    victim: Path  # root's file that must stay as it is
    secret: Path  # root's 0600 file whose content must never be printed
    tree: FakeTree


@pytest.fixture
def arena() -> Iterator[Arena]:
    base = Path(tempfile.mkdtemp(prefix="tunectl-trust-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        mine = base / "nobody"
        mine.mkdir()
        os.chown(mine, NOBODY.pw_uid, NOBODY.pw_gid)
        victim = base / "victim"
        victim.write_text("precious\n")
        secret = base / "secret"
        secret.write_text(SECRET)
        secret.chmod(0o600)
        tree = FakeTree.create(base / "fake")
        tree.add_disk("sda", wwn="0x5000000000000001")
        yield Arena(base, mine, victim, secret, tree)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True, timeout=60, capture_output=True)


def nobody_writes(path: Path, text: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", "tee", str(path)], input=text.encode(), check=True,
                   timeout=60, capture_output=True)


def tunectl(arena: Arena, state: Path, *argv: str, profiles: Path | None = None) -> tuple[int, str, str]:
    ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state),
                  [*([profiles] if profiles else []), shipped_profile_dir()], {})
    r = run_in_process(*argv, context=ctx)  # no traceback, and every --json document checked against its schema
    return r.code, r.out, r.err


def files(base: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, int, int]]:
    """Every file and directory under `base` but the fake queue/ attributes: (content hash, mode, owner)."""
    seen = {}
    for root, dirs, names in os.walk(base):
        for name in dirs + names:
            path = Path(root, name)
            rel = str(path.relative_to(base))
            if "/queue/" in rel or rel.startswith(skip):
                continue
            st = os.lstat(path)
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
            seen[rel] = (digest, st.st_mode, st.st_uid)
    return seen


def queue(arena: Arena, attr: str) -> str:
    return (arena.tree.root / "block" / "sda" / "queue" / attr).read_text().strip()


def test_symlinks_planted_in_the_cache_do_not_make_root_write_elsewhere(arena: Arena) -> None:
    state = arena.base / "state"
    (state / "validated").mkdir(parents=True)
    os.chown(state / "validated", NOBODY.pw_uid, NOBODY.pw_gid)  # a cache dir a user was able to write
    profile = arena.base / "p.yaml"
    profile.write_text(PROFILE)
    key = hashlib.sha256(_checker_digest() + PROFILE.encode()).hexdigest()
    as_nobody("ln", "-s", str(arena.victim), str(state / "validated" / f"{key}.json"))
    for pid in range(os.getpid(), os.getpid() + 50):
        as_nobody("ln", "-s", str(arena.victim), str(state / "validated" / f".{key}.{pid}.tmp"))
    before = files(arena.base)
    code, _, err = tunectl(arena, state, "plan", "-p", str(profile))
    assert code == 0, err
    assert arena.victim.read_text() == "precious\n"
    assert files(arena.base) == before


def test_a_planted_cache_entry_never_decides_a_setting(arena: Arena) -> None:
    state = arena.base / "state"
    (state / "validated").mkdir(parents=True)
    os.chmod(state / "validated", 0o777)  # as an old tunectl created it under umask 000
    profile = arena.base / "p.yaml"
    profile.write_text(PROFILE)
    key = hashlib.sha256(_checker_digest() + PROFILE.encode()).hexdigest()
    forged = {"file": str(profile), "warnings": [], "value_pos": [], "key_pos": [],
              "data": {"name": "mine", "classes": {"ssd": {"read_ahead_kb": 65536,
                                                            "queue": {"write_cache": "write through",
                                                                      "rotational": 0}}}}}
    for entry in (forged, {"text_sha256": hashlib.sha256(PROFILE.encode()).hexdigest(),
                           "checker": _checker_digest().hex(), "document": forged}):
        for mode in (0o777, 0o755):  # a dir others can write; a trusted dir with an entry that is nobody's
            os.chmod(state / "validated", 0o777)
            (state / "validated" / f"{key}.json").unlink(missing_ok=True)
            nobody_writes(state / "validated" / f"{key}.json", json.dumps(entry))
            os.chmod(state / "validated", mode)
            cache_before = queue(arena, "write_cache"), queue(arena, "rotational")
            code, _, err = tunectl(arena, state, "apply", "-p", str(profile))
            assert code == 0, err  # the entry is not used: the profile is checked again
            assert (queue(arena, "write_cache"), queue(arena, "rotational")) == cache_before
            assert queue(arena, "read_ahead_kb") == "256"
            # Untrusted dir: left alone; trusted dir: nobody's entry replaced by root's own (renamed over, not
            # written through), which holds the checker's verdict only (the settings are parsed from the text).
            entry_now = state / "validated" / f"{key}.json"
            assert os.stat(entry_now).st_uid == (NOBODY.pw_uid if mode == 0o777 else 0)
            if mode == 0o755:
                assert json.loads(entry_now.read_text())["document"] == {"warnings": []}


def test_the_active_profile_is_the_file_applied_not_one_in_the_current_directory(arena: Arena, monkeypatch) -> None:
    state, admin = arena.base / "state", arena.base / "admin"
    admin.mkdir()
    (admin / "x.yaml").write_text(PROFILE)
    nobody_writes(arena.open / "x.yaml", "name: x\nclasses:\n  ssd: {read_ahead_kb: 8192}\n")
    monkeypatch.chdir(admin)
    assert tunectl(arena, state, "apply", "-p", "./x.yaml")[0] == 0
    monkeypatch.chdir(arena.open)
    code, out, err = tunectl(arena, state, "verify")
    assert code == 0, out + err  # in sync with admin/x.yaml; nobody's x.yaml (8192) was not read
    code, _, err = tunectl(arena, state, "plan", "--json")
    assert code == 0 and queue(arena, "read_ahead_kb") == "256"
    (admin / "x.yaml").write_text(PROFILE.replace("256", "512"))
    code, _, err = tunectl(arena, state, "verify")
    assert code == 2 and "changed since it was applied" in err, err


def test_an_active_profile_owned_by_another_user_is_refused(arena: Arena) -> None:
    state = arena.base / "state"
    nobody_writes(arena.open / "p.yaml", PROFILE)
    code, _, err = tunectl(arena, state, "apply", "-p", str(arena.open / "p.yaml"))  # SPEC 4a: not even by -p
    assert code == 2 and f"owned by nobody (uid {NOBODY.pw_uid}), not root: as root, tunectl acts on no file" in err, err
    os.chown(arena.open / "p.yaml", 0, 0)
    assert tunectl(arena, state, "apply", "-p", str(arena.open / "p.yaml"))[0] == 0  # root's when applied
    os.chown(arena.open / "p.yaml", NOBODY.pw_uid, NOBODY.pw_gid)  # given away since: the record is no longer trusted
    for argv in (("verify",), ("status",), ("udev", "render")):
        code, _, err = tunectl(arena, state, *argv)
        assert code == 2 and "owned by nobody" in err and "pass -p" in err, (argv, err)


@pytest.mark.parametrize("plant", ["owned by nobody", "a symbolic link", "world-writable"])
def test_a_state_directory_someone_else_controls_is_refused(arena: Arena, plant: str) -> None:
    if plant == "owned by nobody":
        state = arena.open / "state"
        as_nobody("mkdir", str(state))
    elif plant == "a symbolic link":
        (arena.base / "real").mkdir()
        state = arena.base / "state"
        state.symlink_to(arena.base / "real")
    else:
        state = arena.base / "state"
        state.mkdir()
        state.chmod(0o777)
        as_nobody("ln", "-s", str(arena.base / "created-by-root"), str(state / "lock"))
    before = files(arena.base)
    for argv in (("apply", "-p", "default"), ("rollback",), ("verify",)):
        code, _, err = tunectl(arena, state, *argv)
        assert code == 5 and "cannot be trusted" in err and str(state) in err, (argv, err)
    assert files(arena.base) == before
    assert not (arena.base / "created-by-root").exists()


def test_a_lock_symlink_does_not_make_root_create_files(arena: Arena) -> None:
    state = arena.base / "state"
    state.mkdir()
    (state / "lock").symlink_to(arena.base / "created-by-root")
    code, _, err = tunectl(arena, state, "apply", "-p", "default")
    assert code == 5 and "symbolic link" in err, err
    assert not os.path.lexists(arena.base / "created-by-root")


def test_a_journal_written_by_another_user_is_never_trusted(arena: Arena) -> None:
    state = arena.base / "state"
    (arena.tree.root / "block" / "sda" / "queue" / "read_ahead_kb").write_text("128\n")
    assert tunectl(arena, state, "apply", "-p", str(shipped_profile_dir() / "throughput-performance.yaml"))[0] == 0
    applied = queue(arena, "read_ahead_kb")
    os.chown(state / "journal.json", NOBODY.pw_uid, NOBODY.pw_gid)  # valid checksum, another user's file
    code, _, err = tunectl(arena, state, "rollback")
    assert code == 5 and "owned by nobody" in err and "does not use state it did not write" in err, err
    assert queue(arena, "read_ahead_kb") == applied


def test_extends_never_reads_a_file_off_the_search_path_nor_prints_one(arena: Arena) -> None:
    state = arena.base / "state"
    # root's files (another user's are refused before their extends: is read), in nobody's directory
    (arena.open / "p.yaml").write_text(f"name: p\nextends: {arena.secret}\n")
    (arena.open / "q.yaml").write_text("name: q\nextends: ../secret\n")
    for argv in (("profile", "validate", str(arena.open / "p.yaml")), ("plan", "-p", str(arena.open / "p.yaml")),
                 ("profile", "show", str(arena.open / "q.yaml"))):
        code, out, err = tunectl(arena, state, *argv)
        assert code == 2 and "outside the search path" in err, err
        assert "s3cr3t" not in out + err and "admin" not in out + err
    code, out, err = tunectl(arena, state, "profile", "validate", str(arena.secret))  # named by root itself
    assert code == 2 and err.strip().endswith("not a profile: none of its keys is a profile key "
                                              "(alignment, classes, description, devices, extends, mounts, name)")
    assert "s3cr3t" not in out + err and "admin" not in out + err


def test_udev_install_refuses_a_profile_another_user_can_change(arena: Arena) -> None:
    state, rules = arena.base / "state", arena.base / "rules"
    rules.mkdir()
    nobody_writes(arena.open / "p.yaml", PROFILE)
    for allow in ([], ["--allow-untrusted-profile"]):  # a profile nobody owns decides nothing root does, ever
        code, _, err = tunectl(arena, state, "udev", "install", "-p", str(arena.open / "p.yaml"), "--rules-dir",
                               str(rules), *allow)
        assert code == 2 and f"owned by nobody (uid {NOBODY.pw_uid}), not root: as root, tunectl acts on no file" in err, err
        assert os.listdir(rules) == []
    mine = arena.open / "root.yaml"  # root's, in a directory nobody can change: the path udev runs may be swapped
    mine.write_text(PROFILE)
    code, _, err = tunectl(arena, state, "udev", "install", "-p", str(mine), "--rules-dir", str(rules))
    assert code == 2 and "owned by nobody" in err and "--allow-untrusted-profile" in err, err
    assert os.listdir(rules) == []
    code, _, err = tunectl(arena, state, "udev", "install", "-p", str(mine), "--rules-dir", str(rules),
                           "--allow-untrusted-profile")
    assert code in (0, 3) and (rules / "65-tunectl.rules").is_file(), err


def test_udev_install_never_replaces_rules_it_did_not_write_nor_follows_a_linked_dir(arena: Arena) -> None:
    state, rules = arena.base / "state", arena.base / "rules"
    rules.mkdir()
    (rules / "65-tunectl.rules").write_text("# mine, by hand\n")
    code, _, err = tunectl(arena, state, "udev", "install", "-p", "default", "--rules-dir", str(rules))
    assert code == 2 and "not generated by tunectl" in err, err
    assert (rules / "65-tunectl.rules").read_text() == "# mine, by hand\n"
    (arena.base / "linked").symlink_to(arena.base / "elsewhere")
    (arena.base / "elsewhere").mkdir()
    code, _, err = tunectl(arena, state, "udev", "install", "-p", "default", "--rules-dir", str(arena.base / "linked"))
    assert code == 2 and "symbolic link" in err, err
    assert os.listdir(arena.base / "elsewhere") == []


def run_cli(*argv: str, timeout: float = 60) -> CliResult:
    """The CLI in a process of its own (the harness's checks: no traceback, valid --json): a run that blocks fails
    the test at the timeout."""
    try:
        return run_process(*argv, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tunectl {' '.join(argv)} blocked for {timeout} s")


def test_fifos_in_place_of_a_profile_or_the_rules_file_block_nothing(arena: Arena) -> None:
    profiles, rules = arena.open / "profiles", arena.base / "rules"
    as_nobody("mkdir", str(profiles))
    as_nobody("mkfifo", str(profiles / "stuck.yaml"))
    rules.mkdir()
    os.mkfifo(rules / "65-tunectl.rules")
    state = ["--state-dir", str(arena.base / "state")]
    listed = run_process(*state, "profile", "list", env=dict(os.environ, TUNECTL_PROFILE_PATH=str(profiles)),
                         timeout=60)
    assert listed.code == 0 and "stuck" in listed.out, listed.err
    for verb in ("check", "remove"):
        done = run_cli(*state, "udev", verb, *(["-p", "default"] if verb == "check" else []), "--rules-dir", str(rules))
        assert done.code == 2 and "a named pipe, not a regular file" in done.err, done.err
    assert stat.S_ISFIFO(os.lstat(rules / "65-tunectl.rules").st_mode)


def write_list(lst: Path, paths: list[Path]) -> Path:
    """A preload list naming `paths`, each entry matching what a stat of the name finds: only its type gives it away."""
    rows = []
    for path in paths:
        st = os.lstat(path)
        rows.append([str(path), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino, st.st_size,
                     st.st_mtime_ns, [[0, max(st.st_size, 1)]], None])
    lst.write_text(json.dumps({"format": "tunectl-preload", "version": 1, "created": "", "files": len(rows),
                               "fields": ["path", "device", "inode", "size", "mtime_ns", "ranges", "physical"]})
                   + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return lst


def test_preload_replay_opens_only_the_regular_files_it_listed(arena: Arena) -> None:
    regular = arena.base / "data"
    regular.write_bytes(b"x" * 4096)
    as_nobody("mkfifo", str(arena.open / "fifo"))
    as_nobody("ln", "-s", str(arena.victim), str(arena.open / "link"))
    lst = write_list(arena.base / "attack.list", [regular, arena.open / "fifo", arena.open / "link", Path("/dev/null")])
    for extra in ([], ["--no-io-uring"]):
        done = run_cli("--json", "preload", "replay", str(lst), *extra)
        assert done.code == 0, done.err
        doc = json.loads(done.out)
        skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
        assert doc["files"] == 1 and set(skipped) == {str(arena.open / "fifo"), str(arena.open / "link"), "/dev/null"}
        assert "named pipe" in skipped[str(arena.open / "fifo")] and "symbolic link" in skipped[str(arena.open / "link")]
        assert "character device" in skipped["/dev/null"]
    assert arena.victim.read_text() == "precious\n"


def test_outputs_root_writes_replace_a_planted_link_and_never_write_through_it(arena: Arena) -> None:
    from tunectl.bench.export import write_output

    data = arena.base / "data"
    data.write_bytes(b"x" * 4096)
    for name in ("bench.csv", "bench.png", "set.list"):
        as_nobody("ln", "-s", str(arena.victim), str(arena.open / name))
    assert write_output(str(arena.open / "bench.csv"), b"a,b\n") is None  # bench --csv
    assert write_output(str(arena.open / "bench.png"), b"\x89PNG") is None  # bench --plot
    done = run_cli("--state-dir", str(arena.base / "state"), "preload", "collect", str(data),
                   "-o", str(arena.open / "set.list"))
    assert done.code == 0, done.err
    assert arena.victim.read_text() == "precious\n"
    for name in ("bench.csv", "bench.png", "set.list"):
        st = os.lstat(arena.open / name)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644, name
    as_nobody("mkfifo", str(arena.open / "stuck.csv"))
    assert "a named pipe, not a regular file" in write_output(str(arena.open / "stuck.csv"), b"a,b\n")
    # A directory link nobody planted is not followed, so root never picks a file in the directory it points at.
    as_nobody("ln", "-s", str(arena.base), str(arena.open / "reports"))
    refused = write_output(str(arena.open / "reports" / "victim"), b"a,b\n")
    assert refused and "symbolic link owned by nobody" in refused, refused
    assert arena.victim.read_text() == "precious\n"
    (arena.base / "mine").symlink_to(arena.open)  # root's own link is followed
    assert write_output(str(arena.base / "mine" / "ok.csv"), b"a,b\n") is None
    assert (arena.open / "ok.csv").read_bytes() == b"a,b\n"


def test_root_never_writes_at_a_root_link_reached_through_a_link_another_user_owns(arena: Arena) -> None:
    """The link at an output's path is followed when root owns it, but only when the way to it is root's to
    choose: behind another user's directory link, root's link (a /etc/localtime, here one to the victim) is that
    user's choice of what root replaces."""
    from tunectl.bench.export import write_output

    data = arena.base / "data"
    data.write_bytes(b"x" * 4096)
    links = arena.base / "links"
    links.mkdir()
    (links / "to-victim").symlink_to(arena.victim)  # root's, as /etc/localtime is
    as_nobody("ln", "-s", str(links), str(arena.open / "d"))
    refused = write_output(str(arena.open / "d" / "to-victim"), b"a,b\n")
    assert refused and "d: a symbolic link owned by nobody" in refused, refused
    done = run_cli("--state-dir", str(arena.base / "state"), "preload", "collect", str(data),
                   "-o", str(arena.open / "d" / "to-victim"))
    assert done.code == 2 and "symbolic link owned by nobody" in done.err, (done.code, done.err)
    assert arena.victim.read_text() == "precious\n"
    assert (links / "to-victim").is_symlink()


def test_udev_install_refuses_a_tunectl_executable_or_interpreter_another_user_can_change(arena: Arena) -> None:
    state, rules = arena.base / "state", arena.base / "rules"
    rules.mkdir()
    profile = arena.base / "below.yaml"  # root's: its below: settings make the rules RUN tunectl
    profile.write_text("name: below\nclasses:\n  dm:\n    below: {read_ahead_kb: 4096}\n")
    nobody_writes(arena.open / "python3", "#!/bin/sh\n")
    bin_dir = arena.base / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "tunectl"
    for script, owner, what in (("#!/usr/bin/python3 -I\n", NOBODY.pw_uid, exe),  # a file nobody owns
                                (f"#!{arena.open / 'python3'} -I\n", 0, arena.open)):  # nobody's interpreter
        exe.write_text(script)
        exe.chmod(0o755)
        os.chown(exe, owner, 0)
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                      {"TUNECTL_EXECUTABLE": str(exe)})
        r = run_in_process("udev", "install", "-p", str(profile), "--rules-dir", str(rules), context=ctx)
        assert r.code == 2 and f"tunectl executable {what}: owned by nobody" in r.err, r.err
        assert os.listdir(rules) == []
    exe.write_text("#!/usr/bin/python3 -I\n")  # root's, with root's interpreter
    exe.chmod(0o755)
    os.chown(exe, 0, 0)
    # The RUN names the executable as given: root's own link in nobody's directory is a name nobody can point
    # elsewhere (replace the link with a script of theirs), so it is judged by the way there, not by its target.
    (arena.open / "tunectl").symlink_to(exe)
    ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                  {"TUNECTL_EXECUTABLE": str(arena.open / "tunectl")})
    r = run_in_process("udev", "install", "-p", str(profile), "--rules-dir", str(rules), context=ctx)
    assert r.code == 2 and f"tunectl executable {arena.open}: owned by nobody" in r.err, r.err
    assert os.listdir(rules) == []
    # The profile's path is the one its load resolved (root's link followed): the RUN names root's file itself.
    (arena.open / "below.yaml").symlink_to(profile)
    ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                  {"TUNECTL_EXECUTABLE": str(exe)})
    r = run_in_process("udev", "install", "-p", str(arena.open / "below.yaml"), "--rules-dir", str(rules),
                       context=ctx)
    assert r.code in (0, 3), r.err
    assert f'RUN+="{exe} apply -p {profile} ' in (rules / "65-tunectl.rules").read_text()
    ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                  {"TUNECTL_EXECUTABLE": str(exe)})
    r = run_in_process("udev", "install", "-p", str(profile), "--rules-dir", str(rules), context=ctx)
    assert r.code in (0, 3), r.err  # 3: udevd could not be reloaded here
    assert f'RUN+="{exe} apply -p {profile}' in (rules / "65-tunectl.rules").read_text()
