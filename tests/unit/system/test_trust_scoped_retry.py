"""openat2 with RESOLVE_BENEATH or RESOLVE_IN_ROOT says EAGAIN when any rename on the system happens while it
resolves a ".." (every disk of a tree is a ``block/sda -> ../devices/...`` link): tried again, never taken as
the attribute's absence. Before, any user's rename loop made a tree's sda lose its class (planned as an SSD) or
vanish from plan and apply run by root with --sysfs-root (1 open in 65 failed under a user's renameat2 loop in
/tmp; none after)."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tunectl.system import trust
from tunectl.system.sysfs import Sysfs


@pytest.fixture
def eagain_first(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """openat2 fails EAGAIN the first 3 times a scoped open asks, as under a rename elsewhere; counts the calls."""
    trust._openat2(trust._AT_FDCWD, "/", os.O_PATH | os.O_DIRECTORY, 0)  # loads libc's syscall
    real, calls = trust._syscall, []

    def flaky(*args: object) -> int:
        calls.append(1)
        if len(calls) <= 3:
            ctypes.set_errno(errno.EAGAIN)
            return -1
        return real(*args)

    monkeypatch.setattr(trust, "_syscall", flaky)
    return calls


def test_a_scoped_open_that_says_eagain_is_tried_again(fake_tree: FakeTree, eagain_first: list[int]) -> None:
    assert Sysfs(fake_tree.root, confined=True).read("block/sda/queue/rotational") == "1"
    assert len(eagain_first) == 4


def test_an_unscoped_open_that_says_eagain_is_not(tmp_path: Path, eagain_first: list[int]) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError) as failed:
        trust._openat2(trust._AT_FDCWD, str(tmp_path / "f"), os.O_RDONLY, trust._RESOLVE_NO_SYMLINKS)
    assert failed.value.errno == errno.EAGAIN and len(eagain_first) == 1


def test_a_scoped_open_that_keeps_saying_eagain_ends_in_eagain(fake_tree: FakeTree, monkeypatch: pytest.MonkeyPatch,
                                                                eagain_first: list[int]) -> None:
    monkeypatch.setattr(trust, "_SCOPED_TRIES", 3)
    with pytest.raises(OSError) as failed:
        trust.open_beneath(fake_tree.root, "block/sda/queue/rotational", os.O_RDONLY)
    assert failed.value.errno == errno.EAGAIN and len(eagain_first) == 3
