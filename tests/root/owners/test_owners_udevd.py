"""Owners on real loop devices with a real udevd (root only): one tuned by tunectl, one by a foreign udev rule in
/run/udev/rules.d, one by a sysfs.conf line (under a configuration root holding a copy of the machine's rules),
one left at the kernel's default after a queue-limit write re-derived its read-ahead on this kernel."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.harness import run_cli
from tests.loopdev import sysfs_read, sysfs_write
from tests.udevd import change, loops
from tunectl.attributes import derived_read_ahead_kb

pytestmark = pytest.mark.root

PROFILE = "name: owners-it\nclasses:\n  loop: {read_ahead_kb: 1024}\n"


def _config_root(tmp_path):
    """/etc of our own (sysfs.conf); the machine's udev rules directories are copied in by `_take_rules`."""
    root = tmp_path / "config"
    (root / "etc" / "udev").mkdir(parents=True)
    return root


def _take_rules(root) -> None:
    """The machine's udev rules directories (/run's with this test's rule in it) copied into the tree as they are
    now, links kept: a link in a configuration root is resolved inside it, so the tree cannot link to the machine's."""
    for d in ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d"):
        if os.path.isdir(d):
            shutil.copytree(d, root / d.lstrip("/"), symlinks=True, dirs_exist_ok=True)


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
        _take_rules(config)
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
