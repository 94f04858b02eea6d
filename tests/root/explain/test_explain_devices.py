"""tunectl explain on real loop devices (root only): squashfs 4 KiB gzip on a loop device with direct I/O,
its image on ext4 on another loop device, whose backing file lives in /dev/shm (so nothing reaches the
machine's own disk). Stack facts from the real sysfs and superblock, a real cold read, findings, --try.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.loopdev import loop_devices

pytestmark = pytest.mark.root

SIZE = 12 << 20


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def payload(path: Path) -> None:
    """A binary-like file: compressible, not trivially (random blocks among repeated ones)."""
    with open(path, "wb") as f:
        for _ in range(SIZE // 65536):
            f.write(os.urandom(16384) + bytes(range(256)) * 192)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="tunectl-explain-") as shm, \
            loop_devices(Path(shm), [{"size_mb": 96}]) as (ext4_loop,):
        sh("mkfs.ext4", "-q", "-F", f"/dev/{ext4_loop}")
        ext4, mnt = tmp / "ext4", tmp / "mnt"
        ext4.mkdir()
        mnt.mkdir()
        sh("mount", f"/dev/{ext4_loop}", str(ext4))
        sq_loop = None
        try:
            src = ext4 / "src"
            src.mkdir()
            payload(src / "chrome")
            image = ext4 / "browser.img"
            sh("mksquashfs", str(src), str(image), "-b", "4K", "-comp", "gzip", "-noappend", "-no-progress",
               "-quiet", "-processors", "1")
            sq_loop = os.path.basename(sh("losetup", "--find", "--show", "--read-only", "--direct-io=on", str(image)))
            sh("mount", "-t", "squashfs", "-o", "ro", f"/dev/{sq_loop}", str(mnt))
            yield {"file": str(mnt / "chrome"), "ext4_copy": str(src / "chrome"), "image": image, "mnt": mnt,
                   "ext4": ext4, "loops": (sq_loop, ext4_loop), "env": {"TUNECTL_STATE_DIR": str(tmp / "state"),
                                                                       "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}}
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                sh("umount", str(mnt))
            if sq_loop:
                subprocess.run(["losetup", "-d", f"/dev/{sq_loop}"], check=False)
            sh("umount", str(ext4))


def test_stack_facts_cold_read_and_findings(stack):
    r = run_cli("explain", stack["file"], "--json", env=stack["env"])
    assert r.code == 0, r.err
    doc = r.doc
    sq_loop, ext4_loop = stack["loops"]
    kinds = [(la["kind"], la["name"]) for la in doc["layers"]]
    assert kinds == [("file", stack["file"]), ("filesystem", str(stack["mnt"])), ("loop", sq_loop),
                     ("file", str(stack["image"])), ("filesystem", str(stack["ext4"])), ("loop", ext4_loop)]
    fs, loop = doc["layers"][1]["filesystem"], doc["layers"][2]["loop"]
    assert fs["squashfs"]["block_size"] == 4096 and fs["squashfs"]["compressor"] == "gzip"
    assert loop["direct_io"] is True and loop["backing_file"] == str(stack["image"])
    assert loop["backing_device"] == ext4_loop
    assert doc["layers"][3]["file"]["extents"] >= 1  # ext4 has FIEMAP
    cold = doc["cold"]
    assert cold["bytes"] == SIZE and cold["read_size"] == 4096 and cold["not_dropped"] == []
    bottom = next(d for d in cold["devices"] if d["device"] == ext4_loop)
    # cold: the compressed image came from the bottom device, in requests no larger than a squashfs block
    assert bottom["sectors_read"] * 512 >= os.path.getsize(stack["image"]) // 2
    assert 0 < bottom["avg_request_kib"] <= 8
    rules = [f["rule"] for f in doc["findings"]]
    assert {"EX002", "EX003", "EX004"} <= set(rules)
    assert rules.index("EX003") < rules.index("EX005")  # ranked by expected effect
    change = {f["rule"]: f["change"]["text"] for f in doc["findings"]}
    assert change["EX004"] == f"losetup --direct-io=off /dev/{sq_loop}"


def test_text_and_a_second_cold_read_is_cold_again(stack):
    first = run_cli("explain", stack["file"], "--json", env=stack["env"]).doc["cold"]["devices"]
    second = run_cli("explain", stack["file"], "--json", env=stack["env"]).doc["cold"]["devices"]
    assert first[-1]["reads"] > 100 and second[-1]["reads"] > 100  # pages dropped one by one, each time
    r = run_cli("explain", stack["file"], env=stack["env"])
    assert "squashfs 4.0: block size 4 KiB, gzip" in r.out
    assert "EX004 the loop device reads its backing file with direct I/O" in r.out


def test_compare_with_the_same_file_on_ext4(stack):
    r = run_cli("explain", stack["file"], "--compare", stack["ext4_copy"], "--json", env=stack["env"])
    assert r.code == 0, r.err
    cmp = r.doc["compare"]
    assert cmp["disk_reads_ratio"] > 4  # 4 KiB blocks against ext4's read-ahead
    assert cmp["largest"].startswith(stack["loops"][1])


def test_try_measures_scratch_copies_and_leaves_the_image_alone(stack):
    before = sha256(stack["image"])
    loops_before = sh("losetup", "-a")
    r = run_cli("explain", stack["file"], "--try", "--json", env=stack["env"])
    assert r.code == 0, r.err
    runs = {(e["block_size"], e["compressor"], e["direct_io"]): e for e in r.doc["experiments"]}
    assert runs[(4096, "gzip", True)]["as_is"]
    assert {(131072, "xz", False), (1048576, "xz", True)} <= set(runs)
    for e in runs.values():
        assert e["bytes"] == SIZE
    # bigger blocks without direct I/O: far fewer requests reach the disk than as the image is
    assert runs[(131072, "gzip", False)]["disk_reads"] * 4 < runs[(4096, "gzip", True)]["disk_reads"]
    assert sha256(stack["image"]) == before
    assert sh("losetup", "-a") == loops_before
    assert not [p for p in os.listdir(stack["ext4"]) if p.startswith(".tunectl-explain-")]


def test_trace_refused_plainly_where_tracefs_has_no_block_events(stack):
    if os.path.isdir("/sys/kernel/tracing/events/block"):
        pytest.skip("this kernel has the block events (the VM tier covers --trace)")
    r = run_cli("explain", stack["file"], "--trace", env=stack["env"])
    assert r.code == 2
    assert "no block events" in r.err


def test_directory_and_device_targets(stack):
    r = run_cli("explain", str(stack["mnt"]), "--json", env=stack["env"])
    assert r.code == 0, r.err
    assert [la["kind"] for la in r.doc["layers"]][:2] == ["filesystem", "loop"]
    assert r.doc["cold"] is None
    r = run_cli("explain", f"/dev/{stack['loops'][0]}", "--json", env=stack["env"])
    assert r.code == 0 and r.doc["layers"][0]["loop"]["direct_io"] is True


NOBODY = 65534


@pytest.fixture
def swap_arena(stack):
    """In the ext4 of `stack`: a root-only directory holding a file, and a directory of nobody's beside it."""
    import shutil

    secret, home = stack["ext4"] / "t6-secret", stack["ext4"] / "t6-home"
    secret.mkdir(mode=0o700)
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    (secret / "f").write_bytes(b"s" * (1 << 20))
    (secret / "f").chmod(0o600)
    (home / "real").mkdir()
    (home / "real" / "f").write_bytes(b"n" * (1 << 20))  # the same size: only the walk can tell them apart
    for p in (home / "real", home / "real" / "f"):
        os.chown(p, NOBODY, NOBODY)
    try:
        yield secret, home
    finally:
        shutil.rmtree(secret)
        shutil.rmtree(home)


def _nobodys_link(at: Path, to: Path) -> None:
    at.symlink_to(to)
    os.lchown(at, NOBODY, NOBODY)


@pytest.mark.parametrize("options", [[], ["--no-cold"]], ids=["cold", "no-cold"])
def test_a_link_another_user_placed_on_the_way_is_refused_not_timed(stack, swap_arena, options):
    """`explain FILE` as root: a directory of nobody's that is a link to a root-only directory made root time the
    file there (its cold read, size and extents). Another user's link is now refused, not followed; root's own
    link on the way (as /lib on merged-/usr) still is."""
    secret, home = swap_arena
    _nobodys_link(home / "d", secret)
    r = run_cli("explain", str(home / "d" / "f"), *options, "--json", env=stack["env"])
    assert r.code == 2 and r.doc["ok"] is False and "layers" not in r.doc, (r.code, r.out[:300])
    assert f"{home / 'd'}: a symbolic link owned by nobody (uid {NOBODY})" in r.doc["error"]["message"], r.doc
    own = stack["ext4"] / "t6-root-link"
    own.symlink_to("src")
    try:
        r = run_cli("explain", str(own / "chrome"), *options, "--json", env=stack["env"])
    finally:
        own.unlink()
    assert r.code == 0, r.err
    assert r.doc["layers"][0]["file"]["extents"] >= 1
    assert (r.doc["cold"] or {}).get("bytes", SIZE) == SIZE


@pytest.mark.parametrize("when", ["after-the-stack", "after-the-links"])
def test_a_directory_swapped_for_a_link_after_explain_looked_is_refused_not_timed(stack, swap_arena, monkeypatch,
                                                                                   when):
    """The swap a racing nobody would make, made at a fixed point instead of raced: after explain resolved the
    file's stack by its name, or after its links were judged, nobody's directory becomes a link to the root-only
    one. The file is opened once, through no link, and checked against its stack: refused, never read."""
    from tunectl.explain import investigate
    from tunectl.system import trust

    secret, home = swap_arena
    assert run_cli("explain", str(home / "real" / "f"), "--no-cold", env=stack["env"]).code == 0  # as it is: read

    def swap() -> None:
        (home / "real").rename(home / "was-real")
        _nobodys_link(home / "real", secret)

    if when == "after-the-stack":
        resolve = investigate.resolve

        def resolve_then_swap(ctx, target):
            found = resolve(ctx, target)
            swap()
            return found

        monkeypatch.setattr(investigate, "resolve", resolve_then_swap)
    else:
        judged = trust.resolve_own_links

        def judge_then_swap(path):
            found = judged(path)
            swap()
            return found

        monkeypatch.setattr(trust, "resolve_own_links", judge_then_swap)
    r = run_cli("explain", str(home / "real" / "f"), "--json", env=stack["env"])
    assert r.code == 2 and r.doc["ok"] is False and "layers" not in r.doc, (r.code, r.out[:300])
    said = {"after-the-stack": f"{home / 'real'}: a symbolic link owned by nobody",
            "after-the-links": f"{home / 'real' / 'f'}: changed while tunectl looked at it"}[when]
    assert said in r.doc["error"]["message"], r.doc
