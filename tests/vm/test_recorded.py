"""The fakes against the recordings: tests/fakesys.py trees beside what Debian's kernels showed.

tests/data/recorded/<series>/<device>.json are recorded in the VM tier's guest by
scripts/record-sysfs (the `stacks` and `classify` groups, before tunectl touched anything). For the
attributes and udev properties tunectl reads, a fake device of the same class must
have the same files and value formats. Where they differ the recording is right;
the disagreements not yet fixed in tests/fakesys.py are listed in KNOWN, each a
strict xfail: fixing the fake turns it into a failure that asks to drop the entry.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, all_topologies
from tunectl.attributes import QUEUE, parse_value

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded"

# recording -> the fake topology device of the same class (tests/fakesys.py all_topologies)
COUNTERPART = {
    "scsi-hdd": "sda", "scsi-ssd-wwn": "sdb", "sata-ssd": "sdb", "nvme": "nvme0n1", "virtio": "vda", "mmc": "mmcblk0",
    "dm-crypt-luks2": "dm-0", "dm-crypt-plain": "dm-0", "dm-verity": "dm-1", "dm-lvm": "dm-2", "md-raid1": "md0",
}
# udev properties tunectl or its rules read
UDEV_KEYS = ("ID_SERIAL", "ID_SERIAL_SHORT", "ID_SCSI_SERIAL", "ID_WWN", "ID_MODEL", "ID_MODEL_ENC", "ID_BUS",
             "DM_UUID", "DM_NAME", "MD_UUID", "DM_UDEV_PRIMARY_SOURCE_FLAG", "DM_ACTIVATION", "DM_UDEV_RULES",
             "DM_UDEV_DISABLE_OTHER_RULES_FLAG", "ID_PART_TABLE_TYPE")
TOP = ("inflight", "stat", "size", "dev", "removable")


def recordings() -> list[tuple[str, str]]:
    return sorted((d.name, f.stem) for d in RECORDED.iterdir() if d.is_dir() for f in d.glob("*.json"))


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeTree:
    tree = FakeTree.create(tmp_path_factory.mktemp("fake"))
    all_topologies(tree)
    return tree


def _fake_view(tree: FakeTree, name: str) -> dict:
    base = tree.root / "block" / name
    sysfs = {}
    for rel in [*TOP, *(f"queue/{a}" for a in (*QUEUE, "scheduler"))]:
        path = base / rel
        if path.is_file():
            try:
                sysfs[rel] = path.read_text()
            except OSError:
                sysfs[rel] = None
    udev = {}
    record = tree.udev_root / f"b{tree.devnum(name)}"
    if record.exists():
        for line in record.read_text().splitlines():
            if line.startswith("E:") and "=" in line:
                key, value = line[2:].split("=", 1)
                udev[key] = value
    partitioned = any((base / p / "partition").is_file() for p in os.listdir(base))
    return {"sysfs": sysfs, "udev": udev, "mq": (base / "mq").is_dir(), "partitioned": partitioned}


def _shape(text: str | None) -> str:
    """A value's format: an integer, a scheduler line, or text."""
    if text is None:
        return "unreadable"
    text = text.rstrip("\n")
    if re.fullmatch(r"-?\d+", text):
        return "int"
    if "[" in text or text == "none":
        return "scheduler"
    return "text"


def mismatches(recorded: dict, fake: dict) -> list[str]:
    out = []
    for rel in TOP:
        if (rel in recorded["sysfs"]) != (rel in fake["sysfs"]):
            out.append(f"{rel}: recorded {'present' if rel in recorded['sysfs'] else 'absent'}, fake the other")
    for attr in ("scheduler", *QUEUE):
        rel = f"queue/{attr}"
        real, made = recorded["sysfs"].get(rel, "absent"), fake["sysfs"].get(rel, "absent")
        if (real == "absent") != (made == "absent"):
            out.append(f"{rel}: recorded {'absent' if real == 'absent' else 'present'}, fake the other")
        elif real != "absent" and _shape(real) != _shape(made):
            out.append(f"{rel}: recorded format {_shape(real)} ({real!r}), fake {_shape(made)} ({made!r})")
        elif attr in QUEUE and real not in ("absent", None):
            parse_value(QUEUE[attr], real)  # what discovery does with the real text must not raise
    if recorded["sysfs"].get("queue/read_ahead_kb") != fake["sysfs"].get("queue/read_ahead_kb"):
        out.append(f"queue/read_ahead_kb at probe: recorded {recorded['sysfs'].get('queue/read_ahead_kb')!r}, "
                   f"fake {fake['sysfs'].get('queue/read_ahead_kb')!r}")
    if recorded["mq"] != fake["mq"]:
        out.append(f"mq/: recorded {recorded['mq']}, fake {fake['mq']}")
    for key in UDEV_KEYS:
        if key == "ID_PART_TABLE_TYPE" and not (recorded["partitions"] and fake["partitioned"]):
            continue  # what is on the disk, not what the kernel shows: compared where both carry a table
        if (key in recorded["udev"]) != (key in fake["udev"]):
            out.append(f"udev {key}: recorded {'present' if key in recorded['udev'] else 'absent'}, fake the other")
    major = recorded["sysfs"]["dev"].split(":")[0]
    if major != fake["sysfs"].get("dev", ":").split(":")[0]:
        out.append(f"major: recorded {major}, fake {fake['sysfs'].get('dev', '').strip()}")
    return out


DISKS = {"scsi-hdd", "scsi-ssd-wwn", "sata-ssd", "nvme", "virtio", "mmc"}


def test_recordings_exist_for_every_class() -> None:
    """6.1: every class (the `stacks` group); 6.12: the disks (the `classify` group; its stacks are not booted)."""
    assert {f.stem for f in (RECORDED / "6.1").glob("*.json")} == set(COUNTERPART)
    assert {f.stem for f in (RECORDED / "6.12").glob("*.json")} == DISKS


# Not yet fixed in tests/fakesys.py, which models Linux 6.18 (this project's first machines): the dm/md queue files
# 6.1 lists (scheduler, nr_requests, rq_affinity, wbt_lat_usec), the dm udev flags the rules test, dm major 253,
# read-ahead at probe (128 on 6.1 and 6.12 for SCSI and virtio disks), SCSI identity properties (ID_SCSI_SERIAL;
# no ID_WWN on QEMU's SATA disk). A kernel-series parameter for the builders is the fix; until then each stays a
# strict xfail that names its differences. (inflight and stat, missing from every fake disk, are fixed.)
KNOWN = {("6.1", d) for d in COUNTERPART if d not in ("nvme", "mmc")} | {
    ("6.12", d) for d in ("scsi-hdd", "scsi-ssd-wwn", "sata-ssd", "virtio")}


def _case(series: str, device: str):  # noqa: ANN202 (a pytest.param)
    marks = [pytest.mark.xfail(strict=True, reason="fakesys models 6.18, not this recording yet")] \
        if (series, device) in KNOWN else []
    return pytest.param(series, device, marks=marks, id=f"{series}-{device}")


@pytest.mark.parametrize(("series", "device"), [_case(*r) for r in recordings()])
def test_fake_matches_the_recording(fake: FakeTree, series: str, device: str) -> None:
    recorded = json.loads((RECORDED / series / f"{device}.json").read_text())
    found = mismatches(recorded, _fake_view(fake, COUNTERPART[device]))
    assert found == [], "\n".join(found)
