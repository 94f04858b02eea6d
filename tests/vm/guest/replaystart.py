"""Where the boot replay's start-up goes inside the guest (the boot pair's boot 2, step `startup`).

In the gated round the replay and the workload start at the same instant, and under TCG the replay's own
start (11-22 s of guest wall time at 400 files) outlasts the workload. This splits that time, each part
measured cold (the guest's caches dropped, as before the gated round) unless said:
- `python -c pass`: the interpreter alone (cold, then warm);
- the replay unit's command as the unit gives it, under `python -X importtime`: wall time and the imports by
  top-level module;
- the same with --json, cold and then warm (nothing dropped): wall time and the replay's own account (seconds
  from its first read of the list's metadata to the reads settled); warm against cold is what of it is the
  cold reads of Python and tunectl;
- the parts before the replay's first read, in one process: importing the list reader, reading the header,
  the survey (the whole list read and decoded), the metadata ranges, and a plain `os.stat` of every listed
  file in inode order (an upper bound of the replay's inode pass, which issues them through io_uring).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

__all__ = ["startup"]

PHASES = r"""
import json, os, sys, time
t = [("start", time.monotonic())]
from tunectl.preload.listfile import header, survey
from tunectl.preload.listing import metadata_of
t.append(("import the list reader", time.monotonic()))
path = sys.argv[1]
head = header(path)
t.append(("header", time.monotonic()))
found = survey(path)
t.append(("survey: the list read and decoded", time.monotonic()))
metadata_of(head, path)
t.append(("metadata ranges", time.monotonic()))
for e in sorted(found.entries or [], key=lambda e: e.inode):
    try:
        os.stat(e.path)
    except OSError:
        pass
t.append(("stat of every file, inode order", time.monotonic()))
print(json.dumps({"files": found.files, "bytes": found.bytes, "kept": found.entries is not None,
                  "phases": [[n, round(b - a, 4)] for (_, a), (n, b) in zip(t, t[1:])]}))
"""


def _timed(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    return time.monotonic() - started, proc


def imports(stderr: str, top: int = 12) -> dict:
    """`-X importtime` lines: the total of the top-level imports and the `top` largest by cumulative time."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if not name.startswith("  "):  # depth 0: one space before the name, two more a level
            rows.append((name.strip(), int(cumulative) / 1e6))
    rows.sort(key=lambda r: r[1], reverse=True)
    return {"seconds": round(sum(s for _, s in rows), 4), "modules": len(rows),
            "largest": [[n, round(s, 4)] for n, s in rows[:top]]}


def _report(proc: subprocess.CompletedProcess) -> dict:
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"code": proc.returncode, "stdout": proc.stdout[-500:]}
    keys = ("files", "bytes", "seconds", "issue_seconds", "settled", "inode_pass", "inode_pass_files", "requests")
    return {"code": proc.returncode, **{k: doc.get(k) for k in keys}}


def startup(replay_cmd: list[str], list_path: str, env: dict, cold) -> dict:  # noqa: ANN001 (a callable)
    """The parts above; `replay_cmd` is the unit's command (nice, ionice, tunectl, ...), `cold()` drops caches."""
    at = next(i for i, a in enumerate(replay_cmd) if a.endswith("/tunectl"))
    prefix, script, args = replay_cmd[:at], replay_cmd[at], replay_cmd[at + 1:]
    as_json = args if "--json" in args else ["--json", *args]  # --json imports json and pathlib: not the unit's
    out: dict = {"command": [*prefix, sys.executable, script, *args]}
    cold()
    out["python_pass_cold"] = round(_timed([sys.executable, "-c", "pass"], env)[0], 4)
    out["python_pass_warm"] = round(_timed([sys.executable, "-c", "pass"], env)[0], 4)
    cold()  # the unit's own line: its imports
    wall, proc = _timed([*prefix, sys.executable, "-X", "importtime", script, *args], env)
    out["cold"] = {"wall": round(wall, 4), "imports": imports(proc.stderr), **_report(proc)}
    cold()  # the replay's own account (--json), without -X importtime's cost
    wall, proc = _timed([*prefix, sys.executable, script, *as_json], env)
    out["cold_json"] = {"wall": round(wall, 4), **_report(proc)}
    wall, proc = _timed([*prefix, sys.executable, script, *as_json], env)
    out["warm"] = {"wall": round(wall, 4), **_report(proc)}
    cold()
    wall, proc = _timed([sys.executable, "-c", PHASES, list_path], env)
    try:
        out["phases"] = {"wall": round(wall, 4), **json.loads(proc.stdout)}
    except json.JSONDecodeError:
        out["phases"] = {"wall": round(wall, 4), "code": proc.returncode, "stderr": proc.stderr[-1000:]}
    return out
