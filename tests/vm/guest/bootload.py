"""The boot workload of the boot pair (guest groups `bootpair1`/`bootpair2`): a service that reads a tree.

`bootload.py OUT.json [--gate=FIFO] [--mark=LOG] ROOT...` reads every file below each ROOT, in directory
order, whole, and writes when it started and ended (CLOCK_MONOTONIC, comparable with the other processes of
the guest), the files and the bytes. `--gate`: wait for the FIFO's writer to close it before starting;
`--mark`: the size of file LOG (a model disk's request log) when it started, so the host can tell the
requests before it from those during it. Nothing but the standard library: its start-up reads nothing
from the disk.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    out = sys.argv[1]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--"))
    roots = [a for a in sys.argv[2:] if not a.startswith("--")]
    if "gate" in opts:
        with open(opts["gate"], "rb") as gate:
            gate.read()  # returns at the writer's close
    mark = os.stat(opts["mark"]).st_size if "mark" in opts else None
    started = time.monotonic()
    files = total = 0
    buf = bytearray(1 << 20)
    for root in roots:
        for d, _, names in os.walk(root):
            for name in names:
                with open(os.path.join(d, name), "rb", buffering=0) as f:
                    while n := f.readinto(buf):
                        total += n
                files += 1
    ended = time.monotonic()
    with open(out, "w") as f:
        json.dump({"mark": mark, "started": started, "ended": ended, "seconds": ended - started, "files": files,
                   "bytes": total}, f)


if __name__ == "__main__":
    main()
