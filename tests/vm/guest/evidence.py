"""Group `profiles`: each shipped profile against the kernel's defaults on the model disks, with the workload its
description names (benchmarks/profiles.py prints the table; tests/vm/test_profiles.py asserts the direction).

For every (profile, disk, workload): `tunectl apply -p PROFILE DEV`, the workload, `tunectl rollback DEV` (the
kernel's values back); "kernel" runs the workload on the values the disk booted with. Workloads (fio, cold cache):
- seq: one buffered sequential reader (read-ahead decides the request size): MB/s, higher is better;
- randmix: buffered random 4-16 KiB reads at QD1 while a direct sequential writer runs: read p99 ms, lower better;
- fgbg: direct random 4 KiB reads at QD1 while a direct sequential reader runs: foreground p99 ms, lower better.
Args: "short" runs the seconds-long version the VM tier asserts on.
"""

from __future__ import annotations

import json

from common import Recorder, by_serial, queue_state, settle, sh, tunectl, tunectl_env
from models import HDD_SERIAL, SD_SERIAL, cold, like_a_card, marked

STATE = "/tmp/tunectl-profiles-state"

# (profile, disk role, workload): what each profile's description claims, on the disk it names.
PLAN = [
    ("hdd-sequential", "hdd", "seq"), ("throughput-performance", "hdd", "seq"), ("default", "hdd", "seq"),
    ("database", "hdd", "randmix"), ("latency-performance", "hdd", "randmix"), ("default", "hdd", "randmix"),
    ("database", "sd", "randmix"), ("latency-performance", "sd", "randmix"), ("default", "sd", "randmix"),
    ("desktop", "hdd", "fgbg"), ("default", "hdd", "fgbg"),
]
# The VM tier asserts only the claim whose margin (2.2x) was far outside the run-to-run noise seen in the full
# run (default, changing only the scheduler, moved the same workload 1.34x).
SHORT = [("throughput-performance", "hdd", "seq")]


def fio(args: str) -> dict:
    out = sh(f"fio --output-format=json --randrepeat=1 --group_reporting=0 {args}", check=True).stdout
    return json.loads(out[out.index("{"):])


def p99_ms(job: dict) -> float:
    return job["read"]["clat_ns"]["percentile"]["99.000000"] / 1e6


def workload(kind: str, dev: str, seconds: int) -> dict:
    cold()
    if kind == "seq":
        doc = fio(f"--name=seq --filename=/dev/{dev} --readonly --rw=read --bs=64k --direct=0 --size=96m "
                  "--ioengine=psync")
        job = doc["jobs"][0]["read"]
        return {"metric": "MB/s", "value": job["bw_bytes"] / 1e6, "better": "higher"}
    if kind == "randmix":
        doc = fio(f"--filename=/dev/{dev} --runtime={seconds} --time_based --ioengine=psync "
                  f"--name=reader --rw=randread --bsrange=4k-16k --direct=0 --size=256m "
                  f"--name=writer --rw=write --bs=256k --direct=1 --offset=300m --size=100m")
        return {"metric": "read p99 ms", "value": p99_ms(doc["jobs"][0]), "better": "lower",
                "iops": doc["jobs"][0]["read"]["iops"]}
    doc = fio(f"--filename=/dev/{dev} --readonly --runtime={seconds} --time_based --ioengine=psync "
              f"--name=fg --rw=randread --bs=4k --direct=1 --size=256m "
              f"--name=bg --rw=read --bs=1m --direct=1 --offset=512m --size=400m")
    return {"metric": "foreground p99 ms", "value": p99_ms(doc["jobs"][0]), "better": "lower",
            "bg_mb_s": doc["jobs"][1]["read"]["bw_bytes"] / 1e6}


def one(profile: str, dev: str, kind: str, seconds: int) -> dict:
    env = tunectl_env(STATE)
    applied = None
    if profile != "kernel":
        code, doc, err = tunectl(f"apply -p {profile} {dev}", env)
        applied = {"code": code, "settings": [s for s in (doc or {}).get("settings", []) if s["status"] == "changed"],
                   "stderr": err[-500:]}
    state = queue_state(dev)
    result = dict(workload(kind, dev, seconds), queue=state, applied=applied)
    if profile != "kernel":
        code, _, err = tunectl(f"rollback {dev}", env)
        result["rollback"] = code
    return result


def run(rec: Recorder, args: list[str]) -> None:
    settle()
    names = by_serial()
    disks = {"hdd": names.get(HDD_SERIAL), "sd": names.get(SD_SERIAL)}
    rec["disks"] = disks
    if disks["sd"]:
        rec.step("sd_queue", lambda: like_a_card(disks["sd"]))
    short = "short" in args
    seconds = 4 if short else 8
    plan = SHORT if short else PLAN
    runs = []
    for kind_dev in dict.fromkeys((role, kind) for _, role, kind in plan):
        role, kind = kind_dev
        if disks[role]:
            runs.append(("kernel", role, kind))
    runs += [p for p in plan if disks[p[1]]]
    results = []
    rec["marks"] = {}  # each run's slice of the model disks' request logs, for the host's replay
    for profile, role, kind in runs:
        value = marked(rec, f"{profile}:{role}:{kind}",
                       lambda p=profile, r=role, k=kind: one(p, disks[r], k, seconds))
        if value is not None:
            results.append(dict(value, profile=profile, disk=role, workload=kind))
    rec["runs"] = results
