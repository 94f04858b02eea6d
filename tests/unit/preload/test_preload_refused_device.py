"""A block device the system refuses even to root (a device cgroup, a container or sandbox: this machine's own
/dev/vda, EPERM to root): collect's note said only "opening its block device failed: Operation not permitted", as
if a user had run it, and nothing of what to do. The note names the node, says root was refused and what to do."""

from __future__ import annotations

import errno
import os

import pytest

from tunectl.preload import metadata
from tunectl.system.sysfs import Sysfs


def refused(code: int):  # noqa: ANN201
    def open_device(sysfs: Sysfs, dev_root: str, devnum: str) -> int:
        raise OSError(code, os.strerror(code), f"{dev_root}/vda")
    return open_device


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES], ids=["eperm", "eacces"])
def test_a_device_refused_to_root_is_said_so_with_what_to_do(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(metadata, "filesystem_types", lambda devices, proc_root: dict.fromkeys(devices, "ext4"))
    monkeypatch.setattr(metadata, "open_device", refused(code))
    found, notes = metadata.collect(["254:0"], Sysfs("/sys"), "/dev", "/proc")
    assert found == {}
    assert notes == [f"metadata of 254:0 (ext4) not recorded: opening its block device /dev/vda failed: "
                     f"{os.strerror(code)} even to root: this system's policy refuses the device (a device cgroup, "
                     "a container or sandbox, a security module, or /dev mounted nodev); let root read it, or run "
                     "where root may"], notes
    done = metadata.replay({"254:0": [(0, 4096)]}, {}, Sysfs("/sys"), "/dev")
    assert done.notes == [f"metadata of 254:0 skipped: opening its block device /dev/vda failed: {os.strerror(code)}"
                          " even to root: this system's policy refuses the device (a device cgroup, a container or "
                          "sandbox, a security module, or /dev mounted nodev); let root read it, or run where root "
                          "may"], done.notes


def test_a_user_is_told_it_needs_root_and_another_failure_names_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(metadata, "filesystem_types", lambda devices, proc_root: dict.fromkeys(devices, "ext4"))
    monkeypatch.setattr(metadata, "open_device", refused(errno.EPERM))
    assert metadata.collect(["254:0"], Sysfs("/sys"), "/dev", "/proc")[1] == [
        "metadata of 254:0 (ext4) not recorded: opening its block device needs root"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(metadata, "open_device", refused(errno.ENOENT))
    assert metadata.collect(["254:0"], Sysfs("/sys"), "/dev", "/proc")[1] == [
        "metadata of 254:0 (ext4) not recorded: opening its block device /dev/vda failed: No such file or directory"]
