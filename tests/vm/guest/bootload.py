"""The boot workload of the boot pair (guest groups `bootpair1`/`bootpair2`): a service that reads a tree.

`bootload.py OUT.json ROOT...` reads every file below each ROOT, in directory order, whole, and writes
when it started and ended (CLOCK_MONOTONIC, comparable with the other processes of the guest), the
files and the bytes. Nothing but the standard library, so its start-up reads nothing from the disk.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    out, roots = sys.argv[1], sys.argv[2:]
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
        json.dump({"started": started, "ended": ended, "seconds": ended - started, "files": files, "bytes": total}, f)


if __name__ == "__main__":
    main()
