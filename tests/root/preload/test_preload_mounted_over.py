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

pytestmark = pytest.mark.root


def test_a_device_node_mounted_over_a_listed_name_is_never_opened(tmp_path: Path, mounted,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    mnt, _ = mounted
    d = mnt / "d"
    d.mkdir(mode=0o755)
    for name in ("a", "node", "c"):
        (d / name).write_bytes(os.urandom(8192))
    os.sync()
    lst = tmp_path / "d.list"
    done = run_process("-q", "preload", "collect", str(d), "-o", str(lst))
    assert done.code == 0, done.err
    src = tmp_path / "src"  # on a mount that allows devices
    src.mkdir()
    os.mknod(src / "node", 0o644 | 0o020000, os.makedev(1, 3))
    assert os.statvfs(d).f_flag & os.ST_NODEV and not os.statvfs(src).f_flag & os.ST_NODEV
    subprocess.run(["mount", "--bind", str(src / "node"), str(d / "node")], check=True, capture_output=True)
    watch = Opens(src)
    try:
        assert os.path.ismount(d / "node") and os.stat(d / "node").st_rdev == os.makedev(1, 3)
        for compiled in (True, False):
            if not compiled:
                monkeypatch.setattr(replay_module, "_datapass", None)  # the Python loop alone
            watch.take()
            done = (run_process if compiled else run_cli)("--json", "preload", "replay", str(lst))
            assert done.code == 0, done.err  # changed files are reported, not an error (exit 0)
            assert done.doc["files"] == 2, done.doc
            assert [(s["path"], s["status"]) for s in done.doc["skipped"]] == [(str(d / "node"), "changed")], done.doc
            assert "mounted over" in done.doc["skipped"][0]["reason"], done.doc
            assert watch.take() == [], compiled  # the node was never opened through the mount
    finally:
        watch.close()
        subprocess.run(["umount", str(d / "node")], check=False, capture_output=True)
