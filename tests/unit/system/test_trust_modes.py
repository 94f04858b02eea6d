"""Issue #20: what tunectl creates has fixed modes whatever the umask; lists and outputs are bounded and safe."""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.harness import REPO, run_cli
from tests.journal_helpers import Pair, assert_state_error
from tunectl.context import Context
from tunectl.system import trust
from tunectl.system.state import StateStore

MEASURE = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, status, use = os.wait4(p.pid, 0); "
           "print(use.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(status))")
HEADER = json.dumps({"format": "tunectl-preload", "version": 1, "created": "", "files": 0,
                     "fields": ["path", "device", "inode", "size", "mtime_ns", "ranges", "physical"]})


def write_list(path: Path, rows: list[str]) -> None:
    path.write_text(HEADER + "\n" + "".join(r + "\n" for r in rows))


@pytest.mark.parametrize("device, words", [
    ("4294967296:1", "device: expected MAJ:MIN, each a decimal number up to 2147483647"),
    # dev_t holds 32 bits, but os.makedev takes a C int: this one passed the check and replay/show exited 70
    ("4294967295:1", "device: expected MAJ:MIN, each a decimal number up to 2147483647"),
    ("1:2147483648", "device: expected MAJ:MIN, each a decimal number up to 2147483647"),
    ("1:\u00b2", "device: expected MAJ:MIN"),
    ("\u0661:1", "device: expected MAJ:MIN"),
])
def test_malformed_device_fields_are_refused_with_file_and_line(tmp_path: Path, device: str, words: str) -> None:
    lst = tmp_path / "bad.list"
    write_list(lst, ['["/etc/hostname","8:1",1,1,0,[[0,1]],null]', json.dumps(["/etc/passwd", device, 1, 1, 0, [[0, 1]], None])])
    for verb in ("replay", "show"):
        r = run_cli("preload", verb, str(lst))
        assert r.code == 2 and f"{lst}:3: {words}" in r.err, r.err


def test_replay_announces_what_it_will_read_and_refuses_more_than_max_bytes(tmp_path: Path) -> None:
    lst = tmp_path / "l.list"
    write_list(lst, [json.dumps([f"/nonexistent/{i}", "8:1", i, 1000, 0, [[0, 1000]], None]) for i in range(5)])
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "4000")
    assert r.code == 2 and "5 files, 4.9 KiB to read: more than --max-bytes 3.9 KiB; no file of it was read" in r.err, r.err
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "5000")
    assert r.code == 0 and r.err.startswith(f"tunectl: {lst}: 5 files, 4.9 KiB to read\n"), r.err
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "4999")  # both 4.9 KiB rounded: said in bytes
    assert r.code == 2 and "5 files, 5000 B to read: more than --max-bytes 4999 B; no file of it was read" in r.err, r.err


@pytest.mark.slow
def test_ten_million_entries_cost_one_batch_of_memory_in_bounded_time(tmp_path: Path) -> None:
    lst = tmp_path / "huge.list"
    line = b'["/nonexistent/x","8:1",1,1,0,[[0,1]],null]\n'
    with open(lst, "wb") as f:
        f.write(HEADER.encode() + b"\n")
        chunk = line * 100_000
        for _ in range(100):
            f.write(chunk)
    started = time.monotonic()
    # Through a small parent: a child pytest starts itself would report pytest's own peak (the kernel keeps the
    # high-water mark of the process image an exec replaces).
    proc = subprocess.Popen([sys.executable, "-c", MEASURE, sys.executable, "-m", "tunectl", "preload", "replay",
                             str(lst), "--max-bytes", "1M"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        out, err = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("a 10-million-entry list was not refused within 400 s")
    seconds = time.monotonic() - started
    assert proc.returncode == 2 and "10000000 files, 9.5 MiB to read: more than --max-bytes 1 MiB" in err, err
    peak_kib = int(out.split()[-1])
    assert peak_kib < 400 * 1024, f"{peak_kib} KiB resident for a 10-million-entry list"
    print(f"10M-entry list: {seconds:.1f} s, max RSS {peak_kib // 1024} MiB")


def test_an_output_never_writes_into_a_pipe(tmp_path: Path) -> None:
    from tunectl.bench.export import write_output  # a link another user planted: tests/root/system

    os.mkfifo(tmp_path / "fifo.png")
    assert "a named pipe, not a regular file" in write_output(str(tmp_path / "fifo.png"), b"png")


def test_a_group_writable_directory_or_a_linked_one_is_not_trusted(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    with pytest.raises(trust.Untrusted, match="mode 0775: writable by its group"):
        trust.check_dir(shared)
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(trust.Untrusted, match="a symbolic link"):
        trust.check_dir(tmp_path / "link")
    (tmp_path / "ok").mkdir(mode=0o755)
    assert trust.check_dir(tmp_path / "link" / "ok") == tmp_path / "ok"  # a link above the last part is followed
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    if os.geteuid() == 0:  # /tmp-like: root's sticky directory may stand above, never be the directory itself
        (sticky / "mine").mkdir(mode=0o755)
        assert trust.check_dir(sticky / "mine") == sticky / "mine"
        with pytest.raises(trust.Untrusted, match="writable by others"):
            trust.check_dir(sticky)


# An access ACL as the kernel stores it (system.posix_acl_access): a version, then (tag, permissions, id) entries.
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER, NO_ID = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0xFFFFFFFF


def _set_acl(path: Path, *entries: tuple[int, int, int]) -> None:
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)
    try:
        os.setxattr(path, "system.posix_acl_access", raw)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip(f"no POSIX ACLs on the file system of {path}")
        raise


def test_a_state_directory_an_acl_lets_another_user_write_is_refused_saying_so(pair: Pair) -> None:
    """The group bits of a file with an ACL are the ACL's mask: a 0755 directory whose ACL lets nobody write shows
    as 0775. The refusal said "writable by its group", of a group that may not write at all; it names the ACL's
    writer now. The hint's chmod go-w fixes it (it takes the write out of the mask)."""
    assert pair.run("apply", "-p", "p1").code == 0
    pair.state.chmod(0o755)
    _set_acl(pair.state, (USER_OBJ, 7, NO_ID), (USER, 7, 65534), (GROUP_OBJ, 5, NO_ID), (MASK, 7, NO_ID),
             (OTHER, 5, NO_ID))
    r = pair.fresh()("rollback")
    assert_state_error(r, f"{pair.state}: mode 0775: its ACL lets user {trust.owner(65534)} write",
                       f"chmod go-w {pair.state}")
    assert "its group" not in r.err
    pair.state.chmod(0o755)
    lock = pair.state / "lock"  # the lock's own refusal says it the same way
    _set_acl(lock, (USER_OBJ, 6, NO_ID), (USER, 6, 65534), (GROUP_OBJ, 0, NO_ID), (MASK, 6, NO_ID), (OTHER, 0, NO_ID))
    assert_state_error(pair.fresh()("rollback"), f"lock {lock} cannot be trusted: mode 0660: its ACL lets user ",
                       f"remove {lock}")
    lock.unlink()
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals


@pytest.mark.parametrize("entries, said", [
    ([(GROUP_OBJ, 7, NO_ID), (GROUP, 6, 65534), (MASK, 7, NO_ID)], "its ACL lets its group, group "),
    ([(USER, 7, 65534), (GROUP_OBJ, 7, NO_ID), (MASK, 5, NO_ID)], None),  # the mask takes every write: 0755
    ([(GROUP_OBJ, 5, NO_ID), (MASK, 7, NO_ID)], "its ACL's mask allows writing"),  # the mask alone allows it
    ([], "writable by its group"),  # no ACL: the group bits are its group's
])
def test_an_acl_refusal_names_who_the_acl_lets_write(tmp_path: Path, entries: list, said: str | None) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    if entries:
        _set_acl(shared, (USER_OBJ, 7, NO_ID), *entries, (OTHER, 5, NO_ID))
    else:
        shared.chmod(0o775)
    if said is None:
        assert trust.check_dir(shared) == shared
        return
    with pytest.raises(trust.Untrusted) as e:
        trust.check_dir(shared)
    assert e.value.found.startswith(f"mode 0775: {said}"), e.value.found


@pytest.mark.skipif(os.geteuid() != 0, reason="only root refuses a profile or list another user may write")
def test_a_profile_or_list_an_acl_lets_another_user_write_is_refused_naming_them(tmp_path: Path) -> None:
    from tunectl.errors import UsageError
    from tunectl.preload.listfile import check_replayable

    chosen = tmp_path / "chosen"
    chosen.write_text("")
    chosen.chmod(0o644)
    _set_acl(chosen, (USER_OBJ, 6, NO_ID), (USER, 6, 65534), (GROUP_OBJ, 4, NO_ID), (MASK, 6, NO_ID),
             (OTHER, 4, NO_ID))
    said = f"mode 0664: its ACL lets user {trust.owner(65534)} write"
    with pytest.raises(trust.Untrusted) as e:
        trust.open_regular(chosen, decides=True)
    assert e.value.found.startswith(said), e.value.found
    with pytest.raises(UsageError) as listed:
        check_replayable(os.stat(chosen), str(chosen))
    assert str(listed.value).startswith(f"{chosen}: {said}: root does not replay"), listed.value


def test_a_regular_file_named_as_a_directory_is_called_one(tmp_path: Path) -> None:
    # `udev install --rules-dir FILE` said "FILE: not a regular file, not a directory" of a regular file.
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"^\[Errno 20\] a regular file, not a directory: "):
        trust.check_dir(tmp_path / "file")


def test_a_cache_entry_is_bound_to_the_text_and_the_checker(tmp_path: Path) -> None:
    from tunectl.system.cache import ValidationCache

    cache = ValidationCache(tmp_path / "validated")
    cache.put("k", "text-a", "checker-1", {"data": 1})
    assert cache.get("k", "text-a", "checker-1") == {"data": 1}
    assert cache.get("k", "text-b", "checker-1") is None
    assert cache.get("k", "text-a", "checker-2") is None
    (tmp_path / "validated").chmod(0o777)
    assert cache.get("k", "text-a", "checker-1") is None


def test_the_cache_stays_bounded_and_removes_only_its_own_names(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A write beyond MAX_ENTRIES removes the oldest written down to KEEP_ENTRIES, and temp files a killed
    writer left an hour ago; a link among the entries is removed, never its target; other names stay."""
    import hashlib

    from tunectl.system import cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_ENTRIES", 8)
    monkeypatch.setattr(cache_module, "KEEP_ENTRIES", 5)
    cache = cache_module.ValidationCache(tmp_path / "validated")
    keys = [hashlib.sha256(bytes([i])).hexdigest() for i in range(10)]
    for age, key in enumerate(keys[:7], start=1):
        cache.put(key, "text", "checker", {"warnings": []})
        os.utime(cache.dir / f"{key}.json", ns=(age * 10**9, age * 10**9))
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (cache.dir / f"{keys[7]}.json").symlink_to(victim)  # the oldest of all
    os.utime(cache.dir / f"{keys[7]}.json", ns=(0, 0), follow_symlinks=False)
    stale, fresh = cache.dir / f".{keys[0]}.json.0123456789ab", cache.dir / f".{keys[1]}.json.0123456789ab"
    stale.write_text("half")
    fresh.write_text("half")
    os.utime(stale, (time.time() - 2 * cache_module.STALE_TEMP_SECONDS,) * 2)
    (cache.dir / "notes.txt").write_text("")
    (cache.dir / f"{keys[9]}.json.d").mkdir()
    assert len(os.listdir(cache.dir)) == 12  # 8 entries: none removed yet
    cache.put(keys[8], "text", "checker", {"warnings": []})  # the 9th
    assert sorted(os.listdir(cache.dir)) == sorted([f"{k}.json" for k in keys[3:7] + keys[8:9]]
                                                   + [fresh.name, "notes.txt", f"{keys[9]}.json.d"])
    assert victim.read_text() == "keep me"
    assert cache.get(keys[8], "text", "checker") == {"warnings": []}


def test_a_relative_or_changed_active_profile_is_refused(tmp_path: Path) -> None:
    from tunectl.errors import UsageError
    from tunectl.profile.resolve import Profile
    from tunectl.tuning import intent

    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\n")
    with pytest.raises(UsageError, match="recorded as the relative path ./p.yaml"):
        intent.Intent.from_json({"ref": "./p.yaml", "name": "p", "files": ["./p.yaml"]}).trusted_ref()
    record = intent.of(Profile("p", "", [str(profile)], {}, {}), str(profile))
    assert record.trusted_ref() == str(profile)
    profile.write_text("name: p\nclasses: {}\n")
    with pytest.raises(UsageError, match="changed since it was applied"):
        record.trusted_ref()
    profile.unlink()
    with pytest.raises(UsageError, match="moved or removed"):
        record.trusted_ref()


def test_a_tuned_variables_file_that_is_a_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    from tunectl.profile.tuned_reader import read_text

    os.mkfifo(tmp_path / "vars.conf")
    with pytest.raises(trust.Untrusted, match="a named pipe, not a regular file"):
        read_text(str(tmp_path / "vars.conf"))
    from tunectl.errors import UsageError
    from tunectl.profile.tuned_reader import locate

    with pytest.raises(UsageError, match="vars.conf: a named pipe, not a regular file"):
        locate(str(tmp_path / "vars.conf"), [])  # import-tuned FIFO: refused at once, not called missing


def test_profile_list_says_which_profiles_would_be_refused_by_name(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "open.yaml").write_text("name: open\ndescription: anyone could have written this\n")
    shared.chmod(0o777)
    tree = FakeTree.create(tmp_path / "fake")
    ctx = Context(tree.sysfs, tree.udev, StateStore(tmp_path / "state"), [shared], {})
    r = run_cli("--json", "profile", "list", context=ctx)
    assert r.code == 0, r.err
    (listed,) = r.doc["profiles"]
    assert listed["description"] == f"(refused: {shared}: mode 0777: writable by others)"
    r = run_cli("plan", "-p", "open", context=ctx)
    assert r.code == 2 and "writable by others" in r.err, r.err


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_profile_list_judges_a_profile_by_the_links_tunectl_would_follow_to_it(tmp_path: Path) -> None:
    """Another user's link to root's profile is refused by name (never followed): the list says so, where it
    judged the link's target, found it root's alone, and then could not read it ("(unreadable)")."""
    tmp_path.chmod(0o755)
    library, elsewhere = tmp_path / "library", tmp_path / "elsewhere"
    library.mkdir()
    elsewhere.mkdir()
    (elsewhere / "theirs.yaml").write_text("name: theirs\ndescription: root's text, their link\n")
    (library / "theirs.yaml").symlink_to(elsewhere / "theirs.yaml")
    os.lchown(library / "theirs.yaml", 65534, 65534)
    tree = FakeTree.create(tmp_path / "fake")
    ctx = Context(tree.sysfs, tree.udev, StateStore(tmp_path / "state"), [library], {})
    r = run_cli("--json", "profile", "list", context=ctx)
    assert r.code == 0, r.err
    (listed,) = r.doc["profiles"]
    assert listed["description"] == (f"(refused: {library / 'theirs.yaml'}: a symbolic link owned by nobody "
                                      "(uid 65534), not root)")


def test_an_output_through_the_users_own_link_is_written_at_its_target_never_over_a_terminal(tmp_path: Path) -> None:
    from tunectl.bench.export import write_output

    (tmp_path / "run7.csv").write_text("old\n")
    (tmp_path / "latest.csv").symlink_to("run7.csv")  # the user's own link (root's, run as root): followed
    assert write_output(str(tmp_path / "latest.csv"), b"a,b\n") is None
    assert (tmp_path / "latest.csv").is_symlink() and (tmp_path / "run7.csv").read_bytes() == b"a,b\n"
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "stdout").symlink_to(tmp_path / "pipe")  # as /dev/stdout -> /proc/self/fd/1 -> a pipe or tty
    assert "a named pipe, not a regular file" in write_output(str(tmp_path / "stdout"), b"a,b\n")
    assert (tmp_path / "stdout").is_symlink()


def test_the_metadata_counted_against_max_bytes_is_what_the_metadata_pass_reads(tmp_path: Path) -> None:
    # The pass reads holes of up to 64 KiB through and whole pages: 100 one-byte ranges 64 KiB apart are one
    # read of 6.2 MiB. Summed as listed they came to 100 B, and the replay passed a 1 MiB cap.
    lst = tmp_path / "l.list"
    head = json.loads(HEADER)
    head.update(files=1, bytes=1000, metadata={"8:1": [[i * 65536, 1] for i in range(100)]})
    lst.write_text(json.dumps(head) + "\n" + json.dumps(["/nonexistent/0", "8:1", 1, 1000, 0, [[0, 1000]], None]) + "\n")
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "1M")
    assert r.code == 2 and "1 file and 6.2 MiB of metadata, 6.2 MiB to read: more than --max-bytes 1 MiB; " \
                           "no file of it was read" in r.err, r.err
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "1M", "--no-metadata")
    assert r.code == 0, r.err


def test_a_streamed_list_past_the_cap_says_its_total_counts_the_metadata(tmp_path: Path) -> None:
    # "its first 5 files come to 8.9 KiB": 4.9 KiB of files, the rest the metadata pass, which it did not say.
    lst = tmp_path / "l.list"
    head = json.loads(HEADER)
    head.update(files=5, bytes=1, metadata={"8:1": [[0, 4096]]})  # a header that understates its entries
    rows = [json.dumps([f"/nonexistent/{i}", "8:1", i, 1000, 0, [[0, 1000]], None]) for i in range(5)]
    lst.write_text(json.dumps(head) + "\n" + "".join(r + "\n" for r in rows))
    r = run_cli("preload", "replay", str(lst), "--max-bytes", "8000")
    assert r.code == 2 and "its header says 5 files, 1 B, but its first 5 files come to 8.9 KiB with 4 KiB of " \
                           "metadata; no file of the list was read" in r.err, r.err
