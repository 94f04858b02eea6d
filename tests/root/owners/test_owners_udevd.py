"""Owners on real loop devices with a real udevd (root only): one tuned by tunectl, one by a foreign udev rule in
/run/udev/rules.d, one by a sysfs.conf line (under a configuration root whose /run and /usr are the machine's),
one left at the kernel's default after a queue-limit write re-derived its read-ahead on this kernel."""

from __future__ import annotations

import json
import os

import pytest

from tests.harness import run_cli
from tests.loopdev import sysfs_read, sysfs_write
from tests.udevd import change, loops
from tunectl.attributes import derived_read_ahead_kb

pytestmark = pytest.mark.root

PROFILE = "name: owners-it\nclasses:\n  loop: {read_ahead_kb: 1024}\n"


def _config_root(tmp_path):
    """/etc of our own (sysfs.conf), the machine's udev rules directories, /run and /usr."""
    root = tmp_path / "config"
    (root / "etc" / "udev").mkdir(parents=True)
    for d in ("run", "usr"):
        (root / d).symlink_to(f"/{d}")
    if os.path.isdir("/etc/udev/rules.d"):
        (root / "etc" / "udev" / "rules.d").symlink_to("/etc/udev/rules.d")
    return root


def test_status_verify_and_doctor_name_each_owner(tmp_path, rules) -> None:
    (tmp_path / "p.yaml").write_text(PROFILE)
    config = _config_root(tmp_path)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_CONFIG_ROOT": str(config),
           "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with loops(tmp_path / "img", 4, [None] * 4, rules) as (ours, foreign, conf, kernel):
        assert run_cli("apply", "-p", str(tmp_path / "p.yaml"), ours, "--json", env=env).code == 0
        rules.write(f'ACTION=="add|change", KERNEL=="{foreign}", ATTR{{queue/read_ahead_kb}}="512"\n')
        change(foreign)
        assert sysfs_read(foreign, "queue/read_ahead_kb") == "512"
        (config / "etc" / "sysfs.conf").write_text(f"# sysfsutils\nblock/{conf}/queue/read_ahead_kb = 256\n")
        sysfs_write(conf, "queue/read_ahead_kb", "256")  # what sysfsutils wrote at boot
        # The kernel's own rule: a queue-limit write derives read-ahead again (6.17+: raises a smaller value).
        sysfs_write(kernel, "queue/read_ahead_kb", "4")
        sysfs_write(kernel, "queue/rotational", sysfs_read(kernel, "queue/rotational"))
        derived = derived_read_ahead_kb(os.uname().release, sysfs_read(kernel, "queue/rotational") == "1",
                                        int(sysfs_read(kernel, "queue/optimal_io_size")),
                                        int(sysfs_read(kernel, "queue/max_sectors_kb")))
        assert int(sysfs_read(kernel, "queue/read_ahead_kb")) == derived

        status = run_cli("status", "--all", "--json", env=env)
        assert status.code == 0, status.text
        owners = {d["name"]: d["owners"]["read_ahead_kb"] for d in status.doc["devices"]}
        assert owners[ours]["kind"] == "tunectl" and owners[ours]["profile"].endswith("p.yaml"), owners[ours]
        assert owners[foreign]["kind"] == "udev-rule" and owners[foreign]["where"] == f"{rules.path}:1"
        assert owners[conf]["kind"] == "sysfs.conf" and owners[conf]["where"] == "/etc/sysfs.conf:2"
        assert owners[kernel]["kind"] == "kernel-default" and f"{derived} KiB" in owners[kernel]["detail"]
        text = run_cli("status", "--all", "-v", env=env).text
        assert f"{rules.path}:1 writes 512" in text and "sysfs.conf (sysfsutils) /etc/sysfs.conf:2" in text

        verify = run_cli("verify", "-p", str(tmp_path / "p.yaml"), ours, foreign, conf, kernel, "--json", env=env)
        assert verify.code == 1
        by_device = {s["device"]: s["owner"]["kind"] for s in verify.doc["settings"]}
        assert by_device == {ours: "tunectl", foreign: "udev-rule", conf: "sysfs.conf", kernel: "kernel-default"}

        doctor = run_cli("doctor", "-p", str(tmp_path / "p.yaml"), ours, foreign, conf, kernel, "--json", env=env)
        assert doctor.code == 1, doctor.text
        undone = {(w["device"], w["writer"]["kind"]): w["undoes_at"] for w in doctor.doc["writers"] if w["undoes"]}
        assert undone == {(foreign, "udev-rule"): ["boot", "hotplug"], (conf, "sysfs.conf"): ["boot"]}
        assert json.dumps(doctor.doc)  # a document, validated against its schema by run_cli
