"""fio for 4 KiB random reads: the command line (always --readonly) and its JSON output."""

from __future__ import annotations

import json

from tunectl.bench.results import RandomRead
from tunectl.errors import TunectlError


def fio_argv(path: str, size: int, seconds: float) -> list[str]:
    # fio splits --filename on ':'; a literal one is escaped with a backslash.
    return ["fio", "--name=tunectl-bench", "--readonly", f"--filename={path.replace(':', chr(92) + ':')}",
            "--rw=randread", "--bs=4k", "--ioengine=psync", "--direct=0", "--invalidate=1",
            f"--size={size}", f"--runtime={seconds:g}", "--output-format=json"]


def parse_fio_json(text: str) -> RandomRead:
    """The read figures of fio's first job; fio may print notes before the JSON document."""
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
        read = doc["jobs"][0]["read"]
        lat = read.get("clat_ns") or read.get("lat_ns") or {}
        return RandomRead(float(read["iops"]), float(read["bw_bytes"]) / 1e6, float(lat.get("mean", 0.0)) / 1000)
    except (ValueError, KeyError, IndexError, TypeError):
        raise TunectlError("fio printed no usable JSON report", hint="run fio --version; bench needs fio >= 3") from None
