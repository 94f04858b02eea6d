#!/usr/bin/env python3
"""Hot-plug latency of generated udev rules on real loop devices and a real systemd-udevd (root).

    sudo python3 benchmarks/udev_hotplug.py [--devices 12] [--rounds 2]

Variants, measured in the same run, interleaved by round:
  bare          no rules of ours: the cost of the event itself (default rules only)
  hand          a hand-written two-attribute rule: ATTR{queue/scheduler}="bfq", ATTR{queue/read_ahead_kb}="1024"
  hand-guarded  the same with the guard tunectl uses: ATTR{queue/scheduler}!="*[[]bfq[]]*" before the write
  tunectl       `tunectl udev render` of a profile with the same scheduler and read-ahead plus two bfq knobs
A scheduler switch freezes the queue and waits for RCU, so single figures vary by tens of ms:
compare medians, and run more attaches (--devices) for tighter ones.
Each attach starts from the same state (mq-deadline, read-ahead 128), so every tuned variant
does a real scheduler switch. Two figures per attach:
  end-to-end  `losetup` started -> udevd broadcast the processed event (all settings are in place then:
              udev writes ATTR keys while it runs the rules, before it sends the event on)
  in udev     the kernel's uevent received -> udevd broadcast it
Then the cost of a `below:` event: a change event on a tuned device with the rules alone and with the
RUN of `tunectl apply --stack` (a loop device has no slaves/, so that RUN's guard is removed here).

Only loop devices attached to files in a temporary directory are touched; every rules file is
scoped to them. A udevd started here (when none answers `udevadm control --ping`) is stopped at the end.
Prints figures; asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyudev  # noqa: E402

from tunectl.profile.resolve import load_profile  # noqa: E402
from tunectl.udev.lint import lint  # noqa: E402
from tunectl.udev.render import render  # noqa: E402

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
UDEVD = "/lib/systemd/systemd-udevd"
RULES = Path("/run/udev/rules.d") / f"65-tunectl-bench-{os.getpid()}.rules"
PROFILE = """\
name: bench
classes:
  loop:
    scheduler: bfq
    iosched: {slice_idle: 0, low_latency: 0}
    read_ahead_kb: 1024
"""
BELOW = PROFILE + "    below: {read_ahead_kb: 2048}\n"
START = (("queue/scheduler", "mq-deadline"), ("queue/read_ahead_kb", "128"))
EXPECT = {"tunectl": {"queue/read_ahead_kb": "1024", "queue/iosched/slice_idle": "0", "queue/iosched/low_latency": "0"},
          "hand": {"queue/read_ahead_kb": "1024"}, "hand-guarded": {"queue/read_ahead_kb": "1024"}}


def udevadm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["udevadm", *args], capture_output=True, text=True, env=ENV, check=check, timeout=120)


def write(name: str, attr: str, value: str) -> None:
    Path(f"/sys/block/{name}/{attr}").write_text(value)


def read(name: str, attr: str) -> str:
    return Path(f"/sys/block/{name}/{attr}").read_text().strip()


class Events:
    """Timestamps of kernel uevents and of udevd's processed events, by SEQNUM."""

    def __init__(self) -> None:
        ctx = pyudev.Context()
        self.kernel: dict[int, tuple[float, str]] = {}
        self.udev: dict[int, tuple[float, str]] = {}
        self.cond = threading.Condition()
        self.stop = False
        self.threads = []
        for source, store in (("kernel", self.kernel), ("udev", self.udev)):
            mon = pyudev.Monitor.from_netlink(ctx, source=source)
            mon.filter_by("block")
            mon.set_receive_buffer_size(4 << 20)
            mon.start()
            t = threading.Thread(target=self._run, args=(mon, store), daemon=True)
            t.start()
            self.threads.append(t)

    def _run(self, mon: pyudev.Monitor, store: dict) -> None:
        while not self.stop:
            dev = mon.poll(timeout=0.2)
            if dev is None:
                continue
            now = time.perf_counter()
            with self.cond:
                store[int(dev.get("SEQNUM", 0))] = (now, dev.sys_name)
                self.cond.notify_all()

    def wait_processed(self, name: str, after: int, last: int, timeout: float = 30) -> tuple[float, float]:
        """(kernel time, udev time) of the last kernel event of `name` in (after, last], once udevd sent it on."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                mine = [s for s, (_, n) in self.kernel.items() if n == name and after < s <= last]
                if mine and max(mine) in self.udev:
                    s = max(mine)
                    return self.kernel[s][0], self.udev[s][0]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no processed event for {name} in seqnums ({after}, {last}]")
                self.cond.wait(0.05)


def seqnum() -> int:
    return int(Path("/sys/kernel/uevent_seqnum").read_text())


def set_rules(text: str | None, warm: str) -> None:
    if text is None:
        RULES.unlink(missing_ok=True)
    else:
        RULES.write_text(text)
    udevadm("control", "--reload")
    # udevd re-reads the rules on the next event: pay that here, not in a measurement.
    udevadm("trigger", "--action=change", "--settle", f"/dev/{warm}")


def attach_once(events: Events, name: str, backing: Path, variant: str) -> tuple[float, float, bool]:
    for attr, value in START:
        write(name, attr, value)
    first = seqnum()
    t0 = time.perf_counter()
    subprocess.run(["losetup", f"/dev/{name}", str(backing)], check=True, env=ENV)
    kernel_t, udev_t = events.wait_processed(name, first, seqnum())
    ok = True
    if variant in EXPECT:
        ok = "[bfq]" in read(name, "queue/scheduler") and all(read(name, a) == v for a, v in EXPECT[variant].items())
    subprocess.run(["losetup", "-d", f"/dev/{name}"], check=True, env=ENV)
    udevadm("settle", "--timeout=30")
    return (udev_t - t0) * 1000, (udev_t - kernel_t) * 1000, ok


def change_once(events: Events, name: str) -> float:
    write(name, "queue/read_ahead_kb", "64")
    before = seqnum()
    write(name, "uevent", "change")
    kernel_t, udev_t = events.wait_processed(name, before, seqnum())
    return (udev_t - kernel_t) * 1000


def free_loop() -> str:
    out = subprocess.run(["losetup", "-f"], capture_output=True, text=True, check=True, env=ENV).stdout
    return out.strip().rsplit("/", 1)[-1]


def snapshot(name: str) -> dict[str, str]:
    q = Path(f"/sys/block/{name}/queue")
    sched = next(t[1:-1] for t in (q / "scheduler").read_text().split() if t.startswith("["))
    # In restore order: queue limits (add_random, rotational) recompute read_ahead_kb, so it comes last.
    return {"queue/scheduler": sched, **{f"queue/{a}": (q / a).read_text().strip()
                                          for a in ("nr_requests", "add_random", "rotational", "read_ahead_kb")}}


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ms (min {min(values):6.2f}, max {max(values):7.2f}, n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=12, help="attaches per variant and round (>= 10)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("udev_hotplug: needs root (loop devices, udevd)", file=sys.stderr)
        return 4
    started = None
    runtime_existed = Path("/run/udev").exists()
    if udevadm("control", "--ping", "--timeout=2", check=False).returncode != 0:
        started = subprocess.Popen([UDEVD], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                                   start_new_session=True)
        for _ in range(100):
            if udevadm("control", "--ping", "--timeout=2", check=False).returncode == 0:
                break
            time.sleep(0.1)
    RULES.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tunectl-bench-"))
    saved: dict[str, dict[str, str]] = {}
    warm = None
    try:
        for i in range(2):
            (tmp / f"d{i}.img").write_bytes(b"")
            os.truncate(tmp / f"d{i}.img", 16 << 20)
        (tmp / "warm.img").write_bytes(b"")
        os.truncate(tmp / "warm.img", 16 << 20)
        warm = free_loop()
        saved[warm] = snapshot(warm)
        subprocess.run(["losetup", f"/dev/{warm}", str(tmp / "warm.img")], check=True, env=ENV)
        (tmp / "p.yaml").write_text(PROFILE)
        scope = f"{tmp}/d*.img"
        tunectl_rules = render(load_profile(str(tmp / "p.yaml"), []), None, only_loop_backing=scope)
        assert lint(tunectl_rules) == []
        match = (f'SUBSYSTEM=="block", ACTION=="add|change", KERNEL=="loop*", TEST=="loop/backing_file", '
                 f'ATTR{{loop/backing_file}}=="{scope}", ')
        writes = 'ATTR{queue/scheduler}="bfq", ATTR{queue/read_ahead_kb}="1024"\n'
        variants = {"bare": None, "hand": match + writes,
                    "hand-guarded": match + 'ATTR{queue/scheduler}!="*[[]bfq[]]*", ' + writes, "tunectl": tunectl_rules}
        events = Events()
        e2e: dict[str, list[float]] = {v: [] for v in variants}
        inudev: dict[str, list[float]] = {v: [] for v in variants}
        wrong: dict[str, int] = {v: 0 for v in variants}
        for _ in range(args.rounds):
            for variant, text in variants.items():
                set_rules(text, warm)
                for i in range(args.devices):
                    name = free_loop()
                    saved.setdefault(name, snapshot(name))
                    a, b, ok = attach_once(events, name, tmp / f"d{i % 2}.img", variant)
                    e2e[variant].append(a)
                    inudev[variant].append(b)
                    wrong[variant] += not ok

        # below: the RUN of tunectl on a stacked device's event (guard removed: loop devices have no slaves/).
        exe = tmp / "tunectl"
        exe.write_text(f"#!/bin/sh\nexport TUNECTL_STATE_DIR={tmp}/state PYTHONPATH={ROOT}\n"
                       f"exec {os.path.realpath(sys.executable)} -m tunectl \"$@\"\n")
        exe.chmod(0o755)
        (tmp / "below.yaml").write_text(BELOW)
        below_rules = render(load_profile(str(tmp / "below.yaml"), []), str(exe), only_loop_backing=scope)
        name = free_loop()
        saved.setdefault(name, snapshot(name))
        subprocess.run(["losetup", f"/dev/{name}", str(tmp / "d0.img")], check=True, env=ENV)
        udevadm("settle")
        change_cost: dict[str, list[float]] = {"rules, no RUN": [], "rules + RUN tunectl": []}
        n = max(10, args.devices)
        for label, text in (("rules, no RUN", tunectl_rules), ("rules + RUN tunectl", below_rules.replace(
                'TEST=="slaves/*/dev", ', ""))):
            set_rules(text, warm)
            for _ in range(n):
                change_cost[label].append(change_once(events, name))
        set_rules(None, warm)
        subprocess.run(["losetup", "-d", f"/dev/{name}"], check=False, env=ENV)
        events.stop = True

        kernel = os.uname().release
        print(f"udev hot-plug latency, loop devices, kernel {kernel}, udev {udevadm('--version').stdout.strip()}, "
              f"{args.devices} attaches x {args.rounds} rounds per variant")
        print(f"tunectl rules: {len([x for x in tunectl_rules.splitlines() if x and not x.startswith('#')])} rules; "
              "hand-written: 1 rule with 2 ATTR writes")
        print("\nend-to-end (losetup start -> event processed, all settings in place):")
        for v in variants:
            print(f"  {v:12} {fmt(e2e[v])}" + (f"   ({wrong[v]} attaches with wrong settings!)" if wrong[v] else ""))
        print("in udev (kernel uevent -> event processed):")
        for v in variants:
            print(f"  {v:12} {fmt(inudev[v])}")
        print()
        worst = 0.0
        for hand in ("hand", "hand-guarded"):
            r1 = statistics.median(e2e["tunectl"]) / statistics.median(e2e[hand])
            r2 = statistics.median(inudev["tunectl"]) / statistics.median(inudev[hand])
            worst = max(worst, r1, r2)
            print(f"tunectl / {hand}: {r1:.3f}x end-to-end, {r2:.3f}x in udev")
        print(f"target tunectl <= 1.2x hand-written: {'met' if worst <= 1.2 else 'NOT met'} (worst ratio {worst:.3f}x)")
        print(f"tunectl - bare: {statistics.median(e2e['tunectl']) - statistics.median(e2e['bare']):.2f} ms end-to-end "
              "(mostly the bfq switch: the kernel freezes the queue)")
        print("\nchange event on a tuned device (kernel uevent -> processed), below: cost:")
        for label, values in change_cost.items():
            print(f"  {label:20} {fmt(values)}")
        extra = statistics.median(change_cost["rules + RUN tunectl"]) - statistics.median(change_cost["rules, no RUN"])
        print(f"  the RUN of `tunectl apply --stack` adds {extra:.1f} ms per event of a stacked device")
        return 0
    finally:
        RULES.unlink(missing_ok=True)
        udevadm("control", "--reload", check=False)
        udevadm("settle", "--timeout=30", check=False)
        if warm:
            subprocess.run(["losetup", "-d", f"/dev/{warm}"], check=False, env=ENV, capture_output=True)
        for name, snap in saved.items():
            for attr, value in snap.items():
                with contextlib.suppress(OSError):
                    write(name, attr, value)
        if started is not None:
            udevadm("control", "--exit", check=False)
            started.wait(timeout=15)
            if not runtime_existed:
                shutil.rmtree("/run/udev", ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
