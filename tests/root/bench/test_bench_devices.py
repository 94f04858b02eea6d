"""tunectl bench on real loop devices and the real kernel (root only).

Loop devices use direct I/O (losetup --direct-io=on), so reads reach the
backing file's disk and read-ahead shapes real requests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.harness import REPO, run_cli, run_process
from tests.loopdev import loop_devices, snapshot, sysfs_read, sysfs_write

pytestmark = pytest.mark.root


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bench(*argv: str, env: dict) -> tuple[int, str, str]:
    r = run_cli("bench", *argv, env=env)
    return r.code, r.out, r.err


@pytest.fixture
def env(tmp_path):
    return {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.fixture
def loop(tmp_path):
    with loop_devices(tmp_path, [{"direct_io": True, "random_data": True, "size_mb": 32}]) as names:
        assert sysfs_read(names[0], "loop/dio") == "1"
        yield names[0]


def test_sweep_on_a_direct_io_loop_device(loop, env):
    sysfs_write(loop, "queue/scheduler", "bfq")
    sysfs_write(loop, "queue/iosched/slice_idle", "3")  # not the default: must come back after switches
    before, content = snapshot(loop), sha256(f"/dev/{loop}")
    code, out, err = bench(loop, "--read-ahead", "16,128,1024", "--schedulers", "none,mq-deadline", "--runs", "1",
                           "--size", "8M", "--json", env=env)
    assert code == 0, err
    doc = json.loads(out)
    assert snapshot(loop) == before and sha256(f"/dev/{loop}") == content
    assert doc["device"] == loop and doc["class"] == "loop" and doc["scheduled"] == [loop]
    assert {(o["attribute"], o["after"]) for o in doc["restored"]} >= {("scheduler", "bfq"), ("iosched/slice_idle", 3)}
    for sched in ("none", "mq-deadline"):
        points = sorted((p for p in doc["points"] if p["scheduler"] == sched), key=lambda p: p["read_ahead_kb"])
        assert [p["read_ahead_kb"] for p in points] == [16, 128, 1024]
        stats = [p["devices"][0] for p in points]
        assert all(s["reads"] > 0 and s["device"] == loop for s in stats), stats
        # fewer, larger requests as read-ahead grows
        assert stats[0]["reads"] > stats[1]["reads"] > stats[2]["reads"], stats
        assert stats[0]["avg_request_kib"] < stats[1]["avg_request_kib"] < stats[2]["avg_request_kib"], stats
        assert all(p["mb_s"] > 0 for p in points)
    rec = doc["recommendation"]
    assert rec["read_ahead_kb"] in (16, 128, 1024) and rec["scheduler"] in ("none", "mq-deadline")
    assert rec["fragment"].splitlines()[1:3] == ["classes:", "  loop:"]


def test_human_output_csv_plot_and_random_reads(loop, env, tmp_path):
    before, content = snapshot(loop), sha256(f"/dev/{loop}")
    csv_path, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    code, out, err = bench(f"/dev/{loop}", "--read-ahead", "64,512", "--schedulers", "mq-deadline", "--runs", "2",
                           "--size", "4M", "--random", "--csv", str(csv_path), "--plot", str(png), "--seed", "5",
                           env=env)
    assert code == 0, err
    assert snapshot(loop) == before and sha256(f"/dev/{loop}") == content
    assert "seed 5" in out and "RAND IOPS" in out and "read_ahead_kb" in out
    assert "recommendation (paste into a profile):" in out and "restored every original setting" in out
    rows = csv_path.read_text().splitlines()
    assert len(rows) == 1 + 4 and all(float(r.split(",")[14]) > 0 for r in rows[1:])  # random_iops
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.sigint
def test_sigint_in_the_middle_restores_every_setting(loop, env):
    sysfs_write(loop, "queue/scheduler", "bfq")
    sysfs_write(loop, "queue/iosched/slice_idle", "3")
    before = snapshot(loop)
    master, slave = pty.openpty()  # stderr a terminal: the progress bar shows which point runs
    proc = subprocess.Popen([sys.executable, "-m", "tunectl", "bench", loop, "--read-ahead", "4,8,16", "--schedulers",
                             "none,kyber,mq-deadline", "--runs", "3", "--size", "32M"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=REPO,
                            env={**env, "PYTHONPATH": str(REPO)})
    os.close(slave)
    seen = bytearray()
    started = threading.Event()

    def drain() -> None:
        with contextlib.suppress(OSError):
            while True:
                chunk = os.read(master, 4096)
                if not chunk:
                    return
                seen.extend(chunk)
                if b"point 2:" in seen:
                    started.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert started.wait(60), bytes(seen)
        assert sysfs_read(loop, "queue/read_ahead_kb") in ("4", "8", "16")  # mid-sweep: a point's setting is live
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while reader.is_alive() and time.monotonic() < deadline:
        reader.join(0.1)
    os.close(master)
    text = bytes(seen).decode(errors="replace")
    assert proc.returncode == 130, text
    assert "interrupted after" in text and "restored every original setting" in text
    assert "Traceback" not in text
    assert snapshot(loop) == before


def test_file_on_squashfs_on_a_loop_device(tmp_path, env):
    src = tmp_path / "src"
    src.mkdir()
    (src / "browser.bin").write_bytes(os.urandom(6 << 20))
    image = tmp_path / "image.sqfs"
    subprocess.run(["mksquashfs", str(src), str(image), "-noappend", "-quiet", "-no-progress", "-comp", "gzip"],
                   check=True, capture_output=True)
    dev = subprocess.run(["losetup", "-f", "--show", "--read-only", "--direct-io=on", str(image)], check=True,
                         capture_output=True, text=True).stdout.strip()
    name = os.path.basename(dev)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "squashfs", "-o", "ro", dev, str(mnt)], check=True, capture_output=True)
        try:
            target = str(mnt / "browser.bin")
            before, content = snapshot(name), sha256(target)
            code, out, err = bench(target, "--read-ahead", "16,512", "--runs", "1", "--schedulers", "mq-deadline",
                                   "--json", env=env)
            assert code == 0, err
            doc = json.loads(out)
            assert (doc["kind"], doc["device"], doc["read_path"]) == ("file", name, target)
            assert all(p["devices"][0]["reads"] > 0 for p in doc["points"])
            assert all(r["bytes"] == 6 << 20 for r in doc["runs"])  # the whole file, nothing cached
            rec = doc["recommendation"]
            if rec["fragment"] is None:  # squashfs sized the requests and one scheduler was swept: nothing to paste
                assert (rec["read_ahead_kb"], rec["scheduler"]) == (None, None), rec
                assert "did not change the requests" in rec["reason"], rec
            else:
                assert rec["fragment"].splitlines()[2] == "  loop:", rec
            assert snapshot(name) == before and sha256(target) == content
        finally:
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)


def test_bad_input_on_the_real_machine(loop, env, tmp_path):
    before = snapshot(loop)
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    empty = tmp_path / "empty"
    empty.touch()
    cases = [
        (["/dev/tunectl-missing"], 2, "/dev/tunectl-missing: no such file or device node"),
        ([str(empty)], 2, "is empty"),
        ([loop, "--read-ahead", "16,garbage"], 2, "--read-ahead"),
        ([loop, "--schedulers", "cfq,kyber,bogus"], 2, "unknown scheduler"),
        ([str(tmp_path)], 2, "neither a block device nor a regular file"),
    ]
    if shm is not None:
        f = shm / f"tunectl-bench-{os.getpid()}"
        f.write_bytes(b"x" * 4096)
        cases.append(([str(f)], 2, "not a block device"))  # tmpfs: no device under the file
    try:
        for argv, code, words in cases:
            got, out, err = bench(*argv, env=env)
            assert got == code and words in err, (argv, out, err)
            assert "internal error" not in err and "Traceback" not in err
    finally:
        if shm is not None:
            f.unlink()
    # a file this process may not read: mode 000, and root without its capability to override that
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"y" * 4096)
    secret.chmod(0)
    done = run_process("bench", str(secret), prefix=["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                                                     "--inh-caps=-all"], env=env)
    assert done.code == 4 and "Permission denied" in done.err, done.err
    assert snapshot(loop) == before


NOBODY_IDS = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


class Hung(BaseException):
    """The alarm of a run that blocked: the test fails instead of waiting for ever."""


@contextlib.contextmanager
def unblocked(seconds: int, what: str):
    """A run in this process that blocks longer than `seconds` fails the test (Hung, `what`)."""
    def hung(*_):
        raise Hung(what)

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def nobodys_file(env):
    """FILE in a directory nobody owns, on an ext4 on a loop device of this test, every directory above root's."""
    base = Path(tempfile.mkdtemp(prefix="tunectl-bench-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        with loop_devices(base, [{"direct_io": True, "size_mb": 32}]) as names:
            subprocess.run(["mkfs.ext4", "-q", "-F", f"/dev/{names[0]}"], check=True, capture_output=True)
            mnt = base / "mnt"
            mnt.mkdir()
            subprocess.run(["mount", f"/dev/{names[0]}", str(mnt)], check=True, capture_output=True)
            try:
                mine = mnt / "nobody"
                mine.mkdir()
                os.chown(mine, 65534, 65534)
                target = mine / "data.bin"
                target.write_bytes(os.urandom(4 << 20))
                os.chown(target, 65534, 65534)
                yield names[0], target
            finally:
                subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def nobody_swaps(target: Path, into: str) -> None:
    """As nobody: `target` moved aside (data.bin.real) and `into` put at its name (fifo, dir, a link to a node)."""
    put = {"fifo": f"mkfifo {target}", "dir": f"mkdir {target}", "zero": f"ln -s /dev/zero {target}",
           "node": f"ln -s /dev/{os.environ.get('TUNECTL_TEST_NODE', '')} {target}",
           "grow": f"head -c 1048576 /dev/urandom >> {target}"}[into]
    move = "" if into == "grow" else f"mv {target} {target}.real && "
    subprocess.run([*NOBODY_IDS, "sh", "-c", move + put], check=True, timeout=60, capture_output=True)


@pytest.mark.parametrize("into", ["fifo", "zero", "node", "dir"])
def test_a_file_swapped_after_its_look_is_never_opened(nobodys_file, env, monkeypatch, into):
    """Between bench's look at FILE and its open, the owner of FILE's directory puts a named pipe (an open by name
    blocked for ever), /dev/zero, a link to a block device or a directory at the name: refused, exit 2, the
    settings untouched, and nothing opened in its place."""
    from tunectl.bench import stack as stacking

    loop, target = nobodys_file
    monkeypatch.setenv("TUNECTL_TEST_NODE", loop)
    checked = stacking.check_nodes

    def then_swap(ctx, stack):
        checked(ctx, stack)
        nobody_swaps(target, into)

    monkeypatch.setattr(stacking, "check_nodes", then_swap)
    before = snapshot(loop)

    with unblocked(60, f"bench blocked on the {into} put at {target}"):
        code, _, err = bench(str(target), "--read-ahead", "16,128", "--runs", "1", "--schedulers", "mq-deadline",
                             env=env)
    found = {"fifo": "a named pipe, not a regular file", "zero": "a symbolic link owned by nobody",
             "node": "a symbolic link owned by nobody", "dir": "a directory, not a regular file"}[into]
    assert code == 2 and f"{target}: {found}" in err, err
    assert snapshot(loop) == before


def test_a_file_swapped_after_its_open_is_read_through_the_open_one(nobodys_file, env, monkeypatch):
    """Once open, the name is never used again: a named pipe put at it during the sweep changes nothing (every
    read, drop and fio's random reads go through the descriptor), and a file that grows is read to its size at
    the open, no further."""
    from tunectl.bench.runner import Sweep

    loop, target = nobodys_file
    size = target.stat().st_size
    run = Sweep.run

    def swapped(self):
        nobody_swaps(target, "grow")
        nobody_swaps(target, "fifo")
        return run(self)

    monkeypatch.setattr(Sweep, "run", swapped)

    with unblocked(120, f"bench blocked on the named pipe put at {target}"):
        code, out, err = bench(str(target), "--read-ahead", "16,128", "--runs", "1", "--schedulers", "mq-deadline",
                               "--random", "--json", env=env)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["read_path"] == str(target)
    assert [r["bytes"] for r in doc["runs"]] == [size, size]  # the size at the open, not the grown file's
    assert all(r["random"] and r["random"]["iops"] > 0 for r in doc["runs"]), doc["runs"]


@pytest.fixture
def partition(loop):
    """The loop device's one partition (sectors 2048 to the end), registered with partx; removed again after."""
    dev = f"/dev/{loop}"
    subprocess.run(["parted", "-s", dev, "mklabel", "gpt", "mkpart", "p1", "2048s", "100%"], check=True,
                   capture_output=True)
    subprocess.run(["partx", "-a", dev], capture_output=True)  # parted may have registered it itself
    try:
        assert os.path.exists(f"{dev}p1"), os.listdir("/dev")
        yield loop, f"{dev}p1"
    finally:
        subprocess.run(["partx", "-d", dev], capture_output=True)


def test_every_point_on_a_partition_reads_it_from_the_disk(partition, env):
    """The sweep holds its target open, and a partition's page cache is its own (the disk's drop does not reach
    it) and is emptied by the kernel only on its last close: bench drops it through the open target. Without
    that, every point after the first read the partition from memory: no requests, a rate of RAM."""
    loop, part = partition
    code, out, err = bench(part, "--read-ahead", "128", "--schedulers", "none", "--runs", "3", "--size", "4M",
                           "--json", env=env)
    assert code == 0, err
    doc = json.loads(out)
    stats = [r["devices"][0] for r in doc["runs"]]
    assert len(stats) == 3 and all(s["device"] == loop for s in stats), stats
    assert all(s["sectors_read"] >= 4 * 2048 for s in stats), stats  # 4 MiB read from the disk at each point
