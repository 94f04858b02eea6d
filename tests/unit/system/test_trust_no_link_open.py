"""open_regular(resolved=True), as a profile is read: through no link at all, opened one directory at a time
(no ctypes on the way), with the errors openat2's RESOLVE_NO_SYMLINKS gave."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunectl.system import trust


def test_a_file_is_read_and_a_link_on_the_way_or_at_the_end_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "p.yaml").write_text("name: p\n")
    (tmp_path / "via").symlink_to("real")
    (tmp_path / "real" / "last.yaml").symlink_to("p.yaml")
    assert trust.read_regular(str(tmp_path / "real" / "p.yaml"), 100, resolved=True) == b"name: p\n"
    for linked in (tmp_path / "via" / "p.yaml", tmp_path / "real" / "last.yaml"):
        with pytest.raises(trust.Untrusted, match="changed while tunectl looked at it"):
            trust.read_regular(str(linked), 100, resolved=True)
    with pytest.raises(FileNotFoundError) as missing:
        trust.read_regular(str(tmp_path / "real" / "gone.yaml"), 100, resolved=True)
    assert missing.value.filename == str(tmp_path / "real" / "gone.yaml")  # the whole path, not one component
    with pytest.raises(NotADirectoryError) as through_a_file:
        trust.read_regular(str(tmp_path / "real" / "p.yaml" / "x"), 100, resolved=True)
    assert through_a_file.value.errno == errno.ENOTDIR
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(trust.Untrusted, match="not a regular file"):  # opened without blocking, then refused
        trust.read_regular(str(tmp_path / "fifo"), 100, resolved=True)


def test_reading_a_profile_does_not_load_ctypes(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("name: p\n")
    code = ("import sys\nfrom pathlib import Path\nfrom tunectl.profile.library import read_profile_bytes\n"
            f"raw, diags = read_profile_bytes(Path({str(tmp_path / 'p.yaml')!r}))\n"
            "print(raw == b'name: p\\n', diags, 'ctypes' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "[]", "False"]


def test_a_directory_is_opened_by_the_same_walk_its_errors_name_the_whole_path(tmp_path: Path) -> None:
    """open_dir's descriptor comes from the walk a file takes (directory flags all the way down): the same
    refusal of a link on the way or at the end, and an error that names the whole path, not one component."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "via").symlink_to("real")
    (tmp_path / "real" / "last").symlink_to("sub")
    fd = trust._open_dir(tmp_path / "real" / "sub")
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "real" / "sub"))
        assert os.listdir(fd) == []  # O_RDONLY, not O_PATH: its entries can be listed
    finally:
        os.close(fd)
    fd = trust._open_dir(Path("/"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat("/"))
    finally:
        os.close(fd)
    for linked in (tmp_path / "via" / "sub", tmp_path / "real" / "last"):
        with pytest.raises(trust.Untrusted, match=r"changed while tunectl looked at it \(a part became a link\)"):
            trust._open_dir(linked)
    with pytest.raises(FileNotFoundError) as missing:
        trust._open_dir(tmp_path / "real" / "gone" / "deeper")
    assert missing.value.filename == str(tmp_path / "real" / "gone" / "deeper")


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "before-5.6"])
def test_a_file_of_a_tree_is_read_as_from_inside_the_tree_never_from_this_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool) -> None:
    """open_in_root: links resolved inside the tree, `..` stopping at its root. An absolute link names the tree's
    file (openat2 RESOLVE_IN_ROOT); without openat2 it is refused, saying why, and this machine's file of that
    name (here one that says "host") is never read in its place."""
    monkeypatch.setattr(trust, "_openat2_missing", not openat2)
    host = tmp_path / "host"
    host.mkdir()
    (host / "f").write_text("host\n")
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / str(host).lstrip("/")).mkdir(parents=True)
    (tree / str(host).lstrip("/") / "f").write_text("tree\n")
    (tree / "etc" / "plain").write_text("plain\n")
    (tree / "etc" / "rel").symlink_to("../../../etc/plain")  # `..` above the root stays at the root
    (tree / "etc" / "abs").symlink_to(host / "f")
    (tree / "etc" / "fifo").symlink_to("plain2")
    os.mkfifo(tree / "etc" / "plain2")
    assert trust.read_in_root(str(tree), "/etc/plain", 100) == b"plain\n"
    assert trust.read_in_root(str(tree), "etc/rel", 100) == b"plain\n"
    with pytest.raises(trust.Untrusted, match="a named pipe, not a regular file"):  # opened without blocking
        trust.read_in_root(str(tree), "/etc/fifo", 100)
    with pytest.raises(FileNotFoundError):
        trust.read_in_root(str(tree), "/etc/gone", 100)
    if openat2:
        assert trust.read_in_root(str(tree), "/etc/abs", 100) == b"tree\n"
        return
    with pytest.raises(OSError) as refused:
        trust.read_in_root(str(tree), "/etc/abs", 100)
    assert refused.value.errno == errno.EXDEV
    assert f"a symbolic link to {host / 'f'} (an absolute one)" in refused.value.strerror
    assert "no openat2 (Linux 5.6)" in refused.value.strerror and "does not read this machine's file" in (
        refused.value.strerror)


def test_a_link_swapped_back_to_a_directory_between_the_open_and_the_look_is_a_change_not_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's loop exchanging a directory on the way with a link (renameat2 RENAME_EXCHANGE): the walk's open
    met the link (ENOTDIR under O_DIRECTORY) and its look met the directory again, so the ENOTDIR went up as it
    was and `mounts rollback` ended in "internal error". Either way the path changed: ELOOP, as openat2 says."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "elsewhere").mkdir()
    os.rename(tmp_path / "d", tmp_path / "d.real")
    (tmp_path / "d").symlink_to("elsewhere")
    real_lstat = os.lstat

    def swapped_back(path, *args, **kwargs):  # the loop's next exchange, between the open and the look
        if path == "d" and os.path.islink(tmp_path / "d"):
            os.unlink(tmp_path / "d")
            os.rename(tmp_path / "d.real", tmp_path / "d")
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", swapped_back)
    with pytest.raises(trust.Untrusted, match="changed while tunectl looked at it"):
        trust.open_listed(str(tmp_path / "d" / "f"), checked=True, links=False)
    (tmp_path / "g").write_text("")
    with pytest.raises(NotADirectoryError):  # a file that stays one is no change
        trust.open_listed(str(tmp_path / "g" / "f"), checked=True, links=False)


def test_open_walked_opens_only_the_kinds_asked_for_and_never_blocks(tmp_path: Path) -> None:
    """bench's one open of its target: a named pipe, /dev/zero (through the user's own link), a directory: refused
    before any open (a pipe opened by name blocked for ever); a file opens, and reads block as files do."""
    import stat

    data = tmp_path / "data"
    data.write_bytes(b"x" * 10)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "link").symlink_to(data)  # the user's own link: followed
    regular = frozenset({stat.S_IFREG})
    for name, found in (("pipe", "a named pipe, not a regular file"), ("dir", "a directory, not a regular file"),
                        ("zero", "a character device, not a regular file")):
        with pytest.raises(trust.Untrusted, match=found):
            trust.open_walked(str(tmp_path / name), regular)
    with pytest.raises(FileNotFoundError):
        trust.open_walked(str(tmp_path / "missing"), regular)
    for name in ("data", "link"):
        fd, st = trust.open_walked(str(tmp_path / name), regular)
        try:
            assert (st.st_ino, st.st_size, os.read(fd, 20)) == (data.stat().st_ino, 10, b"x" * 10)
            assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
        finally:
            os.close(fd)


def test_open_walked_says_what_stands_at_the_path_it_looked_at_not_to_move_it(tmp_path: Path) -> None:
    """The type refusal's hint was "move PATH aside", PATH as given: for "/x/.." (abspath made it "/x"'s parent,
    looked at and refused there) it said to move "/x/.." aside, and for a target the user chose it said to move it
    rather than what to name. It now says what to name and what the path looked at is."""
    import stat

    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "up").symlink_to("d/..")  # the user's own link: its target ends at a directory by ".."
    (tmp_path / "top").symlink_to("/")
    block = frozenset({stat.S_IFBLK})
    with pytest.raises(trust.Untrusted) as refused:
        trust.open_walked(f"{tmp_path}/d/..", block)
    assert (refused.value.found, refused.value.hint) == ("a directory, not a block device",
                                                         f"name a block device; {tmp_path} is a directory")
    with pytest.raises(trust.Untrusted) as refused:
        trust.open_walked(str(tmp_path / "pipe"), block)
    assert refused.value.hint == f"name a block device; {tmp_path}/pipe is a named pipe"
    for name in ("up", "top"):  # the walk looks at no last component: the directory it ends on
        with pytest.raises(trust.Untrusted, match="a directory, not a block device"):
            trust.open_walked(str(tmp_path / name), block)


def test_a_walk_that_ends_by_a_link_to_the_root_looks_at_the_root_not_the_link(tmp_path: Path) -> None:
    """A link to "/" as the last component left the walk's look at the link: Landed("/", the link's lstat), which a
    caller comparing it with what it opens at "/" (`open_landed`) took as a change."""
    (tmp_path / "top").symlink_to("/")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "up").symlink_to("..")
    for path, lands in ((tmp_path / "top", Path("/")), (tmp_path / "d" / "up", tmp_path)):
        landed = trust.walk(str(path))
        assert landed.path == str(lands) and landed.st is not None
        assert (landed.st.st_ino, landed.st.st_mode) == (lands.stat().st_ino, lands.stat().st_mode), path
    fd = trust.open_landed(trust.walk(str(tmp_path / "top")))
    assert fd is not None
    os.close(fd)
