"""#30: the compiled data pass and ListedOpener.directory decide alike on what only root can make: a real nodev
mount (tmpfs, mounted here) with directories of root, of another user, group- and world-writable, and the same on
a mount that allows devices (tests/unit/preload/test_preload_directories.py has the cases a user can make)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.root.preload.test_preload_nodev import nodev_mount
from tests.unit.preload.test_preload_directories import assert_decided_alike

pytestmark = pytest.mark.root

NOBODY = 65534


@pytest.fixture
def nodev(tmp_path: Path):
    """A tmpfs mounted nodev at tmp_path/mnt, and remount(options); unmounted however the test ends."""
    with nodev_mount(tmp_path / "mnt", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs") as remount:
        yield tmp_path / "mnt", remount


def test_both_decide_alike_on_a_nodev_mount_and_off_it(nodev) -> None:
    mnt, remount = nodev
    made = {"root": (0, 0o755), "group": (0, 0o775), "world": (0, 0o757), "sticky": (0, 0o1777),
            "other": (NOBODY, 0o755), "other-group": (0, 0o755)}
    for name, (uid, mode) in made.items():
        (mnt / name).mkdir()
        os.chown(mnt / name, uid, NOBODY if name == "other-group" else 0)
        os.chmod(mnt / name, mode)
    (mnt / "other" / "inside").mkdir()  # root's own, below another user's directory: judged by itself
    (mnt / "via").symlink_to(mnt / "root")
    os.lchown(mnt / "via", NOBODY, NOBODY)
    assert os.statvfs(mnt).f_flag & os.ST_NODEV
    # no look only in a directory of root's (or this user's, root here) that no group or other may write
    no_look = {"root": False, "group": True, "world": True, "sticky": True, "other": True, "other-group": False}
    cases = [(str(mnt), (True, False)), (str(mnt / "other" / "inside"), (True, False)),
             (str(mnt / "via"), (False, True)),
             *((str(mnt / name), (True, look)) for name, look in no_look.items())]
    assert_decided_alike(cases)
    remount("dev")  # the same directories on a mount that allows devices: every name is looked at
    assert not os.statvfs(mnt).f_flag & os.ST_NODEV
    assert_decided_alike([(d, (opened, True)) for d, (opened, _) in cases])
