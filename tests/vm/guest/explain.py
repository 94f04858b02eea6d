"""Group `explain`: the browser stack of issue #29 on the SD-card model, and tunectl explain on it.

squashfs (4 KiB gzip blocks: the model calibration's 8 MiB browser, built on the host) ->
dm-verity (data and hash tree each on a loop device with direct I/O) -> ext4 -> the SD card
model (sd-a1 on scsi-hd, queue depth 1 and mq-deadline like a card). The same binary lies on
the ext4 for --compare. Records explain's JSON (plain; --compare with --trace; --try, then what it
left, and a --try stopped by SIGINT while a scratch verity device is open), its text output, and a raw
block trace for the trace reader's unit tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from common import TUNECTL, Recorder, by_serial, read, settle, sh, tunectl, tunectl_env
from models import SD_SERIAL, browser_stack, like_a_card

EVENTS = ("block_bio_queue", "block_bio_remap", "block_rq_issue", "block_rq_complete")


def build() -> dict:
    sh("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing")
    settle()
    card = by_serial()[SD_SERIAL]
    like_a_card(card)
    data, hashes = browser_stack(card)
    loop = os.path.basename(data)
    return {"sd": card, "dm": os.path.basename(os.path.realpath("/dev/mapper/mbrowser")), "loop": loop,
            "hash_loop": os.path.basename(hashes), "dio": read(f"/sys/block/{loop}/loop/dio"),
            "table": sh("dmsetup table mbrowser", check=True).stdout.strip(), "image": image_sums()}


def image_sums() -> str:
    """The user's image and hash tree, to show --try only read them."""
    return sh("sha256sum /tmp/card/mbrowser.sqfs /tmp/card/mbrowser.verity", check=True).stdout


def raw_trace(shared: Path, target: str, devices: list[str]) -> int:
    """The four block events of a short cold read, as tracefs prints them: recorded for the unit tests."""
    inst = "/sys/kernel/tracing/instances/tunectl-record"
    sh(f"mkdir {inst} && echo 4096 > {inst}/buffer_size_kb", check=True)
    try:
        for event in EVENTS:
            sh(f"echo 1 > {inst}/events/block/{event}/enable", check=True)
        sh(f"dd if={target} iflag=nocache count=0 status=none; blockdev --flushbufs "
           + " ".join(f"/dev/{d}" for d in devices), check=True)
        sh(f"dd if={target} of=/dev/null bs=4k count=32 status=none", check=True)
        for event in EVENTS:
            sh(f"echo 0 > {inst}/events/block/{event}/enable")
        text = sh(f"cat {inst}/trace", check=True).stdout
    finally:
        sh(f"rmdir {inst}")
    series = ".".join(os.uname().release.split(".")[:2])
    (shared / f"trace-browser-{series}.txt").write_text(text)
    return len(text.splitlines())


def leftovers() -> dict:
    """What --try makes, if any is left: scratch verity devices, loop devices of scratch images, their mounts and
    scratch directories (the names --try gives them: tunectl-explain-PID-N, .tunectl-explain-*)."""
    return {"dm": [n for n in sh("dmsetup ls", check=True).stdout.split() if n.startswith("tunectl-explain-")],
            "loops": [line for line in sh("losetup -a", check=True).stdout.splitlines() if ".tunectl-explain-" in line],
            "mounts": [line for line in read("/proc/self/mounts").splitlines() if ".tunectl-explain-" in line],
            "scratch": sorted(p.name for p in Path("/tmp/card").glob(".tunectl-explain-*")), "image": image_sums()}


def interrupted(target: str, env: dict) -> dict:
    """--try stopped by Ctrl-C (SIGINT) while a scratch verity device is open: what is left afterwards."""
    proc = subprocess.Popen([TUNECTL, "--json", "explain", target, "--try", "--try-compressors", ""], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if leftovers()["dm"]:
            seen = True
            break
        time.sleep(0.2)  # polling for a condition, bounded by the deadline
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    return {"saw_verity": seen, "code": proc.returncode, "stderr": err.strip()[-2000:], "left": leftovers()}


def run(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ["TUNECTL_VM_SHARED"])
    env = tunectl_env("/tmp/explain-state")
    built = rec.step("build", build) or {}
    target, other = "/tmp/sqb/mbrowser.bin", "/tmp/card/mbrowser.bin"

    def explain(extra: str = "") -> dict:
        code, doc, err = tunectl(f"explain {target} {extra}", env=env)
        return {"code": code, "doc": doc, "stderr": err}

    rec.step("plain", explain)
    rec.step("compare", lambda: explain(f"--compare {other} --trace"))
    rec.step("try", lambda: explain("--try --try-compressors ''"))
    rec.step("try_left", leftovers)
    rec.step("interrupted", lambda: interrupted(target, env))
    rec.step("text", lambda: sh(f"{TUNECTL} explain {target} --compare {other} --trace", env=env).stdout)
    rec.step("raw_trace", lambda: raw_trace(shared, target, [built["dm"], built["loop"], built["sd"]]))
    rec.save()
