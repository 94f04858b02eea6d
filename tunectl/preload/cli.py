"""`tunectl preload collect|record|replay|show`: arguments, dispatch and rendering."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

RAM_SHARE_PERCENT = 50  # a list may read at most this share of the machine's memory unless --max-bytes says

EXAMPLES = ("examples:\n  tunectl preload collect /usr/lib/firefox -o firefox.list\n"
            "  tunectl preload collect --resident /usr -o boot.list     # what is cached now\n"
            "  tunectl preload record -o app.list -- myapp --version     # what a command opens\n"
            "  tunectl preload replay firefox.list                      # bring it in, disk order\n"
            "  tunectl preload show firefox.list                        # how much is cached now\n"
            "the list format and the boot units are described in tunectl-preload(8)")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    import argparse  # here, not at the top: a replay reads its line without argparse (tunectl.preload.fastpath)

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

        report = collect(args.paths, args.output, resident=args.resident, roots=ctx.roots)
    elif verb == "record":
        from tunectl.preload.record import record

        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        report = record(cmd, args.output, method=args.method, scope=args.scope,
                        stdout_to_stderr=out.json, roots=ctx.roots)
    elif verb == "replay":
        from tunectl.preload.listfile import header
        from tunectl.preload.listing import metadata_of
        from tunectl.preload.replay import replay

        if (args.threads or 0) < 0 or not args.settle_timeout >= 0:  # nan too: a wait it bounds would never end
            raise UsageError("--threads and --settle-timeout must not be negative (nor --settle-timeout nan)")
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
        report.moved = head["moved"] if out.verbose else {}
        if out.verbose and head["metadata_dropped"]:
            out.warn(f"tunectl: note: {args.list}: the metadata ranges of {', '.join(head['metadata_dropped'])} were not"
                     " read: two listed devices map to that number at this boot, so whose ranges they are is unknown")
        if out.verbose and head["metadata_ignored"]:
            out.warn(f"tunectl: note: {args.list}: its metadata ranges are not read (the list is not owned by root or"
                     " you, or others may write it): a range is read from the disk as it is, unchecked")
        if out.verbose and head["mounts_ignored"]:
            out.warn(f"tunectl: note: {args.list}: its \"mounts\" header is ignored (the list is not owned by root or"
                     " you, or others may write it): files on a disk renumbered at this boot are skipped as changed")
    else:
        from tunectl.preload.show import show

        if args.against and not args.stats:
            raise UsageError("--against compares with what a boot read: it goes with --stats",
                             hint="tunectl preload show --stats LIST --against READ_LIST")
        report = show(read_list(args.list), args.list, header(args.list), ctx.roots.dev, ctx.sysfs,
                      stats=args.stats, against=read_list(args.against) if args.against else None)
    report.verbose = out.verbose
    return out.show(report)


def _surveyed(args, out, metadata_bytes: int = 0):
    """One streaming pass over the list: every line checked and the total known before anything is read."""
    import os

    from tunectl.errors import UsageError
    from tunectl.preload.listfile import survey
    from tunectl.units import counted, format_bytes, parse_bytes

    try:
        limit = parse_bytes(args.max_bytes) if args.max_bytes is not None else \
            os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * RAM_SHARE_PERCENT // 100
    except (ValueError, TypeError) as e:
        raise UsageError(f"--max-bytes: {e}") from None
    found = survey(args.list)
    total = found.bytes + metadata_bytes
    if total > limit:
        meta = f" and {format_bytes(metadata_bytes)} of metadata" if metadata_bytes else ""
        raise UsageError(f"{args.list}: {counted(found.files, 'file')}{meta}, "
                         f"{format_bytes(total)} to read: more than --max-bytes {format_bytes(limit)}"
                         + ("" if args.max_bytes else f" ({RAM_SHARE_PERCENT}% of memory)") + "; nothing was read",
                         hint="pass a larger --max-bytes, or make a smaller list")
    if not (out.quiet or out.json):  # stays: said on stderr before the reading starts, not part of the report
        out.warn(f"tunectl: {args.list}: {counted(found.files, 'file')}, {format_bytes(total)} to read")
    return found


