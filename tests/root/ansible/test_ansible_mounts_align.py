"""The tunectl module's mounts: and alignment: on real loop devices (root): check, fix with --check --diff, remount.

Every loop device, filesystem and mount is this test's own (under its temp directory); the profile's rules
match only those, and the fstab is a scratch file.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible_helpers import REPO, needs_ansible, playbook, tunectl_wrapper
from tests.loopdev import loop_devices

pytestmark = [pytest.mark.root, pytest.mark.ansible, needs_ansible]


def live_options(target: Path) -> list[str]:
    """The per-mount options of `target` as the kernel shows them in mountinfo."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if fields[4] == str(target):
            return fields[5].split(",")
    raise AssertionError(f"{target} is not mounted")


@contextlib.contextmanager
def ext4_mounted(dev: str, target: Path, options: str) -> Iterator[None]:
    subprocess.run(["mkfs.ext4", "-q", "-F", f"/dev/{dev}"], check=True, capture_output=True)
    target.mkdir(parents=True)
    subprocess.run(["mount", "-t", "ext4", "-o", options, f"/dev/{dev}", str(target)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


def role_vars(tmp: Path, profile: Path, loops: list[str], **extra) -> dict:
    return dict({"tunectl_profile": str(profile), "tunectl_devices": loops, "tunectl_verify": False,
                 "tunectl_executable": str(tunectl_wrapper(tmp)),
                 "tunectl_env": {"TUNECTL_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(REPO)}}, **extra)


def test_mounts_check_fails_on_drift_fix_shows_the_fstab_diff_in_check_mode_then_remounts(tmp_path):
    mnt = tmp_path / "mnt"
    target = mnt / "data"
    profile = tmp_path / "mounts.yaml"
    profile.write_text(f"name: ansible-mounts\nmounts:\n  - match: {{mountpoint: '{mnt}/*'}}\n    options: [noatime]\n")
    with loop_devices(tmp_path, [{"size_mb": 32}]) as loops, ext4_mounted(loops[0], target, "relatime"):
        fstab = tmp_path / "fstab"
        fstab.write_text(f"# scratch fstab\n/dev/{loops[0]}  {target}  ext4  relatime  0 2\n")
        before = fstab.read_bytes()
        extra = {"tunectl_fstab": str(fstab)}

        check = playbook(tmp_path, role_vars(tmp_path, profile, loops, tunectl_mounts="check", **extra))
        assert check.rc == 2, check.text
        status, body = check.task("Tunectl state=applied")
        assert status == "fatal"
        assert f"mounts: {target}: live: +noatime; fstab: +noatime" in body, body

        dry = playbook(tmp_path, role_vars(tmp_path, profile, loops, tunectl_mounts="fix", **extra), "--check", "--diff")
        assert dry.rc == 0, dry.text
        status, body = dry.task("Tunectl state=applied")
        assert status == "changed"
        line = f"/dev/{loops[0]}  {target}  ext4"
        assert f"-{line}  relatime  0 2\n" in body and f"+{line}  noatime   0 2\n" in body, body
        assert fstab.read_bytes() == before  # check mode wrote nothing
        assert "relatime" in live_options(target)

        fix = playbook(tmp_path, role_vars(tmp_path, profile, loops, tunectl_mounts="fix", tunectl_remount=True,
                                           **extra))
        assert fix.rc == 0, fix.text
        assert fix.task("Tunectl state=applied")[0] == "changed"
        assert fstab.read_text() == f"# scratch fstab\n{line}  noatime   0 2\n"  # column alignment kept
        assert "noatime" in live_options(target) and "relatime" not in live_options(target)

        again = playbook(tmp_path, role_vars(tmp_path, profile, loops, tunectl_mounts="check", **extra))
        assert again.rc == 0, again.text
        assert again.recap()["changed"] == 0


def test_alignment_check_names_the_misaligned_partition(tmp_path):
    profile = tmp_path / "align.yaml"
    profile.write_text("name: ansible-align\nalignment: {boundary_kib: 1024}\n")
    with loop_devices(tmp_path, [{"size_mb": 64}]) as loops:
        dev = f"/dev/{loops[0]}"
        try:
            subprocess.run(["parted", "-s", dev, "mklabel", "gpt", "mkpart", "one", "34s", "20MiB",
                            "mkpart", "two", "32MiB", "60MiB"], check=True, capture_output=True)
            run = playbook(tmp_path, role_vars(tmp_path, profile, loops, tunectl_alignment="check"))
            assert run.rc == 2, run.text
            status, body = run.task("Tunectl state=applied")
            assert status == "fatal"
            assert (f"alignment: {loops[0]} partition 1 starts 17408 bytes past a 1048576-byte boundary; "
                    "nearest aligned start: sector 2048") in body
            assert "partition 2" not in body
        finally:
            subprocess.run(["partx", "-d", dev], check=False, capture_output=True)
