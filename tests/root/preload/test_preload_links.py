"""Root never looks a listed name up through another user's directory link (#30 probe): a link there, into an
automount point, would have a boot-time replay trigger a mount as root before the open refused the path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.harness import run_process
from tunectl.preload.listfile import read_list
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


RUNS = 100  # before the walk went by descriptor, the private names showed in 1 run in 2 to 5


def test_collect_never_lists_through_a_subdirectory_another_user_exchanges_with_a_link(tmp_path: Path) -> None:
    """nobody exchanges a directory of the tree root walks with its link to root's private directory, in a loop
    (renameat2 RENAME_EXCHANGE): the walk lists nothing through the link, and no private name shows, as an entry
    or as a skipped (vanished) file, in any run."""
    import shutil
    import tempfile

    from tests import attacker
    from tests.harness import run_cli

    base = Path(tempfile.mkdtemp(prefix="tunectl-walk-", dir="/tmp"))  # pytest's tmp_path is closed to nobody
    proc = None
    try:
        os.chmod(base, 0o755)
        private = base / "private"
        private.mkdir(mode=0o700)
        for i in range(20):
            (private / f"secret-{i}").write_bytes(b"s" * 512)
        mine = base / "nobody"
        (mine / "tree" / "sub").mkdir(parents=True)
        (mine / "tree" / "kept").mkdir()
        for name in ("tree/sub/s1", "tree/sub/s2", "tree/kept/k1", "tree/kept/k2"):
            (mine / name).write_bytes(b"x" * 512)
        os.symlink(private, mine / "link")
        for path in (mine, mine / "tree", mine / "tree" / "sub", mine / "tree" / "kept", mine / "link",
                     *(mine / "tree").glob("*/*")):
            os.lchown(path, NOBODY, NOBODY)
        proc = attacker.start_exchange(base, mine / "tree" / "sub", mine / "link")
        passed_over = 0
        for _ in range(RUNS):
            lst = base / "out.list"
            done = run_cli("--json", "preload", "collect", str(mine / "tree"), "-o", str(lst))
            assert done.code == 0, done.err
            assert "secret" not in done.out + done.err + lst.read_text(), done.out + done.err
            listed = {Path(e.path).name for e in read_list(str(lst)).entries}
            assert {"k1", "k2"} <= listed, listed
            passed_over += "s1" not in listed
        print(f"{passed_over} of {RUNS} runs found sub swapped (passed over); no private name in any")
    finally:
        if proc is not None:
            attacker.stop(proc)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("target", ["directory", "file", "nothing", "pipe"])
def test_collect_of_a_path_through_another_users_link_lists_nothing_and_says_why(tmp_path: Path, target: str) -> None:
    # nobody's link to root's directory gave an empty list and exit 0 with no skipped line (the walk dropped the
    # refusal); nobody's link to root's file was followed and the file listed (realpath). A link to nothing or to
    # a pipe was looked through (stat) before the link was judged, and the skip named what was behind it.
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / "private").write_bytes(os.urandom(4096))
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    link = theirs / "lk"
    os.mkfifo(real / "pipe")
    os.symlink({"directory": real, "file": real / "private", "nothing": real / "missing", "pipe": real / "pipe"}[target],
               link)
    os.lchown(link, NOBODY, NOBODY)
    done = run_process("--json", "preload", "collect", str(link), "-o", str(tmp_path / "x.list"), timeout=60)
    assert done.code == 3, done.err  # refused: unreadable, a partial failure
    assert done.doc["files"] == 0, done.doc
    (skip,) = done.doc["skipped"]
    assert skip["path"] == str(link) and skip["status"] == "unreadable", skip
    assert "owned by nobody" in skip["reason"], skip
    assert "private" not in json.dumps(done.doc)
