"""`tunectl bench TARGET`: arguments, the sweep, and its rendering (table, chart, JSON, CSV, PNG)."""

from __future__ import annotations

import argparse

EPILOG = """\
Reads only: the device and the file are opened read-only, once (no other
user's link followed; a pipe, /dev/zero or a directory at the name is refused,
never opened); the sweep never uses the name again. Between points only
the target's cached pages are dropped (fadvise DONTNEED, BLKFLSBUF), never the
machine's; one unmeasured read first fills what those drops cannot empty
(squashfs's partial-block cache from 6.5, dm-verity's hash blocks), so every
point starts alike. Every setting the sweep touches (scheduler, its knobs, nr_requests,
read_ahead_kb) is restored at the end, also on Ctrl-C (exit 130) and on errors.

examples:
  tunectl bench sdb                                   # full sweep, every offered scheduler
  tunectl bench /dev/sdb --read-ahead 16,128,1024 --schedulers mq-deadline,none
  tunectl bench /usr/lib/chromium/chromium --size 64M # a file: tunes the stack under its filesystem
  tunectl bench dm-0 --random --csv sweep.csv --plot sweep.png
  tunectl bench loop0 --json | jq .recommendation.fragment -r"""


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.bench.sweep import DEFAULT_READ_AHEAD, DEFAULT_RUNS, MAX_RUNS

    p.epilog = EPILOG
    p.add_argument("target", metavar="TARGET",
                   help="block device (sda, 8:0, /dev/sda, /dev/disk/by-id/..., a link root owns) or a file")
    p.add_argument("--read-ahead", metavar="LIST", default=DEFAULT_READ_AHEAD,
                   help=f"read_ahead_kb values: 16,128,1024 or a doubling range (default {DEFAULT_READ_AHEAD})")
    p.add_argument("--schedulers", metavar="LIST",
                   help="schedulers to sweep, comma-separated (default: every one the device, or the disks "
                        "below a stacked device, offers)")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N",
                   help=f"cold reads per point; the median is reported (default {DEFAULT_RUNS}, at most {MAX_RUNS})")
    p.add_argument("--size", metavar="SIZE", default="32 MiB", help="bytes read per point, at most (default 32 MiB)")
    p.add_argument("--read-size", metavar="SIZE", default="4 KiB",
                   help="bytes per read(2) (default 4 KiB: page-sized reads, so read-ahead shapes the requests; at most 1 GiB)")
    p.add_argument("--random", action="store_true", help="also 4 KiB random reads with fio --readonly at each point")
    p.add_argument("--seed", type=int, metavar="N", help="order of the shuffled points (default: random, reported)")
    p.add_argument("--csv", metavar="FILE", help="write every run, one row per device, as CSV (checked before the "
                   "sweep; a killed bench's temp file .FILE.XXXXXXXXXXXX beside it is removed)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write the chart as a PNG (needs tunectl[plot]: matplotlib; checked before the sweep, as --csv)")


def _size(text: str, option: str, most: int | None = None) -> int:
    from tunectl.units import size_option

    return size_option(text, option, most)


BENCH_HOLDER = "tunectl bench on"


def run(ctx, args, out) -> int:
    import shutil

    from tunectl.bench.sweep import DEFAULT_RUNS, MAX_RUNS, parse_read_ahead, parse_schedulers
    from tunectl.errors import UsageError
    from tunectl.units import MAX_READ_SIZE

    read_aheads = parse_read_ahead(args.read_ahead)
    wanted = parse_schedulers(args.schedulers) if args.schedulers else None
    if not 1 <= args.runs <= MAX_RUNS:  # every point's runs are planned at once: a typo'd 10**9 filled memory
        raise UsageError(f"--runs: must be from 1 to {MAX_RUNS}, got {args.runs}",
                         hint=f"each run is a cold read of every point; the default is {DEFAULT_RUNS}")
    size, block = _size(args.size, "--size"), _size(args.read_size, "--read-size", MAX_READ_SIZE)
    if args.plot:
        from tunectl.bench.plot import require_matplotlib

        require_matplotlib()
    if args.random and shutil.which("fio") is None:
        raise UsageError("--random needs fio, which is not installed", hint="apt install fio")
    from contextlib import ExitStack

    from tunectl.bench.export import prepare_output

    with ExitStack() as outputs:  # ready before the sweep; left unwritten (no temp file) if it does not finish
        files = {option: outputs.enter_context(prepare_output(path, option))
                 for option, path in (("--csv", args.csv), ("--plot", args.plot)) if path}
        for pending in files.values():
            for name in pending.swept:
                out.warn(f"tunectl bench: removed {pending.parent / name}, left by a bench that was killed")
        return _sweep(ctx, args, out, read_aheads, wanted, size, block, files)


def _sweep(ctx, args, out, read_aheads: list[int], wanted: list[str] | None, size: int, block: int,
           files: dict) -> int:
    import os

    from tunectl.bench import stack as stacking

    stack = stacking.resolve(ctx, args.target)
    from tunectl.bench.report import active_wants

    active = active_wants(ctx, stack)  # before the sweep: its values are temporary
    # Who holds the lock, as a run waiting for it says (a verify learns the devices from the hold record).
    ctx.state.command = f"{BENCH_HOLDER} {' '.join(d.name for d in stack.devices)}"
    schedulers = _schedulers(stack, wanted)
    stacking.check_nodes(ctx, stack)
    opened = stacking.open_target(ctx, stack)  # the sweep reads through this descriptor, never the name again
    try:
        return _sweep_opened(ctx, args, out, read_aheads, schedulers, size, block, files, stack, active, opened)
    finally:
        os.close(opened.fd)


def _sweep_opened(ctx, args, out, read_aheads: list[int], schedulers: list, size: int, block: int, files: dict,
                  stack, active: dict | None, opened) -> int:
    import random as random_mod

    from tunectl.bench.report import report_restore
    from tunectl.bench.runner import Io, Sweep
    from tunectl.bench.sweep import plan_points
    from tunectl.units import counted, format_bytes

    seed = args.seed if args.seed is not None else random_mod.SystemRandom().randrange(1 << 31)
    points = plan_points(read_aheads, schedulers, args.runs, seed)
    header = (f"bench {stack.target} ({stack.kind}; read_ahead_kb on {stack.top.name}"
              + (f", scheduler on {', '.join(d.name for d in stack.scheduled)}" if schedulers != [None] else "")
              + f"): {len(read_aheads)} read-ahead x {counted(len(schedulers), 'scheduler')} x {counted(args.runs, 'run')}"
              + f" = {counted(len(points), 'point')}, {format_bytes(min(size, stack.read_bytes))} each, "
              + f"seed {seed}")
    if not out.json:  # stays: printed before a sweep of minutes, not part of its report (the JSON has each fact)
        out.print(header)
    bar = out.progress(len(points), "bench")
    sweep = Sweep(ctx, stack, points, size, block, Io.real(ctx.run, opened), random=args.random,
                  on_point=lambda i, p: bar.advance(0, f"point {i}: {p.describe()}"),
                  on_done=lambda i, r: bar.advance(1))
    try:
        sweep.run()
    except KeyboardInterrupt as e:
        from tunectl.system.interrupts import Terminated

        bar.close()
        verb = "terminated" if isinstance(e, Terminated) else "interrupted"
        report_restore(sweep, out, f"{verb} after {len(sweep.runs)} of {counted(len(points), 'point')}")
        from tunectl.bench.report import BenchReport

        return out.show(BenchReport(stack, sweep, seed, schedulers, interrupted=True,
                                    stop_signal=e.signum if isinstance(e, Terminated) else None, active=active))
    except BaseException:
        bar.close()
        report_restore(sweep, out, "stopped by an error")
        raise
    bar.close()
    return _render(stack, sweep, seed, schedulers, out, active, files)


def _schedulers(stack, wanted: list[str] | None) -> list:
    from tunectl.errors import UsageError

    offered = stack.offered
    if not stack.scheduled:
        if wanted:
            raise UsageError(f"{stack.top.name} has no I/O scheduler (bio-based) and no disk below it has one",
                             hint="leave out --schedulers: only read-ahead can be swept here")
        return [None]
    if wanted is None:
        return offered
    for name in wanted:
        if name not in offered:
            where = ", ".join(d.name for d in stack.scheduled)
            raise UsageError(f"--schedulers: {where} does not offer {name}",
                             hint=f"offered: {' '.join(offered) or 'none'} (modprobe the scheduler's module to add it)")
    return wanted


def _render(stack, sweep, seed, schedulers, out, active: dict | None, files: dict) -> int:
    from tunectl.bench.report import BenchReport

    report = BenchReport(stack, sweep, seed, schedulers, active=active)
    summaries = report.summaries
    if "--csv" in files:
        from tunectl.bench.export import fill_output, runs_csv

        problem = fill_output(files["--csv"], runs_csv(sweep.runs).encode())
        if problem:
            out.warn(f"tunectl bench: {problem}")
            report.export_failed = True
    if "--plot" in files:
        from tunectl.bench.plot import write_png

        write_png(files["--plot"], summaries, f"tunectl bench {stack.target}")
    return out.show(report)
