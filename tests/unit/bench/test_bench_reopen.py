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


def test_a_stack_node_gone_before_its_cache_is_dropped_is_said_vanished_not_to_be_named(tmp_path: Path) -> None:
    """A node of the target's stack (a loop under it) removed mid-sweep got the hint for a target a user mistyped,
    "name a block device ...": the user named the target, not the node. The target's own miss keeps that hint."""
    import pytest

    from tunectl.errors import UsageError
    from tunectl.system import blockio

    gone = str(tmp_path / "loop9")
    with pytest.raises(UsageError) as said:
        blockio.drop_cached([], [gone])
    assert said.value.message == (f"cannot open {gone}: it vanished while tunectl measured (a device or file under "
                                  "the target removed or renamed)")
    assert said.value.hint == "run again once nothing adds or removes devices under the target"
    with pytest.raises(UsageError) as said:
        blockio.inspect(gone)
    assert said.value.hint is not None and said.value.hint.startswith("name a block device")
