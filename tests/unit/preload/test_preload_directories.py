"""#30: the compiled data pass opens and judges a run's directory itself (_datapass.c decide_directory), with the
rule ListedOpener.directory states in Python: both must decide every directory the same.

A directory's decision: opened (O_PATH) without following any link on the way or at its end, or (-1, look) for a
link on the way, or the error; and whether a name not checked is looked at before it is opened (no look only on a
nodev mount, in a directory owned by root or this user that no group or other may write). Here the cases a user
can make: links, group- and world-writable, sticky, missing, not a directory, too long, and "/"; other owners and
a real nodev mount are in tests/root/preload/test_preload_directory_owners.py.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.preload_helpers import need_datapass
from tunectl.preload import replay as replay_module
from tunectl.system.trust import ListedOpener

COMPILED = replay_module._datapass


def decided(directory: str, compiled: bool) -> tuple[bool, bool] | int:
    """(opened, look) as ListedOpener.directory or the compiled pass decides `directory`; the errno it fails with."""
    try:
        if compiled:
            fd, look = COMPILED.directory(directory)
        else:
            with ListedOpener() as opener:
                fd, look = opener.directory(directory)
                opener.dirs.clear()  # the descriptor is closed below, once
    except OSError as e:
        return e.errno
    if fd >= 0:
        os.close(fd)
    return fd >= 0, look


def assert_decided_alike(cases: Iterable[tuple[str, tuple[bool, bool] | int]]) -> None:
    """Each (directory, expected) decided so by both."""
    need_datapass(COMPILED, dict(os.environ))
    said = {d: (decided(d, False), decided(d, True)) for d, _ in cases}
    assert said == {d: (want, want) for d, want in cases}


def test_both_decide_every_directory_a_user_can_make_the_same(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir(mode=0o755)
    os.chmod(good, 0o755)
    modes = {"group": 0o775, "world": 0o757, "sticky": 0o1777, "private": 0o700}
    for name, mode in modes.items():
        (tmp_path / name).mkdir()
        os.chmod(tmp_path / name, mode)
    (tmp_path / "via").symlink_to(good)  # a link at the end
    (good / "sub").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    if os.statvfs(tmp_path).f_flag & os.ST_NODEV:
        pytest.skip("the test directory is mounted nodev (the root tests make a nodev mount of their own)")
    # not on a nodev mount: every name is looked at, whoever may write the directory
    cases = [(str(good), (True, True)), (str(good / "sub"), (True, True)), ("/", (True, True)),
             *((str(tmp_path / name), (True, True)) for name in modes),
             (str(tmp_path / "via"), (False, True)),  # a link at the end: (-1, look), opened one by one
             (str(tmp_path / "via" / "sub"), (False, True)),  # a link on the way
             (str(tmp_path / "gone"), errno.ENOENT), (str(tmp_path / "file"), errno.ENOTDIR),
             (str(tmp_path / ("x" * 300)), errno.ENAMETOOLONG)]
    assert_decided_alike(cases)


def test_the_replay_opens_the_run_directories_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled pass asks ListedOpener for no directory of a clean list (it decided them), and for every one when
    told not to decide (DIRECTORIES_COMPILED False, as a test that fakes a mount's flags sets it)."""
    from tests.unit.preload.test_preload_datapass import data_pass, entry_of

    need_datapass(COMPILED, dict(os.environ))
    entries = []
    for n in range(40):
        d = tmp_path / f"d{n // 4}"
        d.mkdir(exist_ok=True)
        (d / f"f{n}").write_bytes(b"v" * (n + 1))
        entries.append(entry_of(d / f"f{n}"))
    asked: list[str] = []
    real = ListedOpener.directory
    monkeypatch.setattr(ListedOpener, "directory", lambda self, d: (asked.append(d), real(self, d))[1])
    assert data_pass(monkeypatch, True, entries, b"\2" * 40) == (40, sum(range(41)), [])
    assert asked == []
    monkeypatch.setattr(replay_module, "DIRECTORIES_COMPILED", False)
    assert data_pass(monkeypatch, True, entries, b"\2" * 40) == (40, sum(range(41)), [])
    assert asked == [str(tmp_path / f"d{n}") for n in range(10)]
