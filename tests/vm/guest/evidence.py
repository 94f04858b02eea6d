"""Group `profiles`: each shipped profile against the kernel's defaults on the model disks, with the workload its
description names (benchmarks/profiles.py prints the table; tests/vm/test_profiles.py asserts the direction).

For every profile: `tunectl apply -p PROFILE DEV...` once on all the disks it has rows on, each workload it claims
there REPS times (the short plan: once), then the kernel's values back (apply and rollback cost 10-60 s each under
TCG, so once per profile); "kernel" runs the workloads on the values the disk booted with.
Each run is a marked step "PROFILE:DISK:WORKLOAD:REP", so the host can replay the requests it sent through the
model. Workloads (fio unless said, cold cache):
- seq: one buffered sequential reader reading 4 KiB at a time (read-ahead decides the request size): MB/s;
- streams: four buffered sequential readers at once, in four quarters of the disk (the head moves between
  them; read-ahead decides how much each visit reads): MB/s, all four together;
- randmix: buffered random 4-16 KiB reads at QD1 while a direct sequential writer runs: read p99 ms;
- fgbg: direct random 4 KiB reads at QD1 while a direct sequential reader runs: foreground p99 ms;
- browser: the browser image stack on the card (squashfs 4 KiB gzip -> dm-verity -> loop, direct I/O -> ext4),
  `dd bs=4096` of its binary: MB/s.
Every result names its foreground requests ("fg": op and byte range on the disk) for the host's latency replay,
and a sequential one the byte ranges its readers read ("ranges": read-ahead past their ends is left out).
Args: "short" runs the VM tier's version (tests/vm/test_profiles.py); "only:WORKLOAD" only that workload's rows.
"""

from __future__ import annotations

import json
import os

from common import Recorder, by_serial, queue_state, settle, sh, tunectl, tunectl_env
from models import HDD_SERIAL, SD_SERIAL, browser_stack, cold, dd, like_a_card, marked

STATE = "/tmp/tunectl-profiles-state"
MIB = 1 << 20

# (profile, disk role, workload): what each profile's description claims, on the disk it names.
PLAN = [
    ("hdd-sequential", "hdd", "streams"), ("throughput-performance", "hdd", "streams"), ("default", "hdd", "streams"),
    ("balanced", "hdd", "streams"), ("powersave", "hdd", "streams"), ("virtual-guest", "hdd", "streams"),
    ("hdd-sequential", "hdd", "seq"), ("throughput-performance", "hdd", "seq"), ("default", "hdd", "seq"),
    ("database", "hdd", "randmix"), ("latency-performance", "hdd", "randmix"), ("default", "hdd", "randmix"),
    ("database", "sd", "randmix"), ("latency-performance", "sd", "randmix"), ("default", "sd", "randmix"),
    ("desktop", "hdd", "fgbg"), ("default", "hdd", "fgbg"),
    ("verity-readonly", "sd", "browser"), ("default", "sd", "browser"),
]
# The VM tier's version (tests/vm/test_profiles.py): every shipped profile once, on the row its claim names, one
# run each (the kernel's values one run per workload too); one apply and one rollback per profile for all its disks.
SHORT = [("throughput-performance", "hdd", "streams"), ("hdd-sequential", "hdd", "streams"),
         ("balanced", "hdd", "streams"), ("powersave", "hdd", "streams"), ("virtual-guest", "hdd", "streams"),
         ("default", "hdd", "streams"),
         ("database", "hdd", "randmix"), ("database", "sd", "randmix"),
         ("latency-performance", "hdd", "randmix"), ("latency-performance", "sd", "randmix"),
         ("desktop", "hdd", "fgbg"), ("verity-readonly", "sd", "browser")]
REPS = 3  # runs of each row in the full plan; the short plan runs one
STREAMS = 4


def fio(args: str) -> dict:
    out = sh(f"fio --output-format=json --randrepeat=1 --group_reporting=0 {args}", check=True).stdout
    return json.loads(out[out.index("{"):])


def p99_ms(job: dict) -> float:
    return job["read"]["clat_ns"]["percentile"]["99.000000"] / 1e6


def workload(kind: str, dev: str, short: bool) -> dict:
    seconds = 4 if short else 5
    cold()
    if kind == "seq":
        doc = fio(f"--name=seq --filename=/dev/{dev} --readonly --rw=read --bs=4k --direct=0 --size=16m "
                  "--ioengine=psync")
        job = doc["jobs"][0]["read"]
        return {"metric": "MB/s", "value": job["bw_bytes"] / 1e6, "better": "higher", "bytes": job["io_bytes"],
                "ranges": [[0, 16 * MIB]], "fg": None}
    if kind == "streams":
        mib = 16
        jobs = " ".join(f"--name=s{i} --offset={i * 256}m --size={mib}m" for i in range(STREAMS))
        doc = fio(f"--filename=/dev/{dev} --readonly --rw=read --bs=64k --direct=0 --ioengine=psync {jobs}")
        reads = [j["read"] for j in doc["jobs"]]
        seconds_all = max(r["runtime"] for r in reads) / 1000
        moved = sum(r["io_bytes"] for r in reads)
        return {"metric": "MB/s", "value": moved / seconds_all / 1e6, "better": "higher", "bytes": moved,
                "ranges": [[i * 256 * MIB, mib * MIB] for i in range(STREAMS)], "fg": None}
    if kind == "randmix":
        doc = fio(f"--filename=/dev/{dev} --runtime={seconds} --time_based --ioengine=psync "
                  f"--name=reader --rw=randread --bsrange=4k-16k --direct=0 --size=256m "
                  f"--name=writer --rw=write --bs=256k --direct=1 --offset=300m --size=100m")
        return {"metric": "read p99 ms", "value": p99_ms(doc["jobs"][0]), "better": "lower",
                "iops": doc["jobs"][0]["read"]["iops"], "fg": {"op": "r", "lo": 0, "hi": 256 * MIB}}
    if kind == "fgbg":
        doc = fio(f"--filename=/dev/{dev} --readonly --runtime={seconds} --time_based --ioengine=psync "
                  f"--name=fg --rw=randread --bs=4k --direct=1 --size=256m "
                  f"--name=bg --rw=read --bs=1m --direct=1 --offset=512m --size=400m")
        return {"metric": "foreground p99 ms", "value": p99_ms(doc["jobs"][0]), "better": "lower",
                "bg_mb_s": doc["jobs"][1]["read"]["bw_bytes"] / 1e6, "fg": {"op": "r", "lo": 0, "hi": 256 * MIB}}
    path = "/tmp/sqb/mbrowser.bin"  # browser: the stack browser_stack() mounted
    result = dd(f"if={path} bs=4096")
    size = os.path.getsize(path)
    return {"metric": "MB/s", "value": size / result["seconds"] / 1e6, "better": "higher", "bytes": size, "fg": None}


def restore(devs: list[str], kernel: dict[str, dict]) -> None:
    """The values each device booted with, written back through sysfs: a scheduler switch resets its knobs, so
    switch to none and back, then nr_requests and read-ahead (a tunectl rollback costs a minute under TCG)."""
    for dev in devs:
        q, was = f"/sys/block/{dev}/queue", kernel[dev]
        if was["scheduler"]:
            sh(f"echo none > {q}/scheduler; echo {was['scheduler']} > {q}/scheduler")
        if was["nr_requests"]:
            sh(f"echo {was['nr_requests']} > {q}/nr_requests")
        sh(f"echo {was['read_ahead_kb']} > {q}/read_ahead_kb", check=True)
        now = {k: v for k, v in queue_state(dev).items() if k != "schedulers"}  # a profile may load bfq
        if now != {k: v for k, v in was.items() if k != "schedulers"}:
            raise RuntimeError(f"{dev} not back at its boot values: {now} != {was}")


def runs_of(rec: Recorder, profile: str, rows: list[tuple[str, str]], devs: dict[str, list[str]],
            kernel: dict[str, dict], short: bool) -> list:
    """The marked runs of each (disk role, workload) in `rows` on `profile`'s values (REPS, one in the short plan),
    on the first device of that role in `devs`. The profile is applied once to every device of those roles before
    them; afterwards `tunectl rollback` (the short plan, which asserts it) or the boot values written back
    (`restore`)."""
    roles = list(dict.fromkeys(role for role, _ in rows))
    names = [dev for role in roles for dev in devs[role]]
    env = tunectl_env(f"{STATE}-{profile}-{'-'.join(roles)}")
    applied = None
    if profile != "kernel":
        code, doc, err = tunectl(f"apply -p {profile} {' '.join(names)}", env)
        applied = {"code": code, "settings": [s for s in (doc or {}).get("settings", []) if s["status"] == "changed"],
                   "stderr": err[-500:]}
    state = {dev: queue_state(dev) for dev in names}
    out = []
    for role, kind in rows:
        for rep in range(1 if short else REPS):
            value = marked(rec, f"{profile}:{role}:{kind}:{rep}", lambda r=role, k=kind: workload(k, devs[r][0], short))
            if value is not None:
                out.append(dict(value, queue={dev: state[dev] for dev in devs[role]}, applied=applied,
                                profile=profile, disk=role, workload=kind, rep=rep))
    if profile != "kernel":
        if short:
            code, _, err = tunectl(f"rollback {' '.join(names)}", env)
            back = {dev: queue_state(dev) for dev in names}
            for result in out:
                result["rollback"] = code
                result["rollback_stderr"] = err[-500:]
                result["back"] = {dev: back[dev] for dev in result["queue"]}
                result["booted"] = {dev: kernel[dev] for dev in result["queue"]}
        else:
            rec.step(f"restore:{profile}:{'-'.join(roles)}", lambda: restore(names, kernel))
    return out


def run(rec: Recorder, args: list[str]) -> None:
    settle()
    names = by_serial()
    disks = {"hdd": names.get(HDD_SERIAL), "sd": names.get(SD_SERIAL)}
    rec["disks"] = disks
    if disks["sd"]:
        rec.step("sd_queue", lambda: like_a_card(disks["sd"]))
    short = "short" in args
    only = {a.split(":", 1)[1] for a in args if a.startswith("only:")}
    plan = [p for p in (SHORT if short else PLAN) if disks[p[1]] and (not only or p[2] in only)]
    rec["marks"] = {}  # each run's slice of the model disks' request logs, for the host's replay
    results: list = []
    # One apply per profile for all the rows it claims on the raw disks, then the browser stack: it puts ext4 on
    # the card, which the raw-device runs would overwrite.
    for stacked in (False, True):
        mine = [p for p in plan if (p[2] == "browser") == stacked]
        if not mine:
            continue
        devs = {role: [dev] for role, dev in disks.items() if dev}
        if stacked:
            stack = rec.step("browser_stack", lambda: [os.path.basename(d) for d in browser_stack(disks["sd"])])
            if not stack:
                continue
            devs["sd"] = [os.path.basename(os.path.realpath("/dev/mapper/mbrowser")), disks["sd"], *stack]
        kernel = {dev: queue_state(dev) for role in devs for dev in devs[role]}
        baseline = list(dict.fromkeys((role, kind) for _, role, kind in mine))
        for profile in ["kernel", *dict.fromkeys(p for p, _, _ in mine)]:
            rows = baseline if profile == "kernel" else [(role, kind) for p, role, kind in mine if p == profile]
            results += runs_of(rec, profile, rows, devs, kernel, short)
            rec["runs"] = results
            rec.save()  # a boot cut short by its timeout keeps the rows done so far
    rec["runs"] = results
