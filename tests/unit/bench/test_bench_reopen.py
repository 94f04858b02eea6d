"""Io.real reads the target through a new open of the file held open since the start, one per read.

An open file's read-ahead window is copied from read_ahead_kb when it is opened, so each point's read needs an
open taken after that point's read_ahead_kb is set (tests/root/bench: the requests a loop device's stat counts
fall as read-ahead grows). The new open must still be the file the sweep opened and judged, not the name again.
"""

from __future__ import annotations

import os
from pathlib import Path

from tunectl.bench.runner import Io
from tunectl.bench.stack import Opened


def _no_run(*args, **kwargs):
    raise AssertionError("fio is not run here")


def test_each_read_is_a_new_open_of_the_held_file_not_of_its_name(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"x" * 5000)
    held = os.open(target, os.O_RDONLY)
    try:
        os.lseek(held, 7, os.SEEK_SET)
        os.rename(target, tmp_path / "moved")
        target.write_bytes(b"y" * 10)  # another file at the name since the open: never read
        io = Io.real(_no_run, Opened(str(target), held))
        fds = len(os.listdir("/proc/self/fd"))
        assert io.read(str(target), 1 << 20, 4096)[0] == 5000
        assert io.read(str(target), 1 << 20, 4096)[0] == 5000  # from its start again: a new open each time
        assert os.lseek(held, 0, os.SEEK_CUR) == 7  # not read through the held open file (its read-ahead is old)
        assert len(os.listdir("/proc/self/fd")) == fds  # each new open closed
    finally:
        os.close(held)
