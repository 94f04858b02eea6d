"""A lookup scoped below a root (openat2 RESOLVE_BENEATH, RESOLVE_IN_ROOT) through `..` fails with EAGAIN when any
rename or mount anywhere on the machine happened meanwhile; tunectl opens again (a bounded number of times), so a
rename elsewhere does not make a fake tree's device vanish from status or an attribute read fail."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunectl.system import trust
from tunectl.system.sysfs import Sysfs


def _tree(root: Path) -> None:
    """A sysfs-like tree: block/x is a link to ../devices/x, as in /sys."""
    (root / "devices" / "x").mkdir(parents=True)
    (root / "devices" / "x" / "dev").write_text("8:0\n")
    (root / "block").mkdir()
    (root / "block" / "x").symlink_to("../devices/x")


def test_a_rename_elsewhere_does_not_fail_a_read_through_a_link_with_dotdot(tmp_path: Path) -> None:
    # Before: ~25 of 10,000 reads failed (50 of 20,000) with EAGAIN ("Resource temporarily unavailable") beside one process
    # renaming a file in another directory; `status` on a fake tree then left a device out as vanished.
    _tree(tmp_path / "sys")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a").write_text("")
    renaming = subprocess.Popen([sys.executable, "-c", "import os, sys\nwhile True:\n"
                                 " os.rename(sys.argv[1] + '/a', sys.argv[1] + '/b')\n"
                                 " os.rename(sys.argv[1] + '/b', sys.argv[1] + '/a')", str(tmp_path / "elsewhere")])
    try:
        sysfs = Sysfs(tmp_path / "sys", confined=True)
        while not (tmp_path / "elsewhere" / "b").exists():  # the renames have started
            assert renaming.poll() is None
        failed = [e for e in (sysfs.read_or("block/x/dev", "failed") for _ in range(10_000)) if e != "8:0"]
    finally:
        renaming.kill()
        renaming.wait()
    assert failed == []


@pytest.fixture
def eagain_first(monkeypatch: pytest.MonkeyPatch):
    """openat2 answers EAGAIN the first `times[0]` calls, then as the kernel does; `calls` counts them."""
    state = {"times": 0, "calls": 0}
    real = ctypes.CDLL(None, use_errno=True).syscall

    def syscall(*args):  # noqa: ANN002, ANN202
        state["calls"] += 1
        if state["calls"] <= state["times"]:
            ctypes.set_errno(errno.EAGAIN)
            return -1
        return real(*args)

    monkeypatch.setattr(trust, "_syscall", syscall)
    monkeypatch.setattr(trust, "_openat2_missing", False)
    return state


def test_a_scoped_open_is_tried_again_after_eagain_a_bounded_number_of_times(tmp_path: Path, eagain_first) -> None:
    _tree(tmp_path)
    eagain_first["times"] = 5
    os.close(trust.open_beneath(tmp_path, "block/x/dev", os.O_RDONLY))
    assert eagain_first["calls"] == 6
    eagain_first.update(times=10**6, calls=0)  # EAGAIN for good (a lease held, a rename storm): said, not looped on
    with pytest.raises(BlockingIOError):
        trust.open_beneath(tmp_path, "block/x/dev", os.O_RDONLY)
    assert eagain_first["calls"] == trust._SCOPED_RETRIES + 1


def test_an_open_scoped_by_no_root_is_not_tried_again(tmp_path: Path, eagain_first) -> None:
    # RESOLVE_NO_SYMLINKS alone has no `..` check: an EAGAIN there is the file's own answer (a lease)
    (tmp_path / "f").write_text("")
    eagain_first["times"] = 1
    with pytest.raises(BlockingIOError):
        trust._openat2(trust._AT_FDCWD, str(tmp_path / "f"), os.O_RDONLY | os.O_CLOEXEC, trust._RESOLVE_NO_SYMLINKS)
    assert eagain_first["calls"] == 1
