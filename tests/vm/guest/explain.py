"""Group `explain`: the browser stack of issue #29 and tunectl explain on it.

squashfs (4 KiB gzip blocks: the host-built browser image) -> dm-verity (hash tree in the
same image, after the data) -> a loop device with direct I/O -> ext4 -> the SD card
(mmcblk0p1). The same binary also lies on the ext4 for --compare. Records explain's JSON
(plain, --compare with --trace, --try) and its text output.
"""

from __future__ import annotations

import os
from pathlib import Path

from common import TUNECTL, Recorder, by_serial, read, settle, sh, tunectl, tunectl_env

BINARY = "python3.11"  # the browser image holds /usr/bin/python3.11 (tests/vm/machine.py)


def build(shared: Path) -> dict:
    sd = by_serial()["sdcard"]
    sh("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing")
    sh("modprobe loop; modprobe dm-verity; modprobe squashfs")  # built as modules in Debian's kernels
    sh(f"parted -s /dev/{sd} mklabel gpt mkpart data ext4 1MiB 100%", check=True)
    settle()
    part = f"/dev/{sd}p1"
    sh(f"mkfs.ext4 -q -F {part}", check=True)
    os.makedirs("/tmp/ext4", exist_ok=True)
    os.makedirs("/tmp/sq", exist_ok=True)
    sh(f"mount {part} /tmp/ext4", check=True)
    img = Path("/tmp/ext4/browser.img")
    sh(f"cp {shared / 'browser.sqfs'} {img} && cp /usr/bin/{BINARY} /tmp/ext4/{BINARY} && sync", check=True)
    data = (img.stat().st_size + 4095) // 4096 * 4096
    sh(f"truncate -s {data + (4 << 20)} {img}", check=True)
    loop = sh(f"losetup --find --show --direct-io=on {img}", check=True).stdout.strip()
    fmt = sh(f"veritysetup format {loop} {loop} --data-blocks={data // 4096} --hash-offset={data}", check=True).stdout
    root = next(line.split(":", 1)[1].strip() for line in fmt.splitlines() if line.startswith("Root hash"))
    sh(f"veritysetup open {loop} vroot {loop} {root} --hash-offset={data}", check=True)
    sh("mount -t squashfs -o ro /dev/mapper/vroot /tmp/sq", check=True)
    settle()
    dm = os.path.basename(os.path.realpath("/dev/mapper/vroot"))
    name = os.path.basename(loop)
    return {"sd": sd, "dm": dm, "loop": name, "dio": read(f"/sys/block/{name}/loop/dio"),
            "table": sh("dmsetup table vroot", check=True).stdout.strip(),
            "mq_deadline": sh(f"cat /sys/block/{sd}/queue/scheduler").stdout.strip()}


def raw_trace(shared: Path, target: str, devices: list[str]) -> int:
    """The four block events of a short cold read, as tracefs prints them: recorded for the unit tests."""
    inst = "/sys/kernel/tracing/instances/tunectl-record"
    sh(f"mkdir {inst} && echo 4096 > {inst}/buffer_size_kb", check=True)
    try:
        for event in ("block_bio_queue", "block_bio_remap", "block_rq_issue", "block_rq_complete"):
            sh(f"echo 1 > {inst}/events/block/{event}/enable", check=True)
        sh(f"dd if={target} iflag=nocache count=0 status=none; blockdev --flushbufs "
           + " ".join(f"/dev/{d}" for d in devices), check=True)
        sh(f"dd if={target} of=/dev/null bs=4k count=32 status=none", check=True)
        for event in ("block_bio_queue", "block_bio_remap", "block_rq_issue", "block_rq_complete"):
            sh(f"echo 0 > {inst}/events/block/{event}/enable")
        text = sh(f"cat {inst}/trace", check=True).stdout
    finally:
        sh(f"rmdir {inst}")
    out = shared / f"trace-browser-{os.uname().release.split('.')[0]}.{os.uname().release.split('.')[1]}.txt"
    out.write_text(text)
    return len(text.splitlines())


def run(rec: Recorder, args: list[str]) -> None:
    shared = Path(os.environ["TUNECTL_VM_SHARED"])
    env = tunectl_env("/tmp/explain-state")
    rec.step("build", lambda: build(shared))
    target, other = f"/tmp/sq/{BINARY}", f"/tmp/ext4/{BINARY}"

    def explain(extra: str = "") -> dict:
        code, doc, err = tunectl(f"explain {target} {extra}", env=env)
        return {"code": code, "doc": doc, "stderr": err}

    rec.step("plain", explain)
    rec.step("compare", lambda: explain(f"--compare {other} --trace"))
    rec.step("try", lambda: explain("--try --try-compressors ''"))
    rec.step("text", lambda: sh(f"{TUNECTL} explain {target} --compare {other} --trace", env=env).stdout)
    built = rec.results.get("build") or {}
    rec.step("raw_trace", lambda: raw_trace(shared, target, [built.get("dm", "dm-0"), built["loop"], built["sd"]]))
    rec.save()
