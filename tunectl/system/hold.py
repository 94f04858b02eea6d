"""Devices a running command holds temporary values on: a small record in the state directory.

`tunectl bench` writes values it will restore (a read-ahead and scheduler sweep)
and holds the state lock throughout. While it runs, `verify` must not call those
values drift, so bench writes ``hold.json`` (root's, mode 0644, replaced
atomically through `tunectl.system.trust`) after it took the lock and removes
it when it ends. A record whose process is gone (bench killed by SIGKILL, a
crash) is ignored: its pid no longer runs, or runs another program that started
later. The lock file's line stays what it is: a message for the people waiting.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from tunectl.record import record
from tunectl.system import trust
from tunectl.system.state import HOLD, kernel_name

VERSION = 1
_MAX_BYTES = 1 << 20


@record(frozen=True)
class Hold:
    """`command` (pid `pid`, started at `started`: clock ticks since boot) holds values on `devices` (kernel names)."""

    command: str
    pid: int
    started: int | None
    devices: tuple[str, ...]

    def to_json(self) -> dict:
        return {"version": VERSION, "command": self.command, "pid": self.pid, "started": self.started,
                "devices": list(self.devices)}

    @classmethod
    def from_json(cls, data: object) -> Hold | None:
        """The record, or None when it is not one this tunectl wrote (another version, a hand edit)."""
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return None
        pid, started, devices = data.get("pid"), data.get("started"), data.get("devices")
        # A start time is required (bench writes one): without it any process now under the pid, pid 1 too, holds.
        if not (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and isinstance(devices, list)
                and all(kernel_name(d) for d in devices) and isinstance(data.get("command"), str)
                and isinstance(started, int) and not isinstance(started, bool)):
            return None
        return cls(data["command"], pid, started, tuple(devices))

    @property
    def alive(self) -> bool:
        """Whether the process that wrote the record still runs (the same process: its start time matches exactly;
        a start time that cannot be read, as under /proc hidepid=2, proves nothing, so drift is reported)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it runs, as another user
        return self.started is not None and start_time(self.pid) == self.started


def start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rpartition(b")")[2].split()
    try:
        return int(fields[19])  # field 22 counts from 1, and the first two (pid, comm) are cut off
    except (IndexError, ValueError):
        return None


@contextlib.contextmanager
def holding(directory: Path, command: str, devices: list[str]) -> Iterator[Hold]:
    """The record of this process holding `devices`, for as long as the block runs (called under the state lock)."""
    path = directory / HOLD
    hold = Hold(command, os.getpid(), start_time(os.getpid()), tuple(devices))
    trust.atomic_write(path, (json.dumps(hold.to_json(), sort_keys=True) + "\n").encode(), 0o644)
    try:
        yield hold
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def held(directory: Path) -> Hold | None:
    """The hold of a process that still runs, or None (no record, a dead process's, or one that cannot be trusted)."""
    try:
        raw = trust.read_regular(directory / HOLD, _MAX_BYTES, trusted=True)
        hold = Hold.from_json(json.loads(raw))
    except (OSError, trust.Untrusted, ValueError, RecursionError):
        return None
    return hold if hold is not None and hold.alive else None
