"""The text `tunectl preload` prints for people: each report's lines (the --json document is its `to_json`)."""

from __future__ import annotations


def print_report(report, out, lines) -> None:
    """Notes on stderr, then `lines(report, paint)` on stdout (file names are anyone's bytes: `out.print` escapes
    them); `paint`: status cells coloured by their verdict (tunectl.status), on a terminal."""
    for note in getattr(report, "notes", []):
        out.warn(f"tunectl: note: {note}")
    for line in lines(report, out.colour):
        out.print(line)


def skips(skipped, verbose: int, paint: bool = False, counts: dict[str, int] | None = None) -> list[str]:
    """The skipped files: listed (-v, or a few), else counted by status. `counts`: every skip by status, when
    `skipped` keeps only the first ones (a replay lists at most MAX_SKIPS)."""
    if counts is None:
        counts = _counts(skipped)
    total = sum(counts.values())
    unlisted = total - len(skipped)
    if skipped and (verbose or total <= 20):
        from tunectl.report import table  # only for a table: a boot replay with nothing skipped does not import it

        more = [f"... and {unlisted} more skipped, not listed (only the first {len(skipped)} are kept)"] \
            if unlisted > 0 else []
        return [table(["skipped", "status", "reason"], [(s.path, s.status, s.reason) for s in skipped], paint=paint),
                *more]
    if total:
        from tunectl.units import counted

        listed = f"-v lists the first {len(skipped)}" if unlisted > 0 else "-v lists them"
        return [f"skipped {counted(total, 'file')} ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}); "
                f"{listed}"]
    return []


def unreadable(counts: dict[str, int], done: str) -> list[str]:
    """The summary's last word on files that could not be read (collect and replay exit 3 for them): `done` says
    what happened to the rest; nothing when none was unreadable."""
    from tunectl.preload.skip import UNREADABLE

    n = counts.get(UNREADABLE, 0)
    if not n:
        return []
    from tunectl.units import counted

    return [f"exit 3 (partial): {counted(n, 'file')} unreadable, {done}"]


def _counts(skipped) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in skipped:
        counts[s.status] = counts.get(s.status, 0) + 1
    return counts


def collected(report, paint: bool = False) -> list[str]:
    from tunectl.units import counted, format_bytes

    doc = report.to_json()
    how = f" by {doc['method']}" if "method" in doc else ""
    return [*skips(report.skipped, report.verbose, paint),
            f"{report.list_path}: {counted(doc['files'], 'file')}, {format_bytes(doc['bytes'])}{how}; "
            f"physical offset known for {doc['physical']}",
            *unreadable(_counts(report.skipped), "not in the list")]


def moved_devices(moved: dict[str, str]) -> list[str]:
    return [f"the list's device {was} is {now} at this boot (its file system is mounted where it was)"
            for was, now in sorted(moved.items())]


def columns_used(list_path: str, cols) -> list[str]:
    """Whether the list's entries came from its columns file (LIST.cols, `listfile.ColumnsRead`), and why not:
    `show -v` and `replay -v`."""
    if cols is None or not cols.status:
        return []
    if cols.status == cols.USED:
        return [f"columns: {list_path}.cols used (its entries, not decoded from the list's JSON)"]
    name = f"{list_path}.cols not used" if cols.status == cols.DECLINED else "none used"
    return [f"columns: {name}: {cols.reason}; the list was decoded from its JSON"]


def replayed(report, paint: bool = False) -> list[str]:
    from tunectl.units import counted, format_bytes

    lines = [*moved_devices(report.moved), *skips(report.skipped, report.verbose, paint, report.skip_counts)]
    if report.verbose:
        lines += [f"method on {device}: {how}; data pass {report.data_pass}"
                  for device, how in sorted(report.methods.items())]
        if report.list_why:
            lines.append(f"list {'streamed' if report.list_read == 'streamed' else 'read whole'}: {report.list_why}")
        if report.spans_split:
            lines.append(f"data pass: {counted(report.spans_split, 'span')} of up to 255 files issued by two threads "
                         "at once")
        lines += columns_used(report.list_path, report.columns)
        meta = report.metadata
        if meta is not None:
            lines.append(f"metadata pass: {format_bytes(meta.bytes)} in {counted(meta.requests, 'call')} on "
                         f"{', '.join(meta.devices) or 'no device'}")
            lines += [f"metadata pass: {note}" for note in meta.notes]
    if report.stopped:
        lines.append(f"stopped early: {report.stopped}")
    how = f"{report.order} order, " + \
        ("inodes checked at open" if report.inode_pass == "none" else "inodes stat'd one by one"
         if report.inode_pass == "one-by-one" else "inodes via " + report.inode_pass)
    files = counted(report.files, "file")
    if report.settled or report.settle_timeout:  # the disks done with its reads, or waited for as long as told
        lines.append(f"{report.list_path}: {files}, {format_bytes(report.bytes)} in {report.seconds:.2f} s "
                     f"({report.throughput / 1e6:.0f} MB/s, {how})"
                     + ("" if report.settled else " (reads still in flight at the timeout)"))
    else:  # returned once they were sent, as WILLNEED does: not a time to read them in
        lines.append(f"{report.list_path}: sent {files} ({format_bytes(report.bytes)}) to the disk in "
                     f"{report.seconds:.2f} s ({how}); pass --settle-timeout S to wait for them")
    if report.verbose:
        lines.append(numbers(report.bytes + (report.metadata.bytes if report.metadata else 0), report.files,
                              report.requests, "disk request", report.seconds, report.floor,
                              unfinished="" if report.settled else ", reads still in flight at the timeout"
                              if report.settle_timeout else " to send the reads, some still in flight"))
    return [*lines, *unreadable(report.skip_counts, "not read")]


def floor_unknown(as_root: bool) -> str:
    """Why there is no floor: not root, or (as root) the disk's rate could not be measured."""
    if not as_root:
        return "floor unknown (the sequential rate is measured as root)"
    return ("floor unknown (the disk's sequential rate could not be measured: its block device did not open or "
            "refused O_DIRECT, or is under 64 MiB)")


def numbers(nbytes: int, files: int, requests: int | None, what: str, seconds: float | None, floor,
            unfinished: str = "") -> str:
    """The closing line of `replay -v` and `show --stats`: bytes, files, requests (`what`: their noun, singular),
    seconds, the floor. `unfinished`: said after the seconds when the reads were not all over by then (they are
    then not set against the floor); "": they were."""
    from tunectl.units import counted, format_bytes

    parts = [f"{format_bytes(nbytes)}", counted(files, "file"),
             (counted(requests, what) + (" done by then" if unfinished else "")) if requests is not None
             else f"{what}s unknown"]
    if seconds is not None:
        parts.append(f"{seconds:.2f} s{unfinished}")
    if floor is not None and floor.seconds is not None:
        parts.append(f"floor {floor.seconds:.2f} s at {floor.rate / 1e6:.0f} MB/s sequential"
                     + (f" ({seconds / floor.seconds:.1f}x the floor)" if seconds and floor.seconds and not unfinished else ""))
    else:
        import os

        parts.append(floor_unknown(os.geteuid() == 0))
    return "numbers: " + ", ".join(parts)


ORDER_SOURCES = {"fiemap": "physical, from the file system's extents (FIEMAP)",
                 "squashfs": "physical, from the squashfs image's inode table (front to back)",
                 "inode": "inode number (nothing said where the data lies)"}


def shown(report, paint: bool = False) -> list[str]:
    from tunectl.report import table
    from tunectl.units import counted, format_bytes

    lines = []
    if report.verbose:
        lines.append(table(["file", "status", "bytes", "resident", "reason"],
                           [(f.path, f.status, f.wanted, f.cached, f.reason) for f in report.files], paint=paint))
    t = report.totals()
    lines.append(table(["status", "files"], sorted(t["by_status"].items()), paint=paint))
    if report.verbose:
        lines += columns_used(report.list_path, report.columns)
    for o in report.order:
        lines.append(f"order on {o.device}: {ORDER_SOURCES.get(o.source, o.source)} ({counted(o.files, 'file')})")
    for m in report.metadata:
        cached = "residency unknown (root reads block devices)" if m.cached is None else \
            f"{format_bytes(m.cached)} resident ({m.percent}%)"
        lines.append(f"metadata on {m.device}: {counted(m.ranges, 'range')}, {format_bytes(m.bytes)}, {cached}")
    unknown = t["by_status"].get("unknown", 0)
    resident = f"{format_bytes(t['resident_bytes'])} resident ({t['resident_percent']}%)"
    if unknown:  # mincore hid them: counted as 0 resident, which is not what was seen
        resident = (f"residency unknown for all {unknown}" if unknown == t["files"] else
                    f"{resident} of what could be seen, residency unknown for {unknown}") + " (run as root to see it)"
    lines.append(f"{report.list_path}: {counted(t['files'], 'file')}, {format_bytes(t['bytes'])}, {resident}"
                 + (f", made {report.created}" if report.created else ""))
    st = report.stats
    if st is not None:
        lines.append(numbers(st.bytes + st.metadata_bytes, st.files, st.requests, "WILLNEED call", None, st.floor))
        if st.hit is not None:
            h = st.hit
            lines.append(f"hit rate: the boot used {100 * h.used:.0f}% of the list's {format_bytes(h.listed)}; "
                         f"the list missed {100 * h.missed:.0f}% of the {format_bytes(h.read)} it read"
                         + ("; collect again (below the thresholds in tunectl-preload(8))" if h.recollect else ""))
    return lines
