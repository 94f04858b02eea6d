"""Group `models`: the model disks (tests/vm/diskmodel.py, served by nbdkit on the host) measured from a guest.

HDD (scsi-hd, serial tcmhdd01): random 4 KiB reads at QD1 (fio), a cold sequential read
with O_DIRECT from LBA 0 (dd), and `tunectl bench` over read_ahead_kb on a partition in the
inner zone. SD card (scsi-hd, serial tcmsd01, queue depth 1): the browser stack (squashfs 4 KiB gzip -> dm-verity -> loop
with direct I/O -> ext4 -> card) against the same binary on the card's ext4, read cold with
`dd bs=4096`. Each measurement records the byte range of the model's request log it
produced (`marks`), so the host can show the requests the model saw.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from common import Recorder, by_serial, queue_state, read, settle, sh, tunectl, tunectl_env

SHARED = Path(os.environ.get("TUNECTL_VM_SHARED", "/tmp"))
HDD_SERIAL, SD_SERIAL = "tcmhdd01", "tcmsd01"  # tests/vm/machine.py: model_machine()
INNER_START_MIB = 980  # the bench partition: the last 44 MiB of the 1 GiB HDD, its inner zone (~102 MB/s)
READ_AHEADS = "4,8,16,32,64,128,512,2048,8192"


def mark() -> dict[str, int]:
    """The size of each model disk's request log now."""
    return {p.stem: p.stat().st_size for p in SHARED.glob("*.requests")}


def marked(rec: Recorder, name: str, fn):  # noqa: ANN001, ANN201 (any step)
    """Run step `name`, recording the request-log range it produced in rec["marks"][name]."""
    before = mark()
    value = rec.step(name, fn)
    rec["marks"][name] = {"before": before, "after": mark()}
    return value


def cold() -> None:
    sh("sync; echo 3 > /proc/sys/vm/drop_caches", check=True)


def fio_random(dev: str) -> dict:
    out = sh(f"fio --name=rand --filename=/dev/{dev} --readonly --direct=1 --rw=randread --bs=4k --iodepth=1 "
             "--ioengine=psync --runtime=6 --time_based --randrepeat=1 --output-format=json", check=True).stdout
    job = json.loads(out)["jobs"][0]["read"]
    return {"iops": job["iops"], "ios": job["total_ios"], "lat_ms_mean": job["clat_ns"]["mean"] / 1e6}


def dd(args: str) -> dict:
    """Seconds dd took to read (to /dev/null), timed in the guest."""
    started = time.monotonic()
    sh(f"dd {args} of=/dev/null status=none", check=True)
    return {"seconds": time.monotonic() - started}


def sequential(dev: str, mib: int) -> dict:
    cold()
    sh(f"blockdev --flushbufs /dev/{dev}")
    result = dd(f"if=/dev/{dev} bs=1M count={mib} iflag=direct")
    result.update(mib=mib, mb_s=mib * 1.048576 / result["seconds"])
    return result


def bench(dev: str, env: dict, runs: int = 1, size: str = "16M") -> dict:
    code, doc, err = tunectl(f"bench {dev} --read-ahead {READ_AHEADS} --schedulers mq-deadline --runs {runs} "
                             f"--size {size} --seed 1", env)
    return {"code": code, "stderr": err, "doc": doc}


def like_a_card(dev: str) -> dict:
    """An SD card serves one command at a time: queue depth 1, so requests wait in mq-deadline and merge."""
    sh(f"echo 1 > /sys/block/{dev}/device/queue_depth", check=True)
    sh(f"echo mq-deadline > /sys/block/{dev}/queue/scheduler", check=True)
    return {"queue_depth": read(f"/sys/block/{dev}/device/queue_depth"), **queue_state(dev)}


def browser_stack(card: str) -> tuple[str, str]:
    """The browser stack of #29 on the card (the explain and models groups): ext4 on the card holding the host-built
    image (squashfs, 4 KiB gzip blocks), its verity hash tree and the same binary plain; the image and the hash tree
    each on a read-only loop device with direct I/O; dm-verity `mbrowser` over them, mounted on /tmp/sqb. The plain
    binary is /tmp/card/mbrowser.bin. Returns the data and hash loop devices (/dev/loopN)."""
    sh("modprobe loop", check=True)  # virtme's initramfs loads no module it does not need
    sh("modprobe dm-verity; modprobe squashfs")  # modules in Debian's kernels
    sh(f"mkfs.ext4 -q -F /dev/{card}", check=True)
    os.makedirs("/tmp/card", exist_ok=True)
    sh(f"mount /dev/{card} /tmp/card", check=True)
    for name in ("mbrowser.bin", "mbrowser.sqfs", "mbrowser.verity"):
        sh(f"cp {SHARED / name} /tmp/card/{name}", check=True)
    sh("sync", check=True)
    root_hash = (SHARED / "mbrowser.roothash").read_text().strip()
    data = sh("losetup --find --show --direct-io=on --read-only /tmp/card/mbrowser.sqfs", check=True).stdout.strip()
    hashes = sh("losetup --find --show --direct-io=on --read-only /tmp/card/mbrowser.verity", check=True).stdout.strip()
    sh(f"veritysetup open {data} mbrowser {hashes} {root_hash}", check=True)
    os.makedirs("/tmp/sqb", exist_ok=True)
    sh("mount -t squashfs -o ro /dev/mapper/mbrowser /tmp/sqb", check=True)
    settle()
    return data, hashes


def browser(card: str) -> dict:
    """The browser stack on the card's ext4 and the same binary beside it; dd bs=4096 cold, 3 runs each."""
    data, hashes = browser_stack(card)
    out: dict = {"loop_dio": {dev: read(f"/sys/block/{os.path.basename(dev)}/loop/dio") for dev in (data, hashes)},
                 "bytes": os.path.getsize("/tmp/card/mbrowser.bin"), "card": queue_state(card), "runs": []}
    for _ in range(3):
        run = {}
        for label, path in (("plain", "/tmp/card/mbrowser.bin"), ("stack", "/tmp/sqb/mbrowser.bin")):
            cold()
            before = mark()
            cpu = os.times()
            run[label] = dd(f"if={path} bs=4096")
            after_cpu = os.times()
            run[label]["guest_cpu_s"] = (after_cpu.children_system + after_cpu.children_user
                                         - cpu.children_system - cpu.children_user)
            run[label]["marks"] = {"before": before, "after": mark()}
        out["runs"].append(run)
    # The same stack read below squashfs (verity on the loop, no decompression): where the stack's time goes.
    cold()
    out["stack_raw"] = dd("if=/dev/mapper/mbrowser bs=4096")
    sh("umount /tmp/sqb; veritysetup close mbrowser", check=False)
    sh(f"losetup -d {data} {hashes}; umount /tmp/card", check=False)
    return out


def run(rec: Recorder, args: list[str]) -> None:
    """args: `sweep` runs only the HDD's bench sweep, 3 runs of 64 MiB a point (benchmarks/model_disks.py)."""
    sweep = "sweep" in args
    settle()
    names = by_serial()
    hdd, card = names.get(HDD_SERIAL), names.get(SD_SERIAL)
    rec["disks"] = {"hdd": hdd, "sd": card}
    rec["marks"] = {}
    rec.step("queues", lambda: {role: dict(queue_state(dev), rotational=read(f"/sys/block/{dev}/queue/rotational"),
                                           max_sectors_kb=read(f"/sys/block/{dev}/queue/max_sectors_kb"),
                                           size=int(read(f"/sys/block/{dev}/size") or 0) * 512)
                                for role, dev in rec["disks"].items() if dev})
    if hdd and not sweep:
        marked(rec, "hdd_random", lambda: fio_random(hdd))
        marked(rec, "hdd_sequential", lambda: sequential(hdd, 256))
    if hdd:
        sh(f"parted -s /dev/{hdd} mklabel gpt mkpart inner {INNER_START_MIB}MiB 100%", check=True)
        settle()
        part = next(p for p in sorted(os.listdir(f"/sys/block/{hdd}")) if re.fullmatch(rf"{hdd}\d+", p))
        rec["bench_partition"] = {"dev": part, "start": int(read(f"/sys/block/{hdd}/{part}/start") or 0) * 512}
        marked(rec, "hdd_bench", lambda: bench(part, tunectl_env("/tmp/tunectl-state"), *((3, "40M") if sweep else ())))
    if card and not sweep:
        rec.step("sd_queue", lambda: like_a_card(card))
        marked(rec, "sd_random", lambda: fio_random(card))
        marked(rec, "sd_browser", lambda: browser(card))
