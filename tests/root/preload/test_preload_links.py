"""Root never looks a listed name up through another user's directory link (#30 probe): a link there, into an
automount point, would have a boot-time replay trigger a mount as root before the open refused the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import run_process
from tunectl.system.trust import Untrusted, open_listed

pytestmark = pytest.mark.root

NOBODY = 65534


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """(a listed file, the list): the file's directory then swapped for nobody's link to a directory without it."""
    d = tmp_path / "d"
    d.mkdir(mode=0o755)
    listed = d / "f"
    listed.write_bytes(os.urandom(8192))
    lst = tmp_path / "d.list"
    done = run_process("-q", "preload", "collect", str(d), "-o", str(lst))
    assert done.code == 0, done.err
    elsewhere = tmp_path / "elsewhere"  # stands in for /net/HOST: what is looked up there is the harm
    elsewhere.mkdir()
    os.rename(d, tmp_path / "d.old")
    os.symlink(elsewhere, d)
    os.lchown(d, NOBODY, NOBODY)
    return listed, lst


def test_open_listed_does_not_look_a_name_up_through_another_users_link(tmp_path: Path) -> None:
    listed, _ = _tree(tmp_path)
    # a look by the whole path (lstat) resolved nobody's link and said the name was missing in its target
    with pytest.raises(Untrusted) as e:
        open_listed(str(listed))
    assert f"{listed.parent} on its way: a symbolic link owned by nobody" in e.value.found, e.value.found


def test_a_replay_refuses_a_listed_directory_swapped_for_another_users_link_without_looking_through_it(
        tmp_path: Path) -> None:
    listed, lst = _tree(tmp_path)
    done = run_process("--json", "preload", "replay", str(lst), timeout=60)
    assert done.code == 0, done.err
    (skip,) = done.doc["skipped"]
    assert skip["path"] == str(listed) and skip["status"] == "changed", skip  # not "vanished": not looked for there
    assert "owned by nobody" in skip["reason"], skip
