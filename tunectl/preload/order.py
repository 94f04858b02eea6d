"""Ordering and chunking for a replay (pure arithmetic on list entries).

Files are read in the order the disk holds them: by device, then by the
physical offset FS_IOC_FIEMAP gave; files without one (squashfs, tmpfs, not yet
written back) follow in inode order, which on most file systems is allocation
order. Inodes are warmed in inode order: their tables are laid out that way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import eq, is_, is_not, le, lt

from tunectl.preload.listing import Entry, column

PAGE = 4096
DEFAULT_WINDOW_KB = 128  # the kernel's default read-ahead when a device says nothing


def _physical_key(e: Entry) -> tuple:
    return (e.device, e.physical is None, e.inode if e.physical is None else e.physical, e.inode)


def _inode_key(e: Entry) -> tuple:
    return (e.device, e.inode)


def physical_order(entries: Iterable[Entry]) -> list[Entry]:
    """Device, then physical offset; entries without one after them, in inode order."""
    return sorted(entries, key=_physical_key)


_BYTES = Entry.bytes.fget


def _one_device(entries: Sequence[Entry]) -> bool:
    """Whether every entry is on one device: then the device is left out of the sort keys."""
    return len(set(column(entries, "device"))) <= 1


def physical_indices(entries: Sequence[Entry]) -> list[int]:
    """Positions in `entries`, in physical_order (a replay keeps one verdict per position).

    The common list (one device) is sorted on (physical, inode) pairs built by C-level iteration,
    then the entries without an offset by inode: the same order as the full key, whose device is then
    equal everywhere; about 15 ms against 40 for a 53,000-file list, paid before the first read.
    """
    if not _one_device(entries):
        keys = list(map(_physical_key, entries))  # keys first: a sort key per index would cost a call more
        return sorted(range(len(keys)), key=keys.__getitem__)
    physical, inodes = column(entries, "physical"), column(entries, "inode")
    pairs = list(zip(physical, inodes))
    if None not in physical:
        return sorted(range(len(pairs)), key=pairs.__getitem__)
    # the few without an offset (not written back, a file system without FIEMAP) after the rest, by inode
    known = list(compress(range(len(physical)), map(is_not, physical, repeat(None))))
    unknown = list(compress(range(len(physical)), map(is_, physical, repeat(None))))
    return sorted(known, key=pairs.__getitem__) + sorted(unknown, key=inodes.__getitem__)


def in_physical_order(entries: Sequence[Entry], after: tuple | None = None) -> tuple[bool, tuple | None]:
    """Whether `entries` are already in physical_order, and after the key `after` (the previous chunk's last);
    and the last key. A list `collect` wrote is: a streamed replay then reads it as it comes, no sort.
    The common list (one device) is judged by C-level passes over its offsets and inodes, no key built per
    entry (a streamed replay asks this of every chunk before reading it)."""
    if not entries:
        return True, after
    last = _physical_key(entries[-1])
    if after is not None and after > _physical_key(entries[0]):
        return False, last
    if not _one_device(entries):
        keys = list(map(_physical_key, entries))
        return all(map(le, keys, keys[1:])), last
    physical, inodes = column(entries, "physical"), column(entries, "inode")
    known = len(physical) - physical.count(None)  # those with an offset come first, then the rest by inode
    if physical[known:].count(None) != len(physical) - known:
        return False, last
    rest = inodes[known:]
    return _pairs_in_order(physical[:known], inodes[:known]) and all(map(le, rest, rest[1:])), last


def _pairs_in_order(first: list[int], then: list[int]) -> bool:
    """Whether the pairs (first[i], then[i]) are in order, without building them: `first` never decreasing, and
    `then` not either where `first` repeats."""
    if all(map(lt, first, first[1:])):  # no offset repeats (the common list): one pass, no second over the repeats
        return True
    if not all(map(le, first, first[1:])):
        return False
    return all(then[i] <= then[i + 1] for i in compress(range(len(first) - 1), map(eq, first, first[1:])))


def inode_indices(entries: Sequence[Entry]) -> list[int]:
    """Positions in `entries` by device, then inode: the thread pass stats in this order (inode tables).
    One device (the common list): the inodes alone, an int key per entry."""
    keys: list = column(entries, "inode") if _one_device(entries) else list(map(_inode_key, entries))
    return sorted(range(len(keys)), key=keys.__getitem__)


def order_name(entries: Sequence[Entry]) -> str:
    """How a replay will order these: 'physical', 'inode' (no FIEMAP anywhere) or 'mixed'."""
    known = len(entries) - column(entries, "physical").count(None)
    return "physical" if known == len(entries) else "inode" if known == 0 else "mixed"


def window_bytes(read_ahead_kb: int | None, max_sectors_kb: int | None) -> int:
    """What one posix_fadvise(WILLNEED) or readahead(2) call reads at most on this device.

    force_page_cache_ra() caps each call at max(read-ahead, largest request):
    a whole-file call on a large file loads only that much, so calls go in chunks.
    """
    window = max(read_ahead_kb or 0, max_sectors_kb or 0) or DEFAULT_WINDOW_KB
    return window * 1024


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, length) ranges sorted, with overlapping or touching ones joined."""
    merged: list[list[int]] = []
    for start, length in sorted(ranges):
        if length <= 0:
            continue
        if merged and start <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + length - merged[-1][0])
        else:
            merged.append([start, length])
    return [(s, n) for s, n in merged]


def chunks(ranges: Iterable[tuple[int, int]], size: int, window: int) -> Iterator[tuple[int, int]]:
    """(offset, length) calls covering `ranges` clipped to a file of `size`, each at most `window`."""
    for start, length in merge_ranges(ranges):
        end = min(start + length, size)
        while start < end:
            n = min(window, end - start)
            yield start, n
            start += n


def pages_to_ranges(resident: Sequence[bool] | bytes, size: int) -> list[tuple[int, int]]:
    """Byte ranges of the resident pages in a mincore() vector (bit 0 of each byte)."""
    ranges: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate(resident):
        if (flag & 1 if isinstance(flag, int) else flag):
            if start is None:
                start = i
        elif start is not None:
            ranges.append((start * PAGE, min(i * PAGE, size) - start * PAGE))
            start = None
    if start is not None:
        ranges.append((start * PAGE, min(len(resident) * PAGE, size) - start * PAGE))
    return ranges


def page_bytes(ranges: Iterable[tuple[int, int]], size: int) -> int:
    """Bytes the page cache holds for these ranges of a file of `size`: whole pages."""
    total = 0
    for start, length in merge_ranges(ranges):
        end = min(start + length, size)
        if end > start:
            total += (end + PAGE - 1) // PAGE * PAGE - start // PAGE * PAGE
    return total


def resident_bytes(vec: bytes, ranges: Iterable[tuple[int, int]], size: int) -> tuple[int, int]:
    """(bytes cached, bytes wanted) over `ranges`, page by page, the last page clipped to `size`.

    `vec` is a mincore() vector: one byte per page, 1 when the page is cached.
    """
    cached = wanted = 0
    for start, length in merge_ranges(ranges):
        end = min(start + length, size)
        if end <= start:
            continue
        first, last = start // PAGE, (end - 1) // PAGE  # inclusive pages
        tail = size - last * PAGE if (last + 1) * PAGE > size else PAGE
        wanted += (last - first) * PAGE + tail
        full = vec[first:last].count(1)
        cached += full * PAGE + (tail if last < len(vec) and vec[last] & 1 else 0)
    return cached, wanted


def coalesce(ranges: Iterable[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Ranges sorted and joined across holes of at most `gap` bytes: fewer, larger requests for a
    few pages read in vain (the metadata pass: inode tables and directories lie in clusters)."""
    out: list[tuple[int, int]] = []
    for start, length in merge_ranges(ranges):
        if out and start - (out[-1][0] + out[-1][1]) <= gap:
            out[-1] = (out[-1][0], start + length - out[-1][0])
        else:
            out.append((start, length))
    return out


def bin_ends(entries: Sequence[Entry], bin_bytes: int, filled: int = 0) -> tuple[list[int], int]:
    """Where the time bins of `entries` (in recorded order) end: the position after each bin's last entry, a
    bin ending at the entry that brings it to `bin_bytes`; the first bin already `filled` bytes full (a list
    cut into chunks, as a streamed replay reads it, is binned as the whole list). Also: how full the last,
    unended bin is."""
    ends = []
    for n, size in enumerate(map(_BYTES, entries), start=1):
        filled += size
        if filled >= bin_bytes:
            ends.append(n)
            filled = 0
    return ends, filled


def binned_indices(entries: Sequence[Entry], bin_bytes: int) -> list[int]:
    """Positions in `entries` (in recorded, time order) cut into bins of about `bin_bytes` each (`bin_ends`),
    physical order within a bin: what boot reads first comes first, and each bin is one sweep of the disk's
    head (systemd-readahead's order on rotational disks)."""
    out: list[int] = []
    start = 0
    for end in [*bin_ends(entries, bin_bytes)[0], len(entries)]:
        out += [start + i for i in physical_indices(entries[start:end])]
        start = end
    return out


def overlap_bytes(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> int:
    """Bytes two sets of (offset, length) ranges have in common."""
    x, y = merge_ranges(a), merge_ranges(b)
    i = j = total = 0
    while i < len(x) and j < len(y):
        start, end = max(x[i][0], y[j][0]), min(x[i][0] + x[i][1], y[j][0] + y[j][1])
        total += max(0, end - start)
        if x[i][0] + x[i][1] <= y[j][0] + y[j][1]:
            i += 1
        else:
            j += 1
    return total


BIN_BYTES = 32 << 20  # a time bin: about a third of a second of a hard disk's sequential rate


def method(rotational: bool | None, time_order: bool) -> str:
    """How a replay orders a device's files. A rotational disk (or one that does not say) pays for every
    seek: physical order, in time bins when the list holds the order files were read in. Flash does not
    seek: the list's own order, no sort, the reads queued back to back keep its queue full."""
    if rotational is False:
        return "list"
    return "time-bins" if time_order else "physical"


def inode_pass(how: str) -> bool:
    """Whether a replay stats every file before its data pass: only to bring the inodes in, many at once,
    ahead of a data pass in disk order on a disk that seeks (physical, time bins). On flash each file is
    looked at as it is opened, once: the pass would cost a stat per file and gain nothing. After a metadata
    pass the inode pass still runs: the ranges may not hold every inode (on Linux 6.1 collect recorded 20 KiB
    for a 400-file tree), and a data pass that waited on the rest file by file interleaved them with its own
    (on the model HDD: 0.63-0.65 s modelled against 0.31-0.35 s with the pass). Its sample stops it early
    where the inodes answer from the cache."""
    return how != "list"


def indices_for(how: str, entries: Sequence[Entry]) -> list[int]:
    """Positions in `entries` in the order `method` named."""
    if how == "list":
        return list(range(len(entries)))
    if how == "time-bins":
        return binned_indices(entries, BIN_BYTES)
    return physical_indices(entries)
