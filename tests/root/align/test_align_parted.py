"""tunectl align on real loop devices with real parted tables, checked against `parted align-check` (root only).

This kernel has no partition-table parsers: partitions are registered with
`partx -a` after parted wrote the table, and removed with `partx -d` before the
loop device is detached (partitions outlive `losetup -d` and would poison the
next test that gets the same loop number). Only devices these tests attach are
touched: each is checked to still be backed by our image before cleanup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import run_cli, run_process
from tunectl.align.check import check
from tunectl.context import Context
from tunectl.system.parted import Parted

pytestmark = pytest.mark.root

ENV = {"LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

# (label, logical sector size) -> parted commands; "none" = created with `-a none` (deliberately misaligned).
# parted 3.5 segfaults in ~7% of runs creating an extended partition on a 4096-byte-sector msdos disk
# (a memcpy under ped_disk_commit_to_dev, before anything is written): see parted_mkpart.
LAYOUTS: dict[tuple[str, int], list[tuple[str | None, ...]]] = {
    ("gpt", 512): [("none", "mkpart", "my:part", "63s", "2047s"), (None, "mkpart", "p2", "2048s", "20479s"),
                   ("none", "mkpart", "back\\slash", "20481s", "30000s"), (None, "mkpart", "p4", "32768s", "40959s")],
    ("gpt", 4096): [("none", "mkpart", "a:b", "6s", "255s"), (None, "mkpart", "p2", "256s", "2559s"),
                    ("none", "mkpart", "p3", "2561s", "3750s"), (None, "mkpart", "p4", "4096s", "5119s")],
    ("msdos", 512): [("none", "mkpart", "primary", "63s", "2047s"), (None, "mkpart", "primary", "2048s", "10239s"),
                     ("none", "mkpart", "extended", "12288s", "120000s"),
                     (None, "mkpart", "logical", "14336s", "40000s"),
                     ("none", "mkpart", "logical", "40961s", "60000s")],
    ("msdos", 4096): [(None, "mkpart", "primary", "1MiB", "5MiB"), ("none", "mkpart", "primary", "1543s", "2500s"),
                      ("none", "mkpart", "extended", "3072s", "15359s"),
                      (None, "mkpart", "logical", "13MiB", "20MiB"),
                      ("none", "mkpart", "logical", "5131s", "7000s")],
}


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, env=ENV, timeout=60)


@contextlib.contextmanager
def loop_disk(tmp: Path, sector_size: int, size_mb: int = 64) -> Iterator[str]:
    """A loop device on a fresh image; afterwards its partitions are removed, then it is detached."""
    image = tmp / f"disk-{sector_size}-{time.monotonic_ns()}.img"
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    name = os.path.basename(sh("losetup", "-f", "--show", "--sector-size", str(sector_size), str(image)).stdout.strip())
    try:
        yield name
    finally:
        backing = Path(f"/sys/block/{name}/loop/backing_file")
        with contextlib.suppress(OSError):
            if backing.read_text().strip().startswith(str(image)):  # still ours
                sh("partx", "-d", f"/dev/{name}", check=False)
                sh("losetup", "-d", f"/dev/{name}", check=False)


def parted_mkpart(dev: str, options: list[str], cmd: list[str]) -> None:
    """`parted -s OPTIONS DEV mkpart ...`, run again when parted 3.5 crashed (SIGSEGV) before writing."""
    for _ in range(5):
        proc = sh("parted", "-s", *options, dev, *cmd, check=False)
        if proc.returncode != -11:
            break
    assert proc.returncode == 0, (cmd, proc.returncode, proc.stderr)


def build(name: str, label: str, sector_size: int) -> list[int]:
    """Write the layout with parted, register the partitions; their numbers."""
    dev = f"/dev/{name}"
    sh("parted", "-s", dev, "mklabel", label)
    for align, *cmd in LAYOUTS[(label, sector_size)]:
        parted_mkpart(dev, ["-a", "none"] if align else [], cmd)
    sh("partx", "-a", dev, check=False)  # parted may have registered them itself: then partx says so and fails
    numbers = [int(line.split(":")[0]) for line in sh("parted", "-m", "-s", dev, "unit", "s", "print").stdout.splitlines()[2:]]
    deadline = time.monotonic() + 10
    while not all(Path(f"/sys/block/{name}/{name}p{n}").exists() for n in numbers):
        assert time.monotonic() < deadline, f"partitions of {name} not registered: {os.listdir(f'/sys/block/{name}')}"
        time.sleep(0.05)
    return numbers


def tunectl(*argv: str, state: Path) -> tuple[int, str, str]:
    r = run_cli(*argv, env=dict(ENV, TUNECTL_STATE_DIR=str(state)))
    return r.code, r.out, r.err


def align_check(name: str, number: int) -> bool:
    return sh("parted", "-s", f"/dev/{name}", "align-check", "optimal", str(number), check=False).returncode == 0


@pytest.mark.parametrize("label, sector_size", sorted(LAYOUTS))
def test_verdicts_equal_parted_align_check(tmp_path, label, sector_size):
    with loop_disk(tmp_path, sector_size) as name:
        numbers = build(name, label, sector_size)
        code, out, err = tunectl("align", name, "--json", state=tmp_path / "state")
        doc = json.loads(out)
        disk = doc["disks"][0]
        assert (disk["device"], disk["table"], disk["topology"]["logical_block_size"]) == (name, label, sector_size)
        assert [p["number"] for p in disk["partitions"]] == numbers
        for p in disk["partitions"]:
            parted_says = align_check(name, p["number"])
            assert p["aligned"] == parted_says, (p, parted_says)
            assert p["parted_optimal"] == parted_says
            if p["suggested_start_sector"] is not None:
                assert p["suggested_start_sector"] * sector_size % (1 << 20) == 0
            kernel = Path(f"/sys/block/{name}/{name}p{p['number']}")
            assert int((kernel / "start").read_text()) * 512 == p["start_bytes"]
        assert any(not p["aligned"] for p in disk["partitions"])  # every layout has a deliberately misaligned one
        assert code == 1 and doc["ok"] is False
        if label == "gpt":
            assert ":" in disk["partitions"][0]["name"]
        machine = Parted()
        machine.json = False  # what parted before 3.5 gives: the -m lines, with their escapes
        ctx = Context.create(state_dir=str(tmp_path / "state"), env=ENV)
        assert check(ctx, None, [name], parted=machine).to_json() == {k: v for k, v in doc.items()
                                                                       if k not in ("format", "version")}


def test_partition_forms_and_an_aligned_disk(tmp_path):
    with loop_disk(tmp_path, 512) as name:
        build(name, "msdos", 512)
        code, out, _ = tunectl("align", f"/dev/{name}p2", "--json", state=tmp_path / "state")
        assert code == 0, out
        assert [p["number"] for p in json.loads(out)["disks"][0]["partitions"]] == [2]
        code, out, _ = tunectl("align", f"{name}p6", f"/dev/{name}p5", state=tmp_path / "state")
        assert code == 1
        assert [line.split()[1] for line in out.splitlines()[2:4]] == ["5", "6"]
        sh("parted", "-s", f"/dev/{name}", "rm", "6")
        sh("parted", "-s", f"/dev/{name}", "rm", "1")
        code, out, _ = tunectl("align", name, state=tmp_path / "state")
        assert code == 0 and "all aligned" in out, out


def test_named_disk_without_a_table(tmp_path):
    with loop_disk(tmp_path, 512, size_mb=8) as name:
        code, out, err = tunectl("align", name, "--json", state=tmp_path / "state")
        assert code == 1
        disk = json.loads(out)["disks"][0]
        assert disk["table"] is None and disk["partitions"] == [] and disk["warnings"] == ["no partition table"]
        assert "Traceback" not in err


def test_not_root_is_exit_4(tmp_path):
    # The state directory where nobody can reach it: under tmp_path, /tmp/pytest-of-root (0700) bars the way, and
    # a state directory that cannot be examined is refused (exit 5) before align is tried at all.
    home = Path(tempfile.mkdtemp(prefix="tunectl-align-nobody-"))
    try:
        home.chmod(0o755)
        with loop_disk(tmp_path, 512) as name:
            build(name, "gpt", 512)
            done = run_process("align", name, "--state-dir", str(home / "nostate"),
                               prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], env=ENV,
                               timeout=60)
            assert done.code == 4 and "cannot run parted read-only" in done.err, done.err
            assert done.err.startswith("tunectl: error: align needs root"), done.err  # the user's terms first
    finally:
        shutil.rmtree(home)


IN_CLOSE_WRITE, IN_NONBLOCK = 0x8, 0o4000


def closed_for_writing(paths: list[str], action) -> list[str]:
    """Run `action`; the device nodes among `paths` that some process opened for writing and closed meanwhile.

    That close is what udev's watch turns into a change event (60-block.rules OPTIONS+="watch")."""
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        watches = {libc.inotify_add_watch(fd, p.encode(), IN_CLOSE_WRITE): p for p in paths}
        assert all(w >= 0 for w in watches), paths
        action()
        closed, data = [], b""
        with contextlib.suppress(BlockingIOError):
            while True:
                data += os.read(fd, 65536)
        while data:
            wd, mask, _cookie, size = struct.unpack_from("iIII", data)
            if mask & IN_CLOSE_WRITE:
                closed.append(watches[wd])
            data = data[16 + size:]
        return closed
    finally:
        os.close(fd)


def test_align_opens_no_device_for_writing(tmp_path):
    # libparted 3.5 opens each partition node O_WRONLY to flush it; align runs parted with read access only.
    with loop_disk(tmp_path, 512) as name:
        numbers = build(name, "gpt", 512)
        nodes = [f"/dev/{name}"] + [f"/dev/{name}p{n}" for n in numbers]
        assert closed_for_writing(nodes, lambda: sh("parted", "-s", f"/dev/{name}", "unit", "s", "print")), \
            "the probe sees nothing: plain parted closes a partition opened for writing"
        result = []
        assert closed_for_writing(nodes, lambda: result.append(
            tunectl("align", name, "--json", state=tmp_path / "state"))) == []
        code, out, err = result[0]
        assert code == 1 and [p["number"] for p in json.loads(out)["disks"][0]["partitions"]] == numbers, err
        assert "read-only" not in err  # parted's warning that it opened the disk read-only is not passed on
