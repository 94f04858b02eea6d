"""Root never replays a list another user can have chosen (probe 6, item 1): the list names the files a replay
reads, and root reads any file into the page cache. Before, nobody's list naming /etc/shadow was replayed by root
with exit 0 and /etc/shadow came into the page cache. Its owner may still replay it; anyone may still show it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.preload_helpers import evict, fincore, make_files, replay_resident, tunectl

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a list another user owns is made with chown (root)")


@pytest.fixture
def shared_dir():
    """A directory nobody can walk into (pytest's tmp_path is root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix="tunectl-owner-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def _list_of(d: Path) -> tuple[Path, list[Path]]:
    files = make_files(d, {"a.bin": 256 << 10, "b.bin": 128 << 10})
    for f in files:
        f.chmod(0o644)
    lst = d / "their.list"
    made = tunectl("preload", "collect", *map(str, files), "-o", str(lst))
    assert made.code == 0, made.err
    evict(*files)
    return lst, files


def test_root_refuses_another_users_list_before_reading_any_file(shared_dir: Path) -> None:
    lst, files = _list_of(shared_dir)
    os.chown(lst, NOBODY, NOBODY)
    for argv in (("preload", "replay", str(lst)), ("-q", "preload", "replay", str(lst))):  # the lean path too
        r = tunectl(*argv)
        assert r.code == 2, r.err
        assert f"{lst}: owned by nobody (uid {NOBODY}), not root" in r.err
        assert f"sudo -u nobody tunectl preload replay {lst}" in r.err and f"chown root {lst}" in r.err
    assert fincore(*files) == {str(f): 0 for f in files}  # nothing was read
    shown = tunectl("preload", "show", str(lst))  # showing reads only the list
    assert shown.code == 0 and "2 files" in shown.out, shown.err


def test_root_refuses_a_list_others_may_write(shared_dir: Path) -> None:
    lst, files = _list_of(shared_dir)
    lst.chmod(0o664)
    r = tunectl("preload", "replay", "--json", str(lst))
    assert r.code == 2 and "mode 0664: writable by its group" in r.out and "chmod go-w" in r.out, r.out
    assert fincore(*files) == {str(f): 0 for f in files}


def test_its_owner_replays_it(shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check as its owner meets it: this process's euid is the list's owner. (A real seteuid here cannot
    import the codecs Python loads lazily from root's own tree; the reads are then root's, the check is the same.)"""
    lst, files = _list_of(shared_dir)
    os.chown(lst, NOBODY, NOBODY)
    monkeypatch.setattr(os, "geteuid", lambda: NOBODY)
    r, resident = replay_resident(lst, *files)
    assert r.code == 0, r.err
    assert resident == {str(f): f.stat().st_size for f in files}
