"""A listed name with something mounted on it, in a directory where the replay opens names without a look (a real
nodev mount, root's directory): the open crosses no mount on the name (openat2 RESOLVE_NO_XDEV).

"On a nodev mount no device node can be opened" holds for the directory's own mount only: a device node
bind-mounted over a listed name brings its own mount, which allows devices, and an open that crossed it would reach
the driver with no look first. Here the node (/dev/null's numbers: harmless were it opened) is made on a mount that
allows devices and bind-mounted over a listed file; whether it is opened is watched with inotify (IN_OPEN) on the
directory it was made in, where an open through the bind mount is seen. The list's device is flash (rotational 0):
no inode pass looks first, so the data pass meets the name unjudged, by the compiled pass and by the Python loop.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.attacker import Opens
from tests.harness import run_cli, run_process
from tests.root.preload.test_preload_nodev import mounted  # noqa: F401 (a fixture)
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import read_list

pytestmark = pytest.mark.root


@pytest.mark.parametrize("files", [3, 300], ids=["small-list", "directories-in-the-compiled-pass"])
def test_a_device_node_mounted_over_a_listed_name_is_never_opened(tmp_path: Path, mounted,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """3 files: the small-list path (directories walked by ListedOpener); 300: the compiled pass decides the
    directory itself (decide_directory), and the names mounted over stand at several places of a 256-file span."""
    mnt, _ = mounted
    d = mnt / "d"
    d.mkdir(mode=0o755)
    for i in range(files):
        (d / f"f{i:03}").write_bytes(os.urandom(8192 if files < 10 else 512))
    os.sync()
    lst = tmp_path / "d.list"
    done = run_process("-q", "preload", "collect", str(d), "-o", str(lst))
    assert done.code == 0, done.err
    listed = [e.path for e in read_list(str(lst)).entries]  # in the list's order (directory order), as replayed
    over = [listed[i] for i in ((1,) if files < 10 else (1, 20, 40, 270))]
    src = tmp_path / "src"  # on a mount that allows devices
    src.mkdir()
    os.mknod(src / "node", 0o644 | 0o020000, os.makedev(1, 3))
    assert os.statvfs(d).f_flag & os.ST_NODEV and not os.statvfs(src).f_flag & os.ST_NODEV
    watch = Opens(src)
    try:
        for path in over:
            subprocess.run(["mount", "--bind", str(src / "node"), path], check=True, capture_output=True)
            assert os.path.ismount(path) and os.stat(path).st_rdev == os.makedev(1, 3)
        for compiled in (True, False):
            if not compiled:
                monkeypatch.setattr(replay_module, "_datapass", None)  # the Python loop alone
            watch.take()
            done = (run_process if compiled else run_cli)("--json", "preload", "replay", str(lst))
            assert done.code == 0, done.err  # changed files are reported, not an error (exit 0)
            assert done.doc["files"] == files - len(over), done.doc
            assert sorted((s["path"], s["status"]) for s in done.doc["skipped"]) == \
                sorted((path, "changed") for path in over), done.doc
            assert all("mounted over" in s["reason"] for s in done.doc["skipped"]), done.doc
            assert watch.take() == [], compiled  # the node was never opened through a mount
    finally:
        watch.close()
        for path in over:
            subprocess.run(["umount", path], check=False, capture_output=True)


def test_collect_never_opens_a_device_node_mounted_over_a_name_in_its_tree(tmp_path: Path) -> None:
    """collect lists a tree by d_type, the name's own type: a device node bind-mounted over a regular file's name
    reads as a regular file there. Its open crosses no mount (EXDEV): what is mounted is looked at through it first,
    a device never opened nor listed; a regular file mounted over a name is listed as before."""
    tree, src = tmp_path / "tree", tmp_path / "src"  # both on a mount that allows devices
    tree.mkdir()
    src.mkdir()
    for name in ("a", "node", "reg"):
        (tree / name).write_bytes(os.urandom(4096))
    os.mknod(src / "node", 0o644 | 0o020000, os.makedev(1, 3))
    (src / "reg").write_bytes(os.urandom(4096))
    watch = Opens(src)
    mounts = [tree / "node", tree / "reg"]
    try:
        for name in mounts:
            subprocess.run(["mount", "--bind", str(src / name.name), str(name)], check=True, capture_output=True)
        watch.take()
        done = run_process("--json", "preload", "collect", str(tree), "-o", str(tmp_path / "t.list"))
        assert done.code == 0, done.err
        opened = watch.take()
        assert "node" not in opened and "reg" in opened, opened  # the device never opened; the file read through
        listed = {e.path: e.inode for e in read_list(str(tmp_path / "t.list")).entries}
        assert listed == {str(tree / "a"): os.stat(tree / "a").st_ino, str(tree / "reg"): os.stat(src / "reg").st_ino}
    finally:
        watch.close()
        for name in mounts:
            subprocess.run(["umount", str(name)], check=False, capture_output=True)
