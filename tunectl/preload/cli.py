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
    c.add_argument("-o", "--output", required=True, metavar="LIST",
                   help="the list to write (atomically; a file: '-' is refused, not standard output)")
    c.add_argument("--resident", action="store_true",
                   help="only the pages cached now (mincore); as root, or for files you own")
    r = add_action(sub, "record", "run a command and record the files it opens")
    r.add_argument("-o", "--output", required=True, metavar="LIST",
                   help="the list to write (atomically; a file: '-' is refused, not standard output)")
    r.add_argument("--method", choices=("auto", "fanotify", "diff"), default="auto",
                   help="fanotify (needs CAP_SYS_ADMIN), a before/after residency diff, "
                        "or auto: fanotify where permitted, else diff")
    r.add_argument("--scope", action="append", default=[], metavar="DIR",
                   help="only files below DIR (repeatable; default / for fanotify, /usr and /etc for diff); "
                        "fanotify watches DIR's own file system: name one mounted below it (/home, /boot) too")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")
    y = add_action(sub, "replay", "bring a list into the page cache in disk order, as fast as the device allows; "
                                  "the list is read as it is checked, so a bad entry stops the replay at that entry "
                                  "(the files before it are then in the page cache: nothing on disk changes)")
    y.add_argument("list", metavar="LIST", help="a list made by `preload collect` or `preload record`; as root, "
                                                 "root's own and writable by no one else (another user's list would "
                                                 "choose what root reads: run it as its owner, `sudo -u OWNER`)")
    y.add_argument("--threads", type=int, default=None, metavar="N",
                   help="stats at once in the inode pass before the data reads: io_uring kernel workers "
                        "(default 32), or Python threads where io_uring is refused (default 8); 0 or 1: one at a time")
    y.add_argument("--no-io-uring", action="store_true",
                   help="stat from Python threads even where the kernel offers io_uring")
    y.add_argument("--settle-timeout", type=float, default=0.0, metavar="S",
                   help="wait at most S seconds for the reads it sent to finish before returning (default 0: return "
                        "once they are sent, as WILLNEED does, so a program started next overlaps the disk's tail; "
                        "then it says the reads were sent, not read)")
    y.add_argument("--max-bytes", metavar="SIZE", default=None,
                   help=f"refuse a list that would read more than SIZE (e.g. 2G; default: {RAM_SHARE_PERCENT}%% of "
                        "the machine's memory, as what does not fit evicts what the machine uses); a list whose "
                        "header gives its total is refused from it before any file is read, then read as it is "
                        "checked: entries that add up to more stop the replay there (what it had read stays in the "
                        "page cache, which changes nothing on disk); an older list is counted whole first")
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
    from tunectl.preload.listfile import ColumnsRead, batches, header, read_list

    verb = args.preload_command
    if verb in ("collect", "record") and args.output == "-":
        # replay and show open a list only as a checked regular file, and stdout carries the report
        raise UsageError(f"preload {verb} -o -: a preload list is written to a file, never to standard output",
                         hint="replay and show read a list only from a regular file, which is written whole (a temp "
                              "file renamed over it); name one, e.g. -o app.list (./- for a file named '-')",
                         where="-")
    if verb in ("collect", "record"):
        import os

        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):  # found before a walk of /usr or a whole run of the command, not after
            raise UsageError(f"{args.output}: cannot write the preload list: the directory {folder} does not exist",
                             hint=f"create it first (mkdir -p {folder}), or name a list in another directory",
                             where=args.output)
    if verb == "collect":
        from tunectl.preload.collect import collect

        report = collect(args.paths, args.output, resident=args.resident, roots=ctx.roots)
    elif verb == "record":
        from tunectl.preload.record import record

        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        report = record(cmd, args.output, method=args.method, scope=args.scope,
                        stdout_to_stderr=out.json, roots=ctx.roots)
    elif verb == "replay":
        from tunectl.preload.listing import metadata_of, time_ordered, total_of
        from tunectl.preload.replay import FIRST_CHUNK, STREAM_CHUNK, ListSource, replay

        # nan too: a wait it bounds would never end; inf: the --json document has no number for it
        if (args.threads or 0) < 0 or not 0 <= args.settle_timeout < float("inf"):
            raise UsageError("--threads and --settle-timeout must not be negative (nor --settle-timeout nan or inf: "
                             "give the most seconds to wait)")
        # A replay is short-lived and allocates only its list: the cyclic collector would walk those
        # tens of thousands of tuples again and again for nothing (about 60 ms per 47k-file list).
        gc.disable()
        head = header(args.list)
        metadata = {} if args.no_metadata else metadata_of(head, args.list)
        meta_bytes = 0
        if metadata:  # coalesced once, here, and counted as the metadata pass reads them (holes read through)
            from tunectl.preload.metadata import planned

            metadata, meta_bytes = planned(metadata)
        limit = _limit(args)
        total = total_of(head, args.list)
        source = None
        seen = ColumnsRead()
        if total is None:  # a list made before its header gave the total: all of it checked and counted first
            found = _surveyed(args, out, meta_bytes, limit, seen=seen)
            files, parts = found.files, _parts(found, args.list)
        else:  # refused from its header before any read; then read as it is checked, counted against the cap
            files, parts = total[0], None
            _check_total(args, out, total[0], total[1] + meta_bytes, meta_bytes, limit)

            def over_cap(n: int, nbytes: int, already: str) -> UsageError:
                return _over_cap(args, total, n, nbytes + meta_bytes, limit, already, meta_bytes)

            source = ListSource((b for _, b in batches(args.list, STREAM_CHUNK, first=FIRST_CHUNK, seen=seen)),
                                limit - meta_bytes,
                                lambda checked: _parts(_surveyed(args, out, meta_bytes, limit, False, checked),
                                                       args.list),
                                over_cap)
        with out.progress(2 * files, "preload (inodes, then data)") as bar:
            report = replay(ctx.sysfs, parts, args.list, progress=bar, threads=args.threads,
                            settle_timeout=args.settle_timeout, use_io_uring=not args.no_io_uring,
                            metadata=metadata, dev_root=ctx.roots.dev, time_order=time_ordered(head, args.list),
                            source=source)
        report.columns = seen
        if total is None:
            report.list_why = "every entry checked before the first read: the list's header does not give its " \
                              "total (made by an older tunectl; collect it again to have it read as it is checked)"
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
        seen = ColumnsRead()
        report = show(read_list(args.list, seen), args.list, header(args.list, replayed=False), ctx.roots.dev,
                      ctx.sysfs, stats=args.stats, against=read_list(args.against) if args.against else None)
        report.columns = seen
    report.verbose = out.verbose
    return out.show(report)


def _limit(args) -> int:
    """The most a replay may read: --max-bytes, or RAM_SHARE_PERCENT of the machine's memory."""
    import os

    from tunectl.errors import UsageError
    from tunectl.units import parse_bytes

    try:
        return parse_bytes(args.max_bytes) if args.max_bytes is not None else \
            os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * RAM_SHARE_PERCENT // 100
    except (ValueError, TypeError) as e:
        raise UsageError(f"--max-bytes: {e}") from None


def _parts(found, path: str):
    """The surveyed list's batches: the entries kept by the survey, or the list read again batch by batch."""
    from tunectl.preload.listfile import reread

    return [found.entries] if found.entries is not None else reread(path, found)


def _cap_words(args, limit: int, over: int) -> str:
    return f"more than --max-bytes {_apart(limit, over)}" + ("" if args.max_bytes else f" ({RAM_SHARE_PERCENT}% of memory)")


def _apart(n: int, other: int) -> str:
    """`n` as format_bytes writes it, or in bytes when `other` would read the same (15000 B over 14999 B, not
    "14.6 KiB to read: more than --max-bytes 14.6 KiB")."""
    from tunectl.units import format_bytes

    return f"{n} B" if format_bytes(n) == format_bytes(other) else format_bytes(n)


def _check_total(args, out, files: int, total: int, metadata_bytes: int, limit: int, announce: bool = True) -> None:
    """Refuse a list over the cap before any of its files is read; else say what will be read (stderr)."""
    from tunectl.errors import UsageError
    from tunectl.units import counted, format_bytes

    if total > limit:
        meta = f" and {format_bytes(metadata_bytes)} of metadata" if metadata_bytes else ""
        raise UsageError(f"{args.list}: {counted(files, 'file')}{meta}, {_apart(total, limit)} to read: "
                         f"{_cap_words(args, limit, total)}; no file of it was read",
                         hint="pass a larger --max-bytes, or make a smaller list")
    if announce and not (out.quiet or out.json):  # said on stderr before the reading starts, not part of the report
        out.warn(f"tunectl: {args.list}: {counted(files, 'file')}, {format_bytes(total)} to read")


def _over_cap(args, total: tuple[int, int], files: int, nbytes: int, limit: int, already: str, meta_bytes: int = 0):
    """The error when a streamed list's entries add up to more than its header said, and past the cap; `nbytes`
    counts the metadata pass's `meta_bytes` too, and says so."""
    from tunectl.errors import UsageError
    from tunectl.units import counted, format_bytes

    meta = f" with {format_bytes(meta_bytes)} of metadata" if meta_bytes else ""
    return UsageError(f"{args.list}: {_cap_words(args, limit, nbytes)} to read: its header says "
                      f"{counted(total[0], 'file')}, {format_bytes(total[1])}, but its first {counted(files, 'file')} "
                      f"come to {_apart(nbytes, limit)}{meta}{already}",
                      hint="collect the list again (its header does not match its entries), or pass a larger "
                           "--max-bytes")


def _surveyed(args, out, metadata_bytes: int = 0, limit: int | None = None, announce: bool = True, checked=None,
              seen=None):
    """One streaming pass over the list: every line checked and the total known before any file is read.
    `checked`: the list's batches as a streamed replay has begun reading them (its open file, continued);
    `seen`: told whether the list's columns file was used (`listfile.ColumnsRead`)."""
    from tunectl.preload.listfile import survey, tally

    limit = _limit(args) if limit is None else limit
    found = survey(args.list, seen=seen) if checked is None else tally(checked)
    _check_total(args, out, found.files, found.bytes + metadata_bytes, metadata_bytes, limit, announce)
    return found
