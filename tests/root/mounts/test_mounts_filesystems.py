"""`tunectl mounts` on real loop-backed ext4 and xfs mounts (root only).

Every mount is made under this test's own temp directory and unmounted in `finally`;
rules match only those mountpoints, so nothing else on the machine is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.loopdev import loop_devices, sysfs_write
from tunectl.context import Context
from tunectl.devices.resolve import Resolver
from tunectl.mounts.fstab import unescape

pytestmark = pytest.mark.root


def mountinfo_options(target: str) -> list[str]:
    """Per-mount and superblock options of the mount visible at `target`, straight from the kernel."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split(" ")
        if unescape(f[4]) == target:
            sep = f.index("-", 6)
            found = f[5].split(",") + [o for o in f[sep + 3].split(",") if o not in ("rw", "ro")]
    assert found is not None, f"{target} is not mounted"
    return found


@contextlib.contextmanager
def mounted(fs: list[tuple[str, str, Path, str]]) -> Iterator[None]:
    """mkfs and mount each (device, fstype, mountpoint, options); unmount all afterwards."""
    done: list[Path] = []
    try:
        for dev, fstype, target, options in fs:
            mkfs = ["mkfs.xfs", "-q", "-f"] if fstype == "xfs" else ["mkfs.ext4", "-q", "-F"]
            subprocess.run(mkfs + [f"/dev/{dev}"], check=True, capture_output=True)
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", fstype, "-o", options, f"/dev/{dev}", str(target)], check=True,
                           capture_output=True)
            done.append(target)
        yield
    finally:
        for target in reversed(done):
            subprocess.run(["umount", str(target)], check=False, capture_output=True)


def tunectl(tmp: Path, *argv: str) -> tuple[int, str, str]:
    r = run_cli(*argv, env=dict(os.environ, TUNECTL_STATE_DIR=str(tmp / "state")))
    return r.code, r.out, r.err


def blkid_uuid(dev: str) -> str:
    return subprocess.run(["blkid", "-s", "UUID", "-o", "value", f"/dev/{dev}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_ext4_and_xfs_check_fix_remount_confirmed_in_mountinfo(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    profile = tmp_path / "loops.yaml"
    profile.write_text(f"name: loops\nmounts:\n  - match: {{mountpoint: '{mnt}/*'}}\n"
                       "    options: [noatime, lazytime]\n    discard: online\n")
    with loop_devices(tmp_path, [{"size_mb": 64}, {"size_mb": 320}, {"size_mb": 64}]) as (ext, xfs, nodisc):
        sysfs_write(nodisc, "queue/discard_max_bytes", "0")  # this loop device can no longer discard
        assert Path(f"/sys/block/{nodisc}/queue/discard_max_bytes").read_text().strip() == "0"
        fs = [(ext, "ext4", mnt / "ext4", "relatime"), (xfs, "xfs", mnt / "x fs", "relatime"),
              (nodisc, "ext4", mnt / "nodiscard", "relatime")]
        with mounted(fs):
            fstab = tmp_path / "fstab"
            fstab.write_text(f"# test fstab\nUUID={blkid_uuid(ext)}  {mnt}/ext4  ext4  relatime  0 2\n"
                             f"/dev/{xfs}\t{mnt}/x\\040fs\txfs\tdefaults\t0\t2\n"
                             f"/dev/{nodisc} {mnt}/nodiscard ext4 relatime,nodiratime 0 2\n")
            code, out, err = tunectl(tmp_path, "mounts", "check", "-p", str(profile), "--fstab", str(fstab), "--json")
            assert code == 1, err
            doc = {f["target"]: f for f in json.loads(out)["filesystems"] if f["target"].startswith(str(mnt))}
            assert doc[f"{mnt}/ext4"]["disks"] == [ext] and doc[f"{mnt}/ext4"]["fstab_line"] == 2
            assert doc[f"{mnt}/ext4"]["wanted"] == ["noatime", "lazytime", "discard"]
            assert doc[f"{mnt}/x fs"]["disks"] == [xfs] and "relatime" in doc[f"{mnt}/x fs"]["live"]
            nd = doc[f"{mnt}/nodiscard"]
            assert nd["skipped"] == [{"option": "discard",
                                      "reason": f"{nodisc} cannot discard (queue/discard_max_bytes is 0)"}]
            assert not [d for d in nd["drift"] if d["option"] == "discard"]
            # a mountpoint as DEV: the loop device under it
            assert Resolver(Context.create()).path(str(mnt / "x fs")) == [xfs]

            code, out, err = tunectl(tmp_path, "mounts", "fix", "-p", str(profile), "--fstab", str(fstab),
                                     "--remount", "--json")
            result = json.loads(out)
            remounts = {r["target"]: r for r in result["remounts"]}
            assert set(remounts) == {f"{mnt}/ext4", f"{mnt}/x fs", f"{mnt}/nodiscard"}
            # ext4 takes all of it live
            assert remounts[f"{mnt}/ext4"]["ok"] is True
            live = mountinfo_options(f"{mnt}/ext4")
            assert {"noatime", "lazytime", "discard"} <= set(live) and "relatime" not in live
            # xfs: `remount,discard` exits 0, but xfs cannot change discard on remount: reported, exit 3
            assert remounts[f"{mnt}/x fs"]["ok"] is False and remounts[f"{mnt}/x fs"]["not_applied"] == ["discard"]
            assert {"noatime", "lazytime"} <= set(mountinfo_options(f"{mnt}/x fs"))
            assert "discard" not in mountinfo_options(f"{mnt}/x fs")
            assert code == 3 and any("did not take effect: discard" in p for p in result["problems"])
            # the device that cannot discard: noatime and lazytime only, nodiratime dropped as redundant
            assert remounts[f"{mnt}/nodiscard"]["ok"] is True
            assert "discard" not in mountinfo_options(f"{mnt}/nodiscard")
            text = fstab.read_text()
            assert f"UUID={blkid_uuid(ext)}  {mnt}/ext4  ext4  noatime,lazytime,discard 0 2\n" in text
            assert f"/dev/{xfs}\t{mnt}/x\\040fs\txfs\tdefaults,noatime,lazytime,discard\t0\t2\n" in text
            assert f"/dev/{nodisc} {mnt}/nodiscard ext4 noatime,lazytime 0 2\n" in text

            # back to relatime: `remount,relatime` after noatime only works with the atime flags spelt out
            profile.write_text(f"name: back\nmounts:\n  - match: {{mountpoint: '{mnt}/ext4'}}\n"
                               "    options: [relatime, nolazytime]\n    discard: off\n")
            code, out, err = tunectl(tmp_path, "mounts", "fix", "-p", str(profile), "--fstab", str(fstab),
                                     "--remount", "--json")
            assert code == 0, out + err
            live = mountinfo_options(f"{mnt}/ext4")
            assert "relatime" in live and "noatime" not in live and "lazytime" not in live and "discard" not in live
            code, out, _ = tunectl(tmp_path, "mounts", "check", "-p", str(profile), "--fstab", str(fstab))
            assert code == 0, out


def test_remount_option_the_kernel_refuses_is_reported(tmp_path: Path) -> None:
    """ext4 refuses to change data= on remount (EINVAL): mount fails, the option is reported, exit 3."""
    mnt = tmp_path / "m"
    profile = tmp_path / "p.yaml"
    profile.write_text(f"name: dj\nmounts:\n  - match: {{mountpoint: '{mnt}'}}\n    options: [data=journal]\n")
    with loop_devices(tmp_path, [{"size_mb": 64}]) as (dev,), mounted([(dev, "ext4", mnt, "relatime")]):
        fstab = tmp_path / "fstab"
        fstab.write_text(f"/dev/{dev} {mnt} ext4 defaults 0 2\n")
        code, out, _ = tunectl(tmp_path, "mounts", "fix", "-p", str(profile), "--fstab", str(fstab), "--remount",
                               "--json")
        doc = json.loads(out)
        assert code == 3 and doc["remounts"][0]["ok"] is False
        assert doc["remounts"][0]["not_applied"] == ["data=journal"] and "failed" in doc["remounts"][0]["error"]
        assert "data=journal" not in mountinfo_options(str(mnt))
        assert "defaults,data=journal" in fstab.read_text()  # the fstab side is still fixed


def test_fix_on_a_read_only_filesystem_is_not_permitted(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    # mode 0755: a tmpfs root is 1777 by default, a directory fix refuses (others may write) before it gets to
    # the read-only file system
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(ro)], check=True)
    try:
        (ro / "fstab").write_text("LABEL=x /srv ext4 relatime 0 2\n")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        profile = tmp_path / "p.yaml"
        profile.write_text("name: ro\nmounts:\n  - match: {mountpoint: /srv}\n    options: [noatime]\n")
        code, _, err = tunectl(tmp_path, "mounts", "fix", "-p", str(profile), "--fstab", str(ro / "fstab"))
        assert code == 4 and "cannot write" in err and "Read-only" in err
        assert (ro / "fstab").read_text() == "LABEL=x /srv ext4 relatime 0 2\n"
    finally:
        subprocess.run(["umount", str(ro)], check=False)
