"""Group `preload`: a small source tree on the model HDD (tests/vm/diskmodel.py), read cold four ways.

The tree (400 files in shuffled write order, so directory order is not disk order,
as on an aged file system) is on an ext4 filling the model HDD. Each way is one
step bracketed in the model's request log (`marks`), so the host can replay the
requests the disk really saw through the model: as-is (every file read in
directory order), WILLNEED in directory order then the reads, `tunectl preload
replay` then the reads, and the same replay with --no-metadata. Cold before each:
drop_caches (this is the VM's own kernel) and the HDD's cached pages flushed.
"""

from __future__ import annotations

import os
import random
import time

from common import Recorder, by_serial, read, settle, sh, tunectl, tunectl_env
from models import HDD_SERIAL, marked

MNT = "/tmp/ptree"
FILES = 400


def build(dev: str, files: int, mnt: str = MNT, top: str = "") -> dict:
    """An ext4 on `dev` mounted at `mnt`, `files` files in shuffled write order below `mnt`/`top`."""
    sh(f"mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/{dev}", check=True)
    os.makedirs(mnt, exist_ok=True)
    sh(f"mount /dev/{dev} {mnt}", check=True)
    rng = random.Random(30)
    dirs = [os.path.join(top, f"pkg{d // 10}/mod{d}") for d in range(files // 20)]
    names = [(rng.choice(dirs), f"f{i}.py") for i in range(files)]
    rng.shuffle(names)  # written in this order: placed by time, not by directory
    total = 0
    for i, (d, name) in enumerate(names):
        os.makedirs(f"{mnt}/{d}", exist_ok=True)
        size = min(int(rng.lognormvariate(8.5, 1.1)), 2 << 20)
        with open(f"{mnt}/{d}/{name}", "wb") as f:
            f.write(rng.randbytes(size))
        total += size
        if i % 40 == 39:
            os.sync()  # writeback in waves, as files arrive over time
    os.sync()
    return {"files": files, "bytes": total}


def cold(dev: str) -> None:
    sh(f"sync; echo 3 > /proc/sys/vm/drop_caches; blockdev --flushbufs /dev/{dev}", check=True)


def walk() -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(MNT) for n in names]


def read_all() -> float:
    started = time.monotonic()
    buf = bytearray(1 << 20)
    for p in walk():
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.monotonic() - started


def willneed() -> None:
    for p in walk():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def way(dev: str, before) -> dict:  # noqa: ANN001 (a step)
    cold(dev)
    started = time.monotonic()
    out = {"before": before() if before else None}
    out["read_seconds"] = read_all()
    out["seconds"] = time.monotonic() - started
    return out


def files_arg(args: list[str]) -> int:
    """The group's `files=N` argument (default FILES: 400; the benchmarks ask for 3000)."""
    return next((int(a.split("=", 1)[1]) for a in args if a.startswith("files=")), FILES)


def model_hdd(rec: Recorder) -> str | None:
    """The model HDD's name once udev settled (None: not found); sets rec["disk"], rec["marks"], rec["queue"]."""
    settle()
    hdd = by_serial().get(HDD_SERIAL)
    rec["disk"] = hdd
    rec["marks"] = {}
    if hdd:
        rec["queue"] = {"rotational": read(f"/sys/block/{hdd}/queue/rotational"),
                        "size": int(read(f"/sys/block/{hdd}/size") or 0) * 512}
    return hdd


def run(rec: Recorder, args: list[str]) -> None:
    """args: `files=N` for a tree of N files (default 400; benchmarks/preload_model.py asks for 3000)."""
    files = files_arg(args)
    hdd = model_hdd(rec)
    if not hdd:
        return
    rec["tree"] = rec.step("build", lambda: build(hdd, files))
    env = tunectl_env("/tmp/tunectl-state")
    cold(hdd)
    code, doc, err = tunectl(f"preload collect {MNT} -o /tmp/ptree.list", env)
    rec["collect"] = {"code": code, "doc": doc, "stderr": err}

    def replay(*extra: str):  # noqa: ANN202
        # waits for its reads (by default it returns once they are sent), so the reads after it find them done and
        # the model sees the replay's order alone: as when tests/vm/test_preload_model.py's thresholds were set
        return lambda: tunectl(f"-v preload replay --settle-timeout 10 /tmp/ptree.list {' '.join(extra)}", env)[:2]

    for name, before in (("asis", None), ("willneed", willneed), ("tunectl", replay()),
                         ("tunectl_nometa", replay("--no-metadata"))):
        marked(rec, name, lambda before=before: way(hdd, before))
