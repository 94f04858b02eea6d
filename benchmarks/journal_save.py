#!/usr/bin/env python3
"""The cost of journal generations: one save and one load, beside a plain atomic write of the same JSON.

Run: .venv/bin/python benchmarks/journal_save.py [--devices 64] [--runs 50] [--dir /var/tmp]
The directory should be on a real disk (fsync is the cost); /dev/shm shows the CPU part only.
"plain" is what version 1 did (atomic_write of the JSON); "generations" links the
current file to .1 (.1 -> .2), seals the payload with a SHA-256 and writes it the
same way; "load" reads and verifies the newest generation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import median_ms, row  # noqa: E402
from tunectl.system.state import StateStore, atomic_write  # noqa: E402
from tunectl.tuning import journal  # noqa: E402


def journal_data(devices: int) -> dict:
    by = {"profile": "throughput-performance", "tunectl": "0.1.0", "at": "2026-11-23T09:00:00Z"}
    attrs = {"scheduler": "mq-deadline", "read_ahead_kb": 128, "nr_requests": 64, "iosched/read_expire": 500}
    return {"devices": {f"wwn:0x5000c500{i:08x}": {"name": f"sd{i}", "attributes": dict(attrs),
                                                   "changed_by": {a: dict(by) for a in attrs},
                                                   "iosched_snapshot": {"scheduler": "mq-deadline", "knobs": {
                                                       "read_expire": 500, "write_expire": 5000, "fifo_batch": 16}}}
                        for i in range(devices)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    data = journal_data(args.devices)
    typed = journal.Journal.from_json(data)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        plain_dir, gen_dir = Path(tmp, "plain"), Path(tmp, "generations")
        plain_dir.mkdir()
        store = StateStore(gen_dir)
        journal.load(store)
        plain, sealed, load = [], [], []
        for _ in range(args.runs):  # alternate, so both see the same disk and load
            start = time.perf_counter()
            atomic_write(plain_dir / "journal.json", (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            with store.locked():
                journal.save(store, typed)
            sealed.append(time.perf_counter() - start)
            start = time.perf_counter()
            journal.load(StateStore(gen_dir))
            load.append(time.perf_counter() - start)
        size = (gen_dir / "journal.json").stat().st_size
    print(f"journal of {args.devices} devices ({size} bytes), {args.runs} runs in {args.dir}, medians:")
    base = median_ms(plain)
    print(row("plain atomic write (version 1)", base))
    print(row("save with generations + SHA-256 (version 2)", median_ms(sealed), base))
    print(row("load and verify the newest generation", median_ms(load)))


if __name__ == "__main__":
    main()
