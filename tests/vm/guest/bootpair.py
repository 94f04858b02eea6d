"""Groups `bootpair1` and `bootpair2`: the boot units of tunectl preload at two boots of the model HDD.

The model HDD (serial tcmhdd01) holds an ext4 that stands for the root file system of the booted
machine: a tree of files below usr/ (shuffled write order, tests/vm/guest/preload.py) and the state
directory var/lib/tunectl/preload. The boot workload (tests/vm/guest/bootload.py) is a service that
reads every file of the tree in directory order. The judged rounds (boot 1 cold, boot 2 gated) run it alone,
as at a boot: `preload record` is a measuring instrument whose fanotify reader would take the emulated CPU
from the replay. Only boot 2's head-start round runs under it: its record is what that boot read, the
`--against` list of the hit rate.

systemd does not run the units here: the guest's PID 1 is virtme-ng's init. The units' own lines are
run instead, read from udev/tunectl-preload-*.service at run time: ConditionPathExists, StateDirectory,
ExecStart (its `tunectl` is this checkout's), Nice (nice -n) and IOSchedulingClass (ionice -c). Their
absolute paths are taken below the model disk's mount point, as if it were the root (the unit's
`/usr /etc` are the tree, `/var/lib/tunectl/preload/boot.list` is on the model disk).

Boot 1 (cold, no list): the workload runs and is timed (step `workload`); then the collect unit's
command collects the list (step `collect`). Boot 2: the replay unit's command starts first and is not
waited for (Type=exec), the same workload starts right after it and is timed (step `workload`, from the
replay's start to the workload's end), then the replay is waited for and `preload show --stats LIST
--against` what boot 2 read gives the hit rate. Then the gated round (step `together`): cold again, the
workload waits at a FIFO gate that opens the instant the replay starts; a thread samples both processes'
read bytes (/proc/PID/io) every 0.1 s, the race's timeline.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import traceback

from common import REPO, Recorder, read, sh, tunectl, tunectl_env
from models import SHARED, marked
from preload import build, cold, files_arg, model_hdd
from replaystart import startup

__all__ = ["first", "second", "unit", "unit_command"]

ROOT = "/tmp/bootroot"  # the model disk's ext4, standing for the root file system of the booted machine
TREE = "usr/share/bootapp"
UNITS = REPO / "udev"
WORKLOAD = REPO / "tests" / "vm" / "guest" / "bootload.py"
IOCLASS = {"realtime": "1", "best-effort": "2", "idle": "3"}  # systemd.exec(5) IOSchedulingClass= -> ionice -c


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's settings by key (every section; a key given twice keeps both values, in order)."""
    keys: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys


def rooted(path: str) -> str:
    return ROOT + path if path.startswith("/") else path


def conditions_met(settings: dict[str, list[str]]) -> bool:
    """ConditionPathExists= as systemd checks it (a leading ! negates), below ROOT."""
    for cond in settings.get("ConditionPathExists", []):
        negate = cond.startswith("!")
        if os.path.exists(rooted(cond.lstrip("!"))) == negate:
            return False
    return True


def unit_command(settings: dict[str, list[str]]) -> list[str]:
    """The unit's ExecStart as systemd would run it: with its Nice= and IOSchedulingClass=, paths below ROOT."""
    (exec_start,) = settings["ExecStart"]
    argv = shlex.split(exec_start)
    if argv[0] != "tunectl":
        raise ValueError(f"ExecStart runs {argv[0]}, not tunectl")
    argv = [str(REPO / ".venv" / "bin" / "tunectl")] + [rooted(a) for a in argv[1:]]
    prefix = []
    if "Nice" in settings:
        prefix += ["nice", "-n", settings["Nice"][-1]]
    if "IOSchedulingClass" in settings:
        prefix += ["ionice", "-c", IOCLASS[settings["IOSchedulingClass"][-1]]]
    return prefix + argv


def state_directory(settings: dict[str, list[str]]) -> None:
    for d in settings.get("StateDirectory", []):
        os.makedirs(rooted(f"/var/lib/{d}"), mode=0o755, exist_ok=True)


def env() -> dict:
    return tunectl_env("/tmp/tunectl-state")


def workload(name: str, gate: str | None = None, record: bool = False) -> tuple[list[str], str]:
    """The workload's command, alone or under `preload record` (what it read: /tmp/read-<name>.list), and its
    result file."""
    out = f"/tmp/workload-{name}.json"
    roots = [f"{ROOT}/usr", f"{ROOT}/etc"]
    opts = [f"--mark={SHARED / 'mhdd.requests'}", *([f"--gate={gate}"] if gate else [])]
    cmd = [sys.executable, str(WORKLOAD), out, *opts, *roots]
    if record:
        cmd = [str(REPO / ".venv" / "bin" / "tunectl"), "-q", "preload", "record", "-o", f"/tmp/read-{name}.list",
               *(f"--scope={r}" for r in roots), "--", *cmd]
    return cmd, out


def run_workload(name: str, release=None, record: bool = False, watch=None) -> dict:  # noqa: ANN001 (callables)
    """The workload, timed by itself; `record`: under `preload record` (a measuring instrument: its fanotify
    reader takes the emulated CPU's time, which a boot does not spend). With `release`: it waits at a gate until
    `release()` has run (the replay started at the very moment the workload does). `watch(pid)`, called at the
    release with the workload's pid, returns a callable that stops watching and returns what it saw."""
    gate = f"/tmp/gate-{name}" if release else None
    cmd, out = workload(name, gate, record)
    watched = None
    if gate is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=900)
        code, err = proc.returncode, proc.stderr
    else:
        os.mkfifo(gate)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
        deadline = time.monotonic() + 600
        while True:  # a FIFO opens for writing, without blocking, once its reader is waiting
            try:
                writer = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the workload never reached its gate: {proc.communicate()[1]}") from None
                time.sleep(0.01)
        release()
        stop = watch(proc.pid) if watch else None
        os.close(writer)
        _, err = proc.communicate(timeout=900)
        code = proc.returncode
        if stop is not None:
            watched = stop()
    if code != 0:
        raise RuntimeError(f"the workload exited {code}: {err.strip()}")
    with open(out) as f:
        result = json.load(f)
    return result if watched is None else {**result, "timeline": watched}


def read_bytes(pid: int) -> int | None:
    """Bytes process `pid` has sent to the disks to read (/proc/PID/io read_bytes), None once it is gone."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def watcher(replay_pid, every: float = 0.1):  # noqa: ANN001, ANN201 (callables)
    """watch(pid) for run_workload: every `every` s (guest wall), the bytes the replay and the workload have sent
    to the disk to read, as [seconds since the release, replay bytes, workload bytes]: when the replay's reads
    began against how far the workload had got. `replay_pid()` names the replay, started by the release. A thread
    reading two small /proc files: little CPU."""
    import threading

    def watch(workload_pid: int):  # noqa: ANN202
        samples: list = []
        done = threading.Event()
        t0, replay = time.monotonic(), replay_pid()

        def run() -> None:
            while not done.is_set():
                samples.append([round(time.monotonic() - t0, 3), read_bytes(replay), read_bytes(workload_pid)])
                done.wait(every)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def stop() -> list:
            done.set()
            thread.join()
            return samples

        return stop

    return watch


def first(rec: Recorder, args: list[str]) -> None:
    """Boot 1: build the tree, then cold: the workload, then the collect unit's command."""
    files = files_arg(args)
    hdd = model_hdd(rec)
    if not hdd:
        return
    rec["tree"] = rec.step("build", lambda: build(hdd, files, ROOT, TREE))
    os.makedirs(f"{ROOT}/etc", exist_ok=True)
    sh("sync", check=True)
    cold(hdd)
    marked(rec, "workload", lambda: run_workload("cold"))
    collect = unit("tunectl-preload-collect.service")
    rec["collect_condition"] = conditions_met(collect)

    def run_collect() -> dict:
        state_directory(collect)
        cmd = unit_command(collect)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=900)
        return {"command": cmd, "code": proc.returncode, "stderr": proc.stderr.strip()}

    if rec["collect_condition"]:
        marked(rec, "collect", run_collect)
    list_path = rooted(shlex.split(collect["ExecStart"][0])[-1])
    code, doc, err = tunectl(f"preload show --stats {list_path}", env())
    rec["list"] = {"code": code, "doc": doc, "stderr": err,
                   "mounts": json.loads(read(list_path).split("\n", 1)[0]).get("mounts") if read(list_path) else None}
    sh("sync", check=True)
    sh(f"umount {ROOT}", check=True)


def measured_startup(replay_cmd: list[str], list_path: str, hdd: str) -> dict:
    """guest/replaystart.py's measurement beside the pair: its failure is reported in it, not as the pair's."""
    try:
        return startup(replay_cmd, list_path, env(), lambda: cold(hdd))
    except Exception:
        return {"error": traceback.format_exc()}


def second(rec: Recorder, args: list[str]) -> None:
    """Boot 2: the replay unit's command starts, not waited for; the workload runs beside it.
    args: `startup` adds step `startup` at the end: where the replay's start-up goes (guest/replaystart.py)."""
    hdd = model_hdd(rec)
    if not hdd:
        return
    os.makedirs(ROOT, exist_ok=True)
    sh(f"mount /dev/{hdd} {ROOT}", check=True)
    dev = os.stat(ROOT).st_dev
    rec["device"] = f"{os.major(dev)}:{os.minor(dev)}"  # boot 1's may differ: the disks are probed in any order
    cold(hdd)  # as boot 1: only what mounting read, dropped
    replay = unit("tunectl-preload-replay.service")
    rec["replay_condition"] = conditions_met(replay)
    replay_cmd = unit_command(replay)
    rec["replay_command"] = replay_cmd
    replays: dict = {}

    def start_replay(name: str) -> float:
        # Type=exec: systemd goes on once the command is executing; the boot does not wait for it.
        replays[name] = subprocess.Popen(replay_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env=env())
        return time.monotonic()

    def wait_replay(name: str) -> dict:
        proc = replays[name]
        _, err = proc.communicate(timeout=900)
        ok = {0, *(int(c) for s in replay.get("SuccessExitStatus", []) for c in s.split())}
        return {"code": proc.returncode, "success": proc.returncode in ok, "stderr": err.strip(),
                "ended": time.monotonic()}

    if not rec["replay_condition"]:
        return
    # As at a boot: the replay unit starts first, the workload (a later service) after it.
    marked(rec, "workload", lambda: {"replay_started": start_replay("boot"), **run_workload("boot", record=True)})
    rec["replay"] = wait_replay("boot")
    list_path = rooted(shlex.split(replay["ExecStart"][0])[-1])
    code, doc, err = tunectl(f"preload show --stats {list_path} --against /tmp/read-boot.list", env())
    rec["stats"] = {"code": code, "doc": doc, "stderr": err}
    # The race at its worst: cold again, the workload waits at a gate and starts the instant the replay does.
    cold(hdd)
    started: dict = {}

    def release() -> None:
        started["at"] = start_replay("together")

    watch = watcher(lambda: replays["together"].pid)
    marked(rec, "together", lambda: {**run_workload("together", release, watch=watch),
                                     "replay_started": started.get("at")})
    rec["replay_together"] = wait_replay("together")
    if "startup" in args:
        marked(rec, "startup", lambda: measured_startup(replay_cmd, list_path, hdd))
    sh(f"umount {ROOT}")
