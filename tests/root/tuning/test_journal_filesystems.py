"""The journal on a real full file system: a tiny tmpfs mounted under the state directory (root only)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.journal_helpers import Pair, assert_state_error
from tests.tuning_helpers import Tunectl

pytestmark = pytest.mark.root

MOUNT = shutil.which("mount")


@pytest.mark.skipif(os.geteuid() != 0 or MOUNT is None, reason="needs root: mounts a tiny tmpfs")
def test_full_disk_on_a_real_tiny_tmpfs(pair: Pair, tmp_path: Path) -> None:
    """ENOSPC from a real filesystem: a 64 KiB tmpfs, filled, under the state directory."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        state = mnt / "state"
        run = Tunectl(pair.tree, state, [pair.base / "profiles"])
        assert run("apply", "-p", "p1").code == 0
        before = pair.snap()
        with open(mnt / "filler", "wb", buffering=0) as f, pytest.raises(OSError) as full:
            while True:
                f.write(b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
        r = Tunectl(pair.tree, state, [pair.base / "profiles"])("apply", "-p", "p2")
        assert_state_error(r, "No space left on device", "free some space")
        assert pair.snap() == before
        os.unlink(mnt / "filler")
        assert Tunectl(pair.tree, state, [pair.base / "profiles"])("rollback").code == 0
        assert pair.snap() == pair.originals
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
