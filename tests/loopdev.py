"""Real loop devices for root-only tests: created per test, always detached afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


def sysfs_read(name: str, attr: str) -> str:
    return Path(f"/sys/block/{name}/{attr}").read_text().strip()


def sysfs_write(name: str, attr: str, value: str) -> None:
    Path(f"/sys/block/{name}/{attr}").write_text(value)


def active_scheduler(name: str) -> str:
    text = sysfs_read(name, "queue/scheduler")
    return next(t[1:-1] for t in text.split() if t.startswith("["))


def snapshot(name: str) -> dict[str, str]:
    """Every attribute tunectl may manage on this device, as the kernel shows it."""
    q = Path(f"/sys/block/{name}/queue")
    snap = {"scheduler": active_scheduler(name)}
    for attr in ("read_ahead_kb", "nr_requests", "rq_affinity", "nomerges", "add_random", "iostats",
                 "max_sectors_kb", "wbt_lat_usec", "rotational"):
        snap[attr] = (q / attr).read_text().strip()
    iosched = q / "iosched"
    if iosched.is_dir():
        for knob in sorted(os.listdir(iosched)):
            snap[f"iosched/{knob}"] = (iosched / knob).read_text().strip()
    return snap


def restore(name: str, snap: dict[str, str]) -> None:
    """Put back what snapshot() saw: a loop device keeps its queue settings after detach."""
    q = Path(f"/sys/block/{name}/queue")
    for attr, value in sorted(snap.items(), key=lambda kv: (kv[0] != "scheduler", kv[0] == "read_ahead_kb")):
        with contextlib.suppress(OSError):
            (q / attr).write_text(value)


@contextlib.contextmanager
def loop_devices(tmp: Path, specs: list[dict]) -> Iterator[list[str]]:
    """Attach one loop device per spec ({'sector_size': 4096, 'rotational': 1, 'size_mb': 16}).

    'direct_io': True attaches with --direct-io=on (reads reach the backing file's disk, not
    its page cache); 'random_data': True fills the backing file with random bytes.

    On exit every device gets back the settings it had when attached, then is detached.
    """
    names: list[str] = []
    originals: dict[str, dict[str, str]] = {}
    try:
        for i, spec in enumerate(specs):
            backing = tmp / f"loop{i}.img"
            with open(backing, "wb") as f:
                if spec.get("random_data"):
                    for _ in range(spec.get("size_mb", 16)):
                        f.write(os.urandom(1 << 20))
                f.truncate(spec.get("size_mb", 16) << 20)
            cmd = ["losetup", "-f", "--show"]
            if spec.get("direct_io"):
                cmd += ["--direct-io=on"]
            if spec.get("sector_size"):
                cmd += ["--sector-size", str(spec["sector_size"])]
            dev = subprocess.run(cmd + [str(backing)], check=True, capture_output=True, text=True).stdout.strip()
            name = os.path.basename(dev)
            names.append(name)
            originals[name] = snapshot(name)
            if "rotational" in spec:
                sysfs_write(name, "queue/rotational", str(spec["rotational"]))
        yield names
    finally:
        for name in names:
            restore(name, originals[name])
            subprocess.run(["losetup", "-d", f"/dev/{name}"], check=False, capture_output=True)
