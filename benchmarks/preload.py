#!/usr/bin/env python3
"""Cold-cache preload of a file set: tunectl preload replay against plain reads, vmtouch and WILLNEED.

Run as root: .venv/bin/python benchmarks/preload.py [--runs 5] [CORPUS...]
(default corpora /usr/share and /usr/lib/x86_64-linux-gnu).

Before every timed run the corpus is made cold. `--cold evict` (the default): each
file's pages are dropped with POSIX_FADV_DONTNEED, the machine's other caches left
alone; the corpus' inodes and directories stay cached, so this is data-cold only.
`--cold drop`: `sync; echo 3 > /proc/sys/vm/drop_caches`, the whole machine's page,
inode and directory caches (what the other users of the machine pay for). On a
virtual disk neither reaches the host's cache below it. Methods,
interleaved within each round (the order rotates from round to round), each
timed until all the data is resident:
  (a) plain reads, directory (walk) order, one thread
  (b) vmtouch -t CORPUS
  (c) posix_fadvise(WILLNEED) in directory order, one thread, in read-ahead-window chunks
  (d) tunectl preload replay LIST, the whole process (start-up and list decoding included); by default it
      returns once its reads are sent, as (c) does, and the read pass overlaps the disk's tail
  (h) (d) with --settle-timeout 10: the replay waits until the list's devices have no requests in progress
      before it exits (the default before #30's last change), then the read pass reads a warm cache
  (i) (c) and then, as (h) does, wait (at most 10 s) until the list's devices have no requests in progress:
      the like-for-like of (h) (c/d compares two that return once their reads are queued, i/h two that wait
      for them)
  (e) the bound: the corpus' bytes (whole pages, hard-linked files once) over the
      sequential throughput of one large file, read cold with fio O_DIRECT
  (f) where a C compiler is present: the floor of (d)'s design, its two passes in C
      (benchmarks/preload_floor.c: pthreads stat() every file, then one thread
      WILLNEEDs them in physical order), with no Python, no start-up and no list to read,
      then the wait of (i)
  (g) with --compare DIR: (d) run from the tunectl checkout at DIR (before/after in one run); DIR this
      checkout itself: g/d is the run's own noise, to hold c/d's 5% against
(printed in this order). The waits of (h), (i) and (f) are one rule, the replay's own
(tunectl.preload.replay.wait_until_drained): field 9 of /sys/dev/block/MAJ:MIN/stat, requests from when the
block layer makes them (the I/O scheduler's queue included) until they complete, anyone's reads and writes,
on the devices the list names. Not `inflight`: on blk-mq it counts only what the driver holds and reads 0
while requests still wait in the scheduler, which stopped a clock early. A wait of (i) or (f) that reaches
its 10 s (a disk someone else keeps busy) is printed.
WILLNEED returns before the reads are done, so (c), (d), (h), (i), (f) and (g) are each charged
for a full read pass after them (sendfile to /dev/null, directory order), the same
pass for all. Each method's CPU seconds and the read requests the disk completed
meanwhile (their number and size) are printed too: on a disk that seeks nothing, the
order of the reads changes how many requests carry them, not how long they take, and
a preload's CPU is then what sets it apart. Medians of --runs rounds; targets on the
first corpus (issue #30): (d) at least 4x faster than (a), 3x faster than (b), never
slower than (c) (c/d >= 0.95: within 5%), and within 2x of (e); the ratios say how far
a/d can go on the disk measured (a/(e + the read pass on a warm cache)).
`--busy N` runs N processes that only spin, each pinned to one of the last N CPUs, for the whole run:
a load beside the benchmark that does not depend on who else uses the machine (c/d under load, issue #30's
"within 5%": on a machine whose CPUs are taken the preload's own CPU decides, not the disk).
benchmarks/preload_tree.py measures a tree on a file system of its own, cold without
dropping the machine's caches, with and without the metadata pass.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, installed_env, tunectl_argv  # noqa: E402
from tunectl.preload.listfile import read_list  # noqa: E402
from tunectl.preload.replay import wait_until_drained  # noqa: E402
from tunectl.system.sysfs import Sysfs  # noqa: E402

CORPORA = ["/usr/share", "/usr/lib/x86_64-linux-gnu"]
WINDOW = 8 << 20
SETTLE = 10  # (h)'s --settle-timeout: the replay waits for its reads, as it did by default before; (i)'s and (f)'s too
WAIT_RULE = ("no requests in progress on the list's devices (field 9 of sysfs stat, the I/O scheduler's queue "
             "included: the replay's own rule, not `inflight`)")


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def evict(files: list[tuple[str, int]]) -> None:
    """The corpus' pages out of the page cache, file by file (read-only files: nothing to write back)."""
    for fd, _ in opened(files):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def files_in_walk_order(root: str) -> list[tuple[str, int]]:
    out = []
    for d, _dirs, names in os.walk(root):
        for name in names:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if st.st_mode & 0o170000 == 0o100000:
                out.append((p, st.st_size))
    return out


def plain_reads(files: list[tuple[str, int]]) -> None:
    buf = bytearray(1 << 20)
    for path, _ in files:
        try:
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass
        except OSError:
            pass


def opened(files: list[tuple[str, int]]):
    """(fd, size) for each file that opens, closed after use; files that vanished are passed over."""
    for path, size in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            yield fd, size
        finally:
            os.close(fd)


def willneed_walk_order(files: list[tuple[str, int]]) -> None:
    for fd, size in opened(files):
        for off in range(0, size, WINDOW):
            os.posix_fadvise(fd, off, WINDOW, os.POSIX_FADV_WILLNEED)


def read_pass(files: list[tuple[str, int]]) -> None:
    """Every byte through the page cache, copied nowhere: waits for any read still in flight."""
    null = os.open("/dev/null", os.O_WRONLY)
    try:
        for fd, size in opened(files):
            off = 0
            with contextlib.suppress(OSError):
                while off < size:
                    n = os.sendfile(null, fd, off, size - off)
                    if n <= 0:
                        break
                    off += n
    finally:
        os.close(null)


def run_quiet(argv: list[str]) -> None:
    """`argv` as an installed tunectl runs (byte code kept: under PYTHONDONTWRITEBYTECODE every replay compiled its
    modules again, ~0.1 s of (d) and (h) that (c), run in this process, never pays)."""
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=installed_env())
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")


def fio_throughput(path: str) -> float:
    """Bytes/s of one cold sequential O_DIRECT read of `path`."""
    out = subprocess.run(["fio", "--name=seq", f"--filename={path}", "--rw=read", "--bs=1M", "--direct=1",
                          "--ioengine=libaio", "--iodepth=16", "--readonly", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return job["bw_bytes"]


def resident_share(files: list[tuple[str, int]]) -> float:
    from tunectl.preload.order import resident_bytes
    from tunectl.system.pagecache import residency

    cached = wanted = 0
    for fd, size in opened(files):
        with contextlib.suppress(OSError):
            c, w = resident_bytes(residency(fd, size), [(0, size)], size)
            cached, wanted = cached + c, wanted + w
    return cached / wanted if wanted else 1.0


def unique_pages(files: list[tuple[str, int]]) -> int:
    """Whole-page bytes of the distinct inodes: a hard-linked file is read from the disk once."""
    seen: dict[tuple[int, int], int] = {}
    for path, size in files:
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            seen[st.st_dev, st.st_ino] = (size + 4095) // 4096 * 4096
    return sum(seen.values())


def drained(devices: list[str], timeouts: list[str], who: str) -> None:
    """Until `devices` (MAJ:MIN) have no requests in progress, by the replay's own rule, at most SETTLE seconds;
    `who` is noted in `timeouts` when the wait reached them (someone else's I/O kept the disk busy)."""
    if not wait_until_drained(Sysfs("/sys"), devices, SETTLE):
        timeouts.append(who)


def build_floor(tmp: Path) -> str | None:
    """benchmarks/preload_floor.c compiled, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    out = tmp / "preload_floor"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(REPO / "benchmarks" / "preload_floor.c")],
                   check=True, capture_output=True)
    return str(out)


def bench_corpus(corpus: str, runs: int, tmp: Path, seq_file: str, floor: str | None, cold_how: str = "evict",
                 compare: str | None = None) -> dict:
    files = files_in_walk_order(corpus)

    def cold() -> None:
        if cold_how == "drop":
            drop_caches()
        else:
            evict(files)

    pages = unique_pages(files)
    replay, listed, paths_file = collect_list(corpus, tmp)
    floor_argv = [floor, str(paths_file), "8"] if floor else []
    timeouts: list[str] = []
    devices = sorted({e.device for e in listed})
    methods = corpus_methods(corpus, files, replay, devices, lambda: pages / fio_throughput(seq_file), floor_argv,
                             compare, timeouts)
    waiting = [*replay, "--settle-timeout", str(SETTLE)]  # (h): the process until its reads are done
    times, replay_only, costs = timed_rounds(methods, runs, cold, waiting, devices)
    share, warm_pass = after_one_replay(files, cold, waiting)
    return {"corpus": corpus, "cold": cold_how, "compare": compare,
            "files": len(files), "bytes": sum(s for _, s in files), "page_bytes": pages, "runs": runs,
            "seconds": {k: v for k, v in times.items()}, "median": {k: statistics.median(v) for k, v in times.items()},
            "replay_only_median": statistics.median(replay_only), "replay_only": replay_only,
            "resident_after_replay": share, "warm_read_pass": warm_pass, "wait_timeouts": timeouts, "costs": costs,
            "seq_mb_s": pages / statistics.median(times["e"]) / 1e6}


def collect_list(corpus: str, tmp: Path) -> tuple[list[str], list, Path]:
    """`preload collect` of `corpus`: the replay's command line, the list's entries in its own order (physical,
    as the replay reads) and a file of their sizes and paths (for the C floor, f)."""
    lst = tmp / (corpus.strip("/").replace("/", "_") + ".list")
    run_quiet(tunectl_argv() + ["preload", "collect", corpus, "-o", str(lst)])
    listed = read_list(str(lst)).entries
    paths_file = lst.with_suffix(".paths")
    paths_file.write_text("".join(f"{e.size} {e.path}\n" for e in listed))
    return tunectl_argv() + ["preload", "replay", str(lst), "-q"], listed, paths_file


def corpus_methods(corpus: str, files: list[tuple[str, int]], replay: list[str], devices: list[str],
                   e: Callable[[], float], floor_argv: list[str], compare: str | None,
                   timeouts: list[str]) -> dict[str, Callable[[], float]]:
    """Each method by its letter: seconds from cold to every file read (e: the fio bound; f: with a floor only;
    g: with `compare` only). (i) and (f) wait for `devices` (the list's, MAJ:MIN) as (h)'s replay does; a wait
    that timed out is noted in `timeouts`."""
    def timed(step: Callable[[], object], then_read: bool = True) -> Callable[[], float]:
        def run() -> float:
            t = time.perf_counter()
            step()
            if then_read:
                read_pass(files)
            return time.perf_counter() - t
        return run

    def willneed_then_wait() -> None:
        willneed_walk_order(files)
        drained(devices, timeouts, "i")  # (h)'s wait, by its own function

    def floor_then_wait() -> None:
        run_quiet(floor_argv)
        drained(devices, timeouts, "f")

    def replay_from_compare() -> None:
        proc = subprocess.run(replay, capture_output=True, text=True, cwd=REPO,  # the same launcher as (d)
                              env=installed_env(PYTHONPATH=compare))
        if proc.returncode != 0:
            raise SystemExit(f"the replay from {compare} failed ({proc.returncode}): {proc.stderr.strip()}")

    return {"a": timed(lambda: plain_reads(files), then_read=False),
            "b": timed(lambda: run_quiet(["vmtouch", "-qt", corpus]), then_read=False),
            "c": timed(lambda: willneed_walk_order(files)),
            "d": timed(lambda: run_quiet(replay)),
            "h": timed(lambda: run_quiet([*replay, "--settle-timeout", str(SETTLE)])),
            "i": timed(willneed_then_wait),
            "e": e,
            **({"f": timed(floor_then_wait)} if floor_argv else {}),
            **({"g": timed(replay_from_compare)} if compare else {})}


def cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has waited for (the replay's process)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def disk_reads(devices: list[str]) -> tuple[int, int]:
    """(read requests completed, bytes they read) on `devices` (MAJ:MIN) since boot: fields 1 and 3 of sysfs stat."""
    requests = sectors = 0
    for dev in devices:
        fields = Path(f"/sys/dev/block/{dev}/stat").read_text().split()
        requests, sectors = requests + int(fields[0]), sectors + int(fields[2])
    return requests, sectors * 512


def timed_rounds(methods: dict[str, Callable[[], float]], runs: int, cold: Callable[[], None],
                 replay: list[str], devices: list[str]
                 ) -> tuple[dict[str, list[float]], list[float], dict[str, list[tuple[float, int, int]]]]:
    """`runs` rounds of every method from cold, the order rotating each round, and the `replay` process alone after
    each round, for the record (given (h)'s line: the process until its reads have drained). Also what each run
    cost: (CPU seconds, read requests, bytes read) on `devices`, its read pass included (anyone's reads)."""
    times: dict[str, list[float]] = {k: [] for k in methods}
    costs: dict[str, list[tuple[float, int, int]]] = {k: [] for k in methods}
    replay_only: list[float] = []
    for r in range(runs):
        keys = list(methods)
        keys = keys[r % len(keys):] + keys[:r % len(keys)]
        for k in keys:
            cold()
            cpu, (requests, nbytes) = cpu_seconds(), disk_reads(devices)
            times[k].append(methods[k]())
            after = disk_reads(devices)
            costs[k].append((cpu_seconds() - cpu, after[0] - requests, after[1] - nbytes))
        cold()
        t = time.perf_counter()
        run_quiet(replay)
        replay_only.append(time.perf_counter() - t)
    return times, replay_only, costs


def after_one_replay(files: list[tuple[str, int]], cold: Callable[[], None], replay: list[str]) -> tuple[float, float]:
    """From cold, one replay: the share of the files then resident, and the seconds of a read pass after it."""
    cold()
    run_quiet(replay)
    share = resident_share(files)  # at once: this VM's host reclaims idle pages within seconds
    t = time.perf_counter()
    read_pass(files)
    return share, time.perf_counter() - t


def report(res: dict) -> None:
    m = res["median"]
    names = {"a": "(a) plain reads, walk order", "b": "(b) vmtouch -t", "c": "(c) WILLNEED walk order + read pass",
             "d": "(d) tunectl preload replay + read pass", "h": f"(h) (d) with --settle-timeout {SETTLE}",
             "i": "(i) (c), waiting for the disks as (h) does",
             "e": "(e) bound: bytes / fio O_DIRECT seq",
             "f": "(f) (d)'s passes in C, wait + read pass", "g": f"(g) (d) from {res.get('compare')}"}
    names = {k: v for k, v in names.items() if k in m}
    print(f"\n{res['corpus']}: {res['files']} files, {res['bytes'] / 1e6:.0f} MB data, "
          f"{res['page_bytes'] / 1e6:.0f} MB on disk in whole pages (hard links once); "
          f"median of {res['runs']} cold runs (cold: {res['cold']})")
    print(f"  (h), (i) and (f) wait until {WAIT_RULE}, at most {SETTLE} s"
          + (f"; the waits of (i) and (f) that reached it: {' '.join(res['wait_timeouts'])}" if res["wait_timeouts"]
             else "; no wait of (i) or (f) reached it"))
    for k, label in names.items():
        runs = " ".join(f"{s:.2f}" for s in res["seconds"][k])
        print(f"  {label:<42} {m[k]:6.2f} s   (runs: {runs})")
    print("  what a run cost, medians (its read pass included; CPU: this process and the children it ran, not the "
          "kernel's own threads; requests: anyone's reads of the list's devices meanwhile):")
    for k, label in names.items():
        cpu, requests, nbytes = (statistics.median(c[i] for c in res["costs"][k]) for i in range(3))
        print(f"  {label:<42} CPU {cpu:5.2f} s   {requests:7.0f} read requests of "
              f"{nbytes / max(requests, 1) / 1024:4.0f} KiB")
    print(f"  {'(h) tunectl preload replay alone (process)':<42} {res['replay_only_median']:6.2f} s   "
          f"(runs: {' '.join(f'{s:.2f}' for s in res['replay_only'])})")
    print(f"  sequential throughput (fio O_DIRECT, 1 MiB, QD16): {res['seq_mb_s']:.0f} MB/s; "
          f"read pass on a warm cache: {res['warm_read_pass']:.2f} s; "
          f"resident right after replay: {100 * res['resident_after_replay']:.1f}%")
    print(f"  ratios: a/d {m['a'] / m['d']:.2f}  b/d {m['b'] / m['d']:.2f}  c/d {m['c'] / m['d']:.2f}  "
          f"d/e {m['d'] / m['e']:.2f}" + (f"  f/e {m['f'] / m['e']:.2f}  d/f {m['d'] / m['f']:.2f}" if "f" in m else
                                          "  (no C compiler: (f) not measured)")
          + f"  c/h {m['c'] / m['h']:.2f}  a/h {m['a'] / m['h']:.2f}  i/h {m['i'] / m['h']:.2f}"
          + (f"  c/g {m['c'] / m['g']:.2f}  a/g {m['a'] / m['g']:.2f}  g/d {m['g'] / m['d']:.2f}" if "g" in m else ""))
    # (c), (d) and (f) each end with the read pass, on a warm cache once the reads are in: no preload that returns
    # before it comes in under the disk's own time plus that pass
    ceiling = m["a"] / (m["e"] + res["warm_read_pass"])
    print(f"  a/d's reach here: a/(e + warm read pass) {ceiling:.2f} (the disk's sequential bound, then the read "
          "pass every preload is charged)" + (f"; the design's C floor reaches a/f {m['a'] / m['f']:.2f}"
                                              if "f" in m else ""))


@contextlib.contextmanager
def busy_cpus(n: int) -> Iterator[list[int]]:
    """`n` processes that spin until the block ends, each pinned to one of the last `n` CPUs this process may use
    (fewer when there are fewer): the CPUs they take."""
    cpus = sorted(os.sched_getaffinity(0))[-n:] if n > 0 else []
    # The `finally` below runs on an exception, not on SIGKILL or an unhandled SIGTERM (a `timeout`): each spinner
    # asks the kernel to kill it when its parent dies (prctl PR_SET_PDEATHSIG = 1; it fires when the *thread* that
    # forked it ends, here the main one), then checks it was not orphaned before it asked.
    spin = ("import ctypes, os, signal\n"
            "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
            f"if os.getppid() != {os.getpid()}:\n    raise SystemExit(1)\n"
            "os.sched_setaffinity(0, {%d})\n"
            "while True:\n    pass")
    spinners = []
    try:
        for cpu in cpus:
            spinners.append(subprocess.Popen([sys.executable, "-c", spin % cpu]))
        yield cpus
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="*", default=CORPORA)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    ap.add_argument("--cold", choices=("evict", "drop"), default="evict",
                    help="evict: drop the corpus' own pages (POSIX_FADV_DONTNEED; data-cold, the machine's caches "
                         "left alone); drop: drop_caches, the whole machine's page, inode and directory caches")
    ap.add_argument("--compare", metavar="DIR", help="also time the replay of the tunectl checkout at DIR (g)")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N processes that only spin, each pinned to one CPU, for the whole run (a load of its own)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("this benchmark needs root (it reads every file of the corpus and drops its pages)")
    for tool in ("vmtouch", "fio"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: run scripts/bootstrap")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with busy_cpus(args.busy) as busy, \
            tempfile.TemporaryDirectory(prefix="tunectl-preload-bench-", dir="/var/tmp") as tmp:
        if busy:
            print(f"busy: {len(busy)} spinning process(es) beside the run, pinned to CPU {', '.join(map(str, busy))}")
        seq_file = os.path.join(tmp, "seq.bin")
        subprocess.run(["fio", "--name=lay", f"--filename={seq_file}", "--size=1G", "--rw=write", "--bs=1M",
                        "--direct=1", "--output-format=terse"], check=True, capture_output=True)
        floor = build_floor(Path(tmp))
        compare = os.path.abspath(args.compare) if args.compare else None
        results = [bench_corpus(c, args.runs, Path(tmp), seq_file, floor, args.cold, compare) for c in args.corpora]
        for res in results:
            res["busy_cpus"] = busy
    for res in results:
        report(res)
    m = results[0]["median"]
    print(f"\ntargets on {results[0]['corpus']}: (d) >= 4x faster than (a): {m['a'] / m['d']:.2f}x "
          f"{'met' if m['a'] / m['d'] >= 4 else 'NOT met'}; never slower than (c), within 5%: c/d "
          f"{m['c'] / m['d']:.2f} {'met' if m['c'] / m['d'] >= 0.95 else 'NOT met'}; "
          f">= 3x faster than (b): {m['b'] / m['d']:.2f}x "
          f"{'met' if m['b'] / m['d'] >= 3 else 'NOT met'}; within 2x of (e): {m['d'] / m['e']:.2f}x "
          f"{'met' if m['d'] / m['e'] <= 2 else 'NOT met'}")
    alone = results[0]["replay_only_median"]
    print(f"the same with (h)'s replay process alone, no read pass after it (--settle-timeout {SETTLE}: it returns "
          f"once the list's devices have no requests in progress; resident right after it: "
          f"{100 * results[0]['resident_after_replay']:.1f}%): "
          f"a/h {m['a'] / alone:.2f}x, b/h {m['b'] / alone:.2f}x, h/e {alone / m['e']:.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
