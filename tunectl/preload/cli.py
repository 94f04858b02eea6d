"""`tunectl preload collect|record|replay|show`: arguments, dispatch and rendering."""

from __future__ import annotations

import argparse

RAM_SHARE_PERCENT = 50  # a list may read at most this share of the machine's memory unless --max-bytes says

EXAMPLES = ("examples:\n  tunectl preload collect /usr/lib/firefox -o firefox.list\n"
            "  tunectl preload collect --resident /usr -o boot.list     # what is cached now\n"
            "  tunectl preload record -o app.list -- myapp --version     # what a command opens\n"
            "  tunectl preload replay firefox.list                      # bring it in, disk order\n"
            "  tunectl preload show firefox.list                        # how much is cached now\n"
            "the list format and the boot units are described in tunectl-preload(8)")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EXAMPLES
    sub = p.add_subparsers(dest="preload_command", metavar="ACTION")
    sub.required = True
    c = add_action(sub, "collect", "record a file set from files and directory trees into a preload list")
    c.add_argument("paths", nargs="+", metavar="PATH", help="files and directories (walked, symlinks not followed)")
    c.add_argument("-o", "--output", required=True, metavar="LIST", help="the list to write (atomically)")
    c.add_argument("--resident", action="store_true",
                   help="only the pages cached now (mincore); as root, or for files you own")
    r = add_action(sub, "record", "run a command and record the files it opens")
    r.add_argument("-o", "--output", required=True, metavar="LIST", help="the list to write (atomically)")
    r.add_argument("--method", choices=("auto", "fanotify", "diff"), default="auto",
                   help="fanotify (needs CAP_SYS_ADMIN), a before/after residency diff, "
                        "or auto: fanotify where permitted, else diff")
    r.add_argument("--scope", action="append", default=[], metavar="DIR",
                   help="only files below DIR (repeatable; default / for fanotify, /usr and /etc for diff)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")
    y = add_action(sub, "replay", "bring a list into the page cache in disk order, as fast as the device allows")
    y.add_argument("list", metavar="LIST", help="a list made by `preload collect` or `preload record`")
    y.add_argument("--threads", type=int, default=None, metavar="N",
                   help="stats at once in the inode pass before the data reads: io_uring kernel workers "
                        "(default 32), or Python threads where io_uring is refused (default 8); 0 or 1: one at a time")
    y.add_argument("--no-io-uring", action="store_true",
                   help="stat from Python threads even where the kernel offers io_uring")
    y.add_argument("--settle-timeout", type=float, default=10.0, metavar="S",
                   help="wait at most S seconds for the queued reads to finish (default 10)")
    y.add_argument("--max-bytes", metavar="SIZE", default=None,
                   help=f"refuse a list that would read more than SIZE (e.g. 2G; default: {RAM_SHARE_PERCENT}%% of "
                        "the machine's memory, as what does not fit evicts what the machine uses); the total is "
                        "found before anything is read")
    y.add_argument("--no-metadata", action="store_true",
                   help="leave out the metadata pass (the file system's blocks the list recorded, read first)")
    s = add_action(sub, "show", "what a list holds and how much of it is in the page cache now")
    s.add_argument("list", metavar="LIST", help="a list made by `preload collect` or `preload record`")
    s.add_argument("--stats", action="store_true",
                   help="the numbers to act on: bytes, files, the read calls a replay issues, the floor (bytes "
                        "over the disk's sequential rate, measured with a 32 MiB direct read as root)")
    s.add_argument("--against", metavar="READ_LIST",
                   help="with --stats: the hit rate against what a boot read (a list recorded or collected "
                        "after it): the share of this list it used and what it read that this list missed")


def run(ctx, args, out) -> int:
    import gc

    from tunectl.errors import UsageError
    from tunectl.preload.listfile import batches, header, read_list

    verb = args.preload_command
    if verb == "collect":
        from tunectl.preload.collect import collect

        report, human = collect(args.paths, args.output, resident=args.resident, roots=ctx.roots), _collected
    elif verb == "record":
        from tunectl.preload.record import record

        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        report, human = record(cmd, args.output, method=args.method, scope=args.scope,
                               stdout_to_stderr=out.json, roots=ctx.roots), _collected
    elif verb == "replay":
        from tunectl.preload.listfile import header
        from tunectl.preload.listing import metadata_of
        from tunectl.preload.replay import replay

        if (args.threads or 0) < 0 or args.settle_timeout < 0:
            raise UsageError("--threads and --settle-timeout must not be negative")
        # A replay is short-lived and allocates only its list: the cyclic collector would walk those
        # tens of thousands of tuples again and again for nothing (about 60 ms per 47k-file list).
        gc.disable()
        head = header(args.list)
        metadata = {} if args.no_metadata else metadata_of(head, args.list)
        found = _surveyed(args, out, sum(n for r in metadata.values() for _, n in r))
        parts = [found.entries] if found.entries is not None else (b for _, b in batches(args.list))
        with out.progress(2 * found.files, "preload (inodes, then data)") as bar:
            report = replay(ctx.sysfs, parts, args.list, progress=bar, threads=args.threads,
                            settle_timeout=args.settle_timeout, use_io_uring=not args.no_io_uring,
                            metadata=metadata, dev_root=ctx.roots.dev, time_order=head.get("order") == "time")
        if out.verbose:  # the floor costs a 32 MiB direct read of each disk: only when asked to explain
            from tunectl.preload.show import measure_floor

            meta_bytes = report.metadata.bytes if report.metadata else 0
            report.floor = measure_floor(report.methods, report.bytes + meta_bytes, ctx.sysfs, ctx.roots.dev)
        human = _replayed if not (out.verbose and head["moved"]) else \
            (lambda r, moved=head["moved"]: [*_moved(moved), *_replayed(r)])
    else:
        from tunectl.preload.show import show

        if args.against and not args.stats:
            raise UsageError("--against compares with what a boot read: it goes with --stats",
                             hint="tunectl preload show --stats LIST --against READ_LIST")
        report = show(read_list(args.list), args.list, header(args.list), ctx.roots.dev, ctx.sysfs,
                      stats=args.stats, against=read_list(args.against) if args.against else None)
        human = _shown
    report.verbose = out.verbose
    return _render(report, out, human)


def _surveyed(args, out, metadata_bytes: int = 0):
    """One streaming pass over the list: every line checked and the total known before anything is read."""
    import os

    from tunectl.errors import UsageError
    from tunectl.preload.listfile import survey
    from tunectl.units import format_bytes, parse_bytes

    try:
        limit = parse_bytes(args.max_bytes) if args.max_bytes is not None else \
            os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * RAM_SHARE_PERCENT // 100
    except (ValueError, TypeError) as e:
        raise UsageError(f"--max-bytes: {e}") from None
    found = survey(args.list)
    total = found.bytes + metadata_bytes
    if total > limit:
        meta = f" and {format_bytes(metadata_bytes)} of metadata" if metadata_bytes else ""
        raise UsageError(f"{args.list}: {found.files} files{meta}, "
                         f"{format_bytes(total)} to read: more than --max-bytes {format_bytes(limit)}"
                         + ("" if args.max_bytes else f" ({RAM_SHARE_PERCENT}% of memory)") + "; nothing was read",
                         hint="pass a larger --max-bytes, or make a smaller list")
    if not (out.quiet or out.json):
        out.warn(f"tunectl: {args.list}: {found.files} files, {format_bytes(total)} to read")
    return found


def _skips(skipped, verbose: int) -> list[str]:
    from tunectl.report import table

    if skipped and (verbose or len(skipped) <= 20):
        return [table(["skipped", "status", "reason"], [(s.path, s.status, s.reason) for s in skipped])]
    if skipped:
        counts: dict[str, int] = {}
        for s in skipped:
            counts[s.status] = counts.get(s.status, 0) + 1
        return [f"skipped {len(skipped)} files ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}); "
                "-v lists them"]
    return []


def _render(report, out, human) -> int:
    """One JSON document, or notes on stderr and `human(report)` lines; the report's exit code."""

    if out.json:
        out.emit(report.to_json())
        return report.exit_code
    for note in getattr(report, "notes", []):
        out.warn(f"tunectl: note: {note}")
    for line in human(report):
        out.print(line)  # file names are anyone's bytes: print escapes them
    return report.exit_code


def _collected(report) -> list[str]:
    from tunectl.units import format_bytes

    doc = report.to_json()
    how = f" by {doc['method']}" if "method" in doc else ""
    return [*_skips(report.skipped, report.verbose),
            f"{report.list_path}: {doc['files']} files, {format_bytes(doc['bytes'])}{how}; "
            f"physical offset known for {doc['physical']}"]


def _moved(moved: dict[str, str]) -> list[str]:
    return [f"the list's device {was} is {now} at this boot (its file system is mounted where it was)"
            for was, now in sorted(moved.items())]


def _replayed(report) -> list[str]:
    from tunectl.units import format_bytes

    settled = "" if report.settled else " (reads still in flight at the timeout)"
    lines = [*_skips(report.skipped, report.verbose)]
    if report.verbose:
        lines += [f"method on {device}: {how}" for device, how in sorted(report.methods.items())]
        meta = report.metadata
        if meta is not None:
            lines.append(f"metadata pass: {format_bytes(meta.bytes)} in {meta.requests} calls on "
                         f"{', '.join(meta.devices) or 'no device'}")
            lines += [f"metadata pass: {note}" for note in meta.notes]
    if report.stopped:
        lines.append(f"stopped early: {report.stopped}")
    lines.append(f"{report.list_path}: {report.files} files, {format_bytes(report.bytes)} in {report.seconds:.2f} s "
                 f"({report.throughput / 1e6:.0f} MB/s, {report.order} order, "
                 f"{'inodes checked at open' if report.inode_pass == 'none' else 'inodes via ' + report.inode_pass})"
                 f"{settled}")
    if report.verbose:
        lines.append(_numbers(report.bytes + (report.metadata.bytes if report.metadata else 0), report.files,
                              report.requests, "disk requests", report.seconds, report.floor))
    return lines


def floor_unknown(as_root: bool) -> str:
    """Why there is no floor: not root, or (as root) the disk's rate could not be measured."""
    if not as_root:
        return "floor unknown (the sequential rate is measured as root)"
    return ("floor unknown (the disk's sequential rate could not be measured: its block device did not open or "
            "refused O_DIRECT, or is under 64 MiB)")


def _numbers(nbytes: int, files: int, requests: int | None, what: str, seconds: float | None, floor) -> str:
    """The closing line of `replay -v` and `show --stats`: bytes, files, requests, seconds, the floor."""
    from tunectl.units import format_bytes

    parts = [f"{format_bytes(nbytes)}", f"{files} files",
             f"{requests} {what}" if requests is not None else f"{what} unknown"]
    if seconds is not None:
        parts.append(f"{seconds:.2f} s")
    if floor is not None and floor.seconds is not None:
        parts.append(f"floor {floor.seconds:.2f} s at {floor.rate / 1e6:.0f} MB/s sequential"
                     + (f" ({seconds / floor.seconds:.1f}x the floor)" if seconds and floor.seconds else ""))
    else:
        import os

        parts.append(floor_unknown(os.geteuid() == 0))
    return "numbers: " + ", ".join(parts)


def _shown(report) -> list[str]:
    from tunectl.report import table
    from tunectl.units import format_bytes

    lines = []
    if report.verbose:
        lines.append(table(["file", "status", "bytes", "resident", "reason"],
                           [(f.path, f.status, f.wanted, f.cached, f.reason) for f in report.files]))
    t = report.totals()
    lines.append(table(["status", "files"], sorted(t["by_status"].items())))
    for m in report.metadata:
        cached = "residency unknown (root reads block devices)" if m.cached is None else \
            f"{format_bytes(m.cached)} resident ({m.percent}%)"
        lines.append(f"metadata on {m.device}: {m.ranges} ranges, {format_bytes(m.bytes)}, {cached}")
    unknown = t["by_status"].get("unknown", 0)
    resident = f"{format_bytes(t['resident_bytes'])} resident ({t['resident_percent']}%)"
    if unknown:  # mincore hid them: counted as 0 resident, which is not what was seen
        resident = (f"residency unknown for all {unknown}" if unknown == t["files"] else
                    f"{resident} of what could be seen, residency unknown for {unknown}") + " (run as root to see it)"
    lines.append(f"{report.list_path}: {t['files']} files, {format_bytes(t['bytes'])}, {resident}"
                 + (f", made {report.created}" if report.created else ""))
    st = report.stats
    if st is not None:
        lines.append(_numbers(st.bytes + st.metadata_bytes, st.files, st.requests, "WILLNEED calls", None, st.floor))
        if st.hit is not None:
            h = st.hit
            lines.append(f"hit rate: the boot used {100 * h.used:.0f}% of the list's {format_bytes(h.listed)}; "
                         f"the list missed {100 * h.missed:.0f}% of the {format_bytes(h.read)} it read"
                         + ("; collect again (below the thresholds in tunectl-preload(8))" if h.recollect else ""))
    return lines
