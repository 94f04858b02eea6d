"""`trust.open_as_looked`: the one open after a look of every walk by descriptor (a tree's top, the walk's steps,
collect's subdirectories, the temp sweep). What stands at the name now must be what was looked at."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunectl.system import trust

FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@pytest.fixture
def d(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, trust.DIR_READ)
    before = len(os.listdir("/proc/self/fd"))
    yield fd
    assert len(os.listdir("/proc/self/fd")) == before, "a descriptor left open"
    os.close(fd)


def _look(d: int, name: str) -> os.stat_result:
    return os.stat(name, dir_fd=d, follow_symlinks=False)


@pytest.mark.parametrize(("make", "flags"), [("file", FILE), ("dir", trust.DIR_READ)])
def test_what_was_looked_at_is_opened(tmp_path: Path, d: int, make: str, flags: int) -> None:
    (tmp_path / "x").mkdir() if make == "dir" else (tmp_path / "x").write_text("x")
    look = _look(d, "x")
    fd = trust.open_as_looked(d, "x", look, flags)
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == look.st_ino
    finally:
        os.close(fd)


@pytest.mark.parametrize("flags", [FILE, trust.DIR_READ])
def test_another_file_of_the_same_type_is_refused(tmp_path: Path, d: int, flags: int) -> None:
    for name in ("x", "other"):
        if flags & os.O_DIRECTORY:
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(name)
        if name == "x":
            look = _look(d, "x")
    if flags & os.O_DIRECTORY:
        (tmp_path / "x").rmdir()
    os.rename(tmp_path / "other", tmp_path / "x")  # another inode at the name since the look
    assert trust.open_as_looked(d, "x", look, flags) is None


def test_another_type_is_refused(tmp_path: Path, d: int) -> None:
    (tmp_path / "x").mkdir()
    look = _look(d, "x")
    (tmp_path / "x").rmdir()
    (tmp_path / "x").write_text("now a file")
    assert trust.open_as_looked(d, "x", look, trust.DIR_READ) is None  # ENOTDIR
    (tmp_path / "y").write_text("a file")
    look = _look(d, "y")
    (tmp_path / "y").unlink()
    os.mkfifo(tmp_path / "y")  # opened without blocking, then refused by its type and inode, never read
    assert trust.open_as_looked(d, "y", look, FILE) is None


@pytest.mark.parametrize("flags", [FILE, trust.DIR_READ])
def test_a_link_at_the_name_is_never_followed(tmp_path: Path, d: int, flags: int) -> None:
    target = tmp_path / "target"
    target.mkdir() if flags & os.O_DIRECTORY else target.write_text("x")
    # the look saw the very thing the link now points to: only O_NOFOLLOW tells them apart
    look = _look(d, "target")
    (tmp_path / "x").symlink_to(target)
    assert trust.open_as_looked(d, "x", look, flags) is None  # ELOOP, or ENOTDIR with O_DIRECTORY


def test_a_name_gone_since_the_look_is_the_callers_vanished(tmp_path: Path, d: int) -> None:
    (tmp_path / "x").write_text("x")
    look = _look(d, "x")
    (tmp_path / "x").unlink()
    with pytest.raises(FileNotFoundError):
        trust.open_as_looked(d, "x", look, FILE)


def test_an_absolute_name_without_a_directory(tmp_path: Path, d: int) -> None:
    (tmp_path / "x").mkdir()
    look = os.lstat(tmp_path / "x")
    fd = trust.open_as_looked(None, str(tmp_path / "x"), look, trust.DIR_READ)
    assert fd is not None
    os.close(fd)
