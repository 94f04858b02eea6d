"""The preload list: a small, versioned JSON-lines file (pure: text in, records out).

Format version 1. The first line is a header object; every further line is one
file, a JSON array in the order the header's "fields" names:

    {"format": "tunectl-preload", "version": 1, "created": "2026-11-23T09:00:00Z", "files": 2,
     "bytes": 6831737, "fields": ["path", "device", "inode", "size", "mtime_ns", "ranges", "physical"]}
    ["/usr/bin/python3.11", "254:0", 1234, 6831736, 1700000000000000000, [[0, 6831736]], 811597824]

`device` is the file system's MAJ:MIN, `ranges` are [offset, length] byte
ranges to bring in (the whole file, or only what was resident or read), and
`physical` is the device byte offset of the first range's first extent from
FS_IOC_FIEMAP, or null where the file system cannot say (squashfs, tmpfs, a
file not yet written back): those files are read in inode order. A replay
skips a file whose device, inode, size or mtime_ns differ from the list.
On squashfs `physical` is the image byte offset of the first range's data,
from the image's inode table; the header's optional "placed" (MAJ:MIN ->
"squashfs") says which devices' offsets came from there.
The header's "files" and "bytes" (optional: lists made before they were written
lack "bytes") are the entries' count and the sum of their ranges' lengths: a
replay refuses a list over its memory cap from them before reading any file,
and then reads the entries as they are checked (`total_of`).
The header's optional "mounts" (MAJ:MIN -> where that file system was mounted
when the list was made) lets a reader follow a file system whose device number
changed at the next boot (disks probed in another order): `renumber`.
The header's optional "order" is "time" in a recorded list (entries in the order
they were read, kept bin by bin on a disk that seeks); any other value is refused.
Arrays, not objects: a boot-time replay decodes tens of thousands of lines.
A reader refuses a list from a newer version; a line it cannot read is an
error with file:line, never guessed at.
"""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from operator import itemgetter

from tunectl.errors import ExitCode, UsageError
from tunectl.preload.jsonscan import loads

TYPE_CHECKING = False  # typing costs a boot-time replay's start-up; Any is for checkers only
if TYPE_CHECKING:
    from typing import Any

FORMAT = "tunectl-preload"
VERSION = 1
FIELDS = ("path", "device", "inode", "size", "mtime_ns", "ranges", "physical")
MAX_DEVICE_PART = 0x7FFFFFFF  # os.makedev takes a C int each (dev_t holds 32 bits; Linux uses 12 and 20)
MIN_MTIME_NS = -(2**63)  # the least mtime_ns a file can have (a signed 64-bit count of nanoseconds)


def _is_device(device: str) -> bool:
    """MAJ:MIN, each 1-10 ASCII digits ("²".isdigit() is true, int("²") fails) up to MAX_DEVICE_PART; no `re`
    (a boot-time replay's start-up: tunectl.preload.jsonscan)."""
    parts = device.split(":")
    return len(parts) == 2 and all(0 < len(p) <= 10 and p.isascii() and p.isdigit() and int(p) <= MAX_DEVICE_PART
                                   for p in parts)


class ListError(UsageError):
    """A preload list that cannot be used: the text names file:line."""

    exit_code = ExitCode.USAGE
    code = "preload-list"
    line: int | None = None  # the entry's line when one entry is at fault (a streamed replay reads those before it)

    @classmethod
    def at(cls, line: int, message: str) -> ListError:
        error = cls(message)
        error.line = line
        return error


class Entry(namedtuple("Entry", FIELDS)):
    """One file of a list (a named tuple from collections: typing.NamedTuple costs start-up).

    path: str; device: str, "MAJ:MIN" of the file system; inode, size, mtime_ns: int;
    ranges: tuple of (offset, length) byte ranges; physical: int | None, the device byte
    offset of the first range, None: unknown.
    """

    __slots__ = ()

    @property
    def bytes(self) -> int:
        ranges = self.ranges
        return ranges[0][1] if len(ranges) == 1 else sum(length for _, length in ranges)

    def to_row(self) -> list:
        return [self.path, self.device, self.inode, self.size, self.mtime_ns, [list(r) for r in self.ranges],
                self.physical]


_RANGES, _LENGTH = itemgetter(FIELDS.index("ranges")), itemgetter(1)


def total_bytes(entries: Iterable[Entry]) -> int:
    """The sum of `Entry.bytes` over `entries`, at C speed (no Python frame per entry: a replay counts every
    chunk of tens of thousands against its cap); a chunk of columns (`columns.Chunk`) answers from its own."""
    own = getattr(entries, "total_bytes", None)
    if own is not None:
        return own()
    return sum(map(_LENGTH, chain.from_iterable(map(_RANGES, entries))))


def column(entries: Sequence[Entry], field: str) -> list:
    """Every entry's `field` (one of FIELDS), as a list: a chunk of columns (`columns.Chunk`) gives its own, no
    entry made; any other sequence, its entries'."""
    own = getattr(entries, "column", None)
    if own is not None:
        return own(field)
    return list(map(itemgetter(FIELDS.index(field)), entries))


class PreloadList(namedtuple("PreloadList", "entries created", defaults=("",))):
    """entries: list[Entry]; created: str, the header's date."""

    __slots__ = ()

    @property
    def bytes(self) -> int:
        return total_bytes(self.entries)


def render(entries: Iterable[Entry], created: str, metadata: Mapping[str, Iterable[tuple[int, int]]] | None = None,
           time_order: bool = False, mounts: Mapping[str, str] | None = None,
           placed: Mapping[str, str] | None = None) -> str:
    """The list's text. `metadata`: MAJ:MIN -> byte ranges of the block device to read first (the file
    system's own blocks); `time_order`: the entries are in the order they were read (a record), which a
    replay on a rotational disk keeps bin by bin; `mounts`: MAJ:MIN -> the file system's mount point;
    `placed`: MAJ:MIN -> where `physical` came from when not FIEMAP ("squashfs": the image's inode table).
    All are header keys a version-1 reader ignores."""
    entries = list(entries)
    header = {"format": FORMAT, "version": VERSION, "created": created, "files": len(entries),
              "bytes": total_bytes(entries), "fields": list(FIELDS)}
    if time_order:
        header["order"] = "time"
    if metadata:
        header["metadata"] = {dev: [list(r) for r in ranges] for dev, ranges in sorted(metadata.items())}
    if mounts:
        header["mounts"] = dict(sorted(mounts.items()))
    if placed:
        header["placed"] = dict(sorted(placed.items()))
    import json  # writing only: a replay decodes its list without json's imports (tunectl.preload.jsonscan)

    lines = [json.dumps(header)]
    lines += [json.dumps(e.to_row(), separators=(",", ":")) for e in entries]
    return "\n".join(lines) + "\n"


def _int(value: Any, minimum: int = 0) -> bool:
    return type(value) is int and value >= minimum


def _problem(row: Any) -> str:
    """Why a decoded line is not an entry ('' when it is one)."""
    if not isinstance(row, list) or len(row) != len(FIELDS):
        return f"expected a JSON array of {len(FIELDS)} fields ({', '.join(FIELDS)})"
    path, device, inode, size, mtime_ns, ranges, physical = row
    if not isinstance(path, str) or not path.startswith("/"):
        return "path: expected an absolute path"
    if "\0" in path:
        return "path: a NUL byte cannot be in a file name"
    try:
        os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate such as "\ud800": no file has that name
        return "path: not a file name this system can encode"
    if not isinstance(device, str) or not _is_device(device):
        return f"device: expected MAJ:MIN, each a decimal number up to {MAX_DEVICE_PART}"
    if not _int(inode) or not _int(size):
        return "inode, size: expected non-negative integers"
    if not _int(mtime_ns, minimum=MIN_MTIME_NS):
        return "mtime_ns: expected an integer (nanoseconds since the epoch)"
    if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 2 and _int(r[0]) and _int(r[1], 1) for r in ranges):
        return "ranges: expected a list of [offset, length] pairs"
    if physical is not None and not _int(physical):
        return "physical: expected a byte offset or null"
    return ""


def _entries(rows: list, numbers: Sequence[int], source: str) -> list[Entry]:
    """Entries from decoded rows; the common whole-file row costs a few type checks."""
    entries: list[Entry] = []
    append = entries.append
    devices: set[str] = set()
    make = tuple.__new__  # Entry(...) goes through a Python-level __new__: 4x slower per row
    for n, row in zip(numbers, rows):
        try:
            path, device, inode, size, mtime_ns, ranges, physical = row
            fast = (type(path) is str and path[:1] == "/" and path.isascii() and "\0" not in path
                    and device in devices and type(inode) is int
                    and type(size) is int and type(mtime_ns) is int and inode >= 0 and size > 0
                    and mtime_ns >= MIN_MTIME_NS and (physical is None or type(physical) is int and physical >= 0)
                    and type(ranges) is list and len(ranges) == 1 and ranges[0] == [0, size])
        except (TypeError, ValueError):
            fast = False
        if fast:
            append(make(Entry, (path, device, inode, size, mtime_ns, ((0, size),), physical)))
            continue
        problem = _problem(row)
        if problem:
            raise ListError.at(n, f"{source}:{n}: {problem}")
        devices.add(row[1])
        append(Entry(path, device, inode, size, mtime_ns, tuple((r[0], r[1]) for r in ranges), physical))
    return entries


def parse_header(line: str, source: str) -> dict:
    """The header line of a list, its optional keys checked; ListError unless it is a list this tunectl reads."""
    try:
        header = loads(line)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ListError(f"{source}:1: not a tunectl preload list (expected a header with \"format\": \"{FORMAT}\")",
                        hint="make one with `tunectl preload collect PATHS -o LIST`")
    version = header.get("version")
    if not _int(version, 1):
        raise ListError(f"{source}:1: version: expected a positive integer, got {version!r:.40}")
    if version > VERSION:
        raise ListError(f"{source}:1: list format version {version} is newer than this tunectl reads (up to {VERSION})",
                        hint="upgrade tunectl, or collect the list again with this one")
    # The optional keys are checked here, for every reader: `show` and `replay` refuse the same lists (a
    # replay, which has no use for "placed", once took a list `show` refused), whatever the options.
    metadata_of(header, source)
    total_of(header, source)
    time_ordered(header, source)
    mounts_of(header, source)
    placed_of(header, source)
    if "fields" in header and header["fields"] != list(FIELDS):  # rows are read by position: say so, never guess
        import json

        raise ListError(f"{source}:1: fields: expected {json.dumps(list(FIELDS))}, the order every entry is read in, "
                        f"got {json.dumps(header['fields'])[:120]}",
                        hint="collect the list again with this tunectl")
    return header


def total_of(header: dict, source: str) -> tuple[int, int] | None:
    """(files, bytes) the header says the list holds, or None when it does not say (a list made before
    "bytes" was written, or one whose "files" is not a count); ListError at `source:1` for a "bytes" that is
    not a byte count. A replay that trusts these to refuse before reading still counts the entries as it reads."""
    if "bytes" not in header:
        return None
    total = header["bytes"]
    if not _int(total):
        raise ListError(f"{source}:1: bytes: expected a non-negative integer, got {total!r:.40}")
    files = header.get("files")
    return (files, total) if _int(files) else None


def time_ordered(header: dict, source: str) -> bool:
    """Whether the header says its entries are in the order they were read ("order": "time", written by `record`
    only); ListError at `source:1` for any other value (a replay would otherwise take it for physical order)."""
    if "order" not in header:
        return False
    if header["order"] != "time":
        raise ListError(f"{source}:1: order: expected \"time\" (the order the files were read) or no key, "
                        f"got {header['order']!r:.40}", hint="collect or record the list again with this tunectl")
    return True


def _check_device(device: str, source: str, key: str) -> None:
    """A header key's MAJ:MIN, checked; ListError at `source:1` naming `key`."""
    if not _is_device(device):
        raise ListError(f"{source}:1: {key}: {device!r:.40} is not MAJ:MIN")


def metadata_of(header: dict, source: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """The header's metadata ranges (MAJ:MIN -> (offset, length) pairs), checked; ListError at `source:1`."""
    found = header.get("metadata", {})
    if not isinstance(found, dict):
        raise ListError(f"{source}:1: metadata: expected an object of MAJ:MIN -> [[offset, length], ...]")
    out = {}
    for device, ranges in found.items():
        _check_device(device, source, "metadata")
        if not isinstance(ranges, list) or not all(
                isinstance(r, list) and len(r) == 2 and _int(r[0]) and _int(r[1], 1) for r in ranges):
            raise ListError(f"{source}:1: metadata {device}: expected a list of [offset, length] pairs")
        out[device] = tuple((r[0], r[1]) for r in ranges)
    return out


def _device_map(header: dict, source: str, key: str, of: str, expected: str, ok) -> dict[str, str]:
    """The header's `key`, an object MAJ:MIN -> `of`, each value `ok`; ListError at `source:1` otherwise."""
    found = header.get(key, {})
    if not isinstance(found, dict):
        raise ListError(f"{source}:1: {key}: expected an object of MAJ:MIN -> {of}")
    for device, value in found.items():
        _check_device(device, source, key)
        if not ok(value):
            raise ListError(f"{source}:1: {key} {device}: expected {expected}, got {value!r:.60}")
    return dict(found)


def mounts_of(header: dict, source: str) -> dict[str, str]:
    """The header's mount points (MAJ:MIN -> absolute path), checked; ListError at `source:1`."""
    return _device_map(header, source, "mounts", "mount point", "an absolute path",
                       lambda t: isinstance(t, str) and t.startswith("/") and "\0" not in t)


def placed_of(header: dict, source: str) -> dict[str, str]:
    """The header's "placed" (MAJ:MIN -> "squashfs": physical offsets from the image's inode table), checked."""
    return _device_map(header, source, "placed", '"squashfs"', '"squashfs"', lambda v: v == "squashfs")


def renumber(entries: list[Entry], moved: Mapping[str, str]) -> list[Entry]:
    """`entries` with each device `moved` names (listed MAJ:MIN -> MAJ:MIN now) replaced; the list itself
    when nothing moved, so the common replay pays nothing."""
    if not moved:
        return entries
    make = tuple.__new__
    return [make(Entry, (e[0], moved[e[1]], *e[2:])) if e[1] in moved else e for e in entries]


def parse_rows(body: list[tuple[int, str]], source: str) -> list[Entry]:
    """Entries of (line number, text) pairs, blank lines left out by the caller; ListError at `source:line`."""
    return parse_lines([line for _, line in body], [n for n, _ in body], source)


def parse_lines(lines: list[str], numbers: Sequence[int], source: str) -> list[Entry]:
    """Entries of non-blank lines, `numbers` their line numbers; ListError at `source:line`."""
    try:  # one C-speed decode for the common case; line by line only to place an error
        rows = loads("[" + ",".join(lines) + "]")
    except (ValueError, RecursionError):
        rows = None
    if rows is None or len(rows) != len(lines):  # bad JSON, or two values on one line
        import json  # to place the error: a good list never comes here

        rows = []
        for n, line in zip(numbers, lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ListError.at(n, f"{source}:{n}: not JSON: {e.msg} (column {e.colno})") from None
            except ValueError:  # a number of more than 4300 digits (Python's limit): no field holds one
                raise ListError.at(n, f"{source}:{n}: not an entry: a number far too long") from None
            except RecursionError:
                raise ListError.at(n, f"{source}:{n}: not an entry: nested too deeply") from None
    return _entries(rows, numbers, source)


def parse(text: str, source: str) -> PreloadList:
    """Every entry of a list; ListError at `source:line` for the first problem."""
    lines = text.split("\n")
    if not text.strip():
        raise ListError(f"{source}:1: empty file, not a preload list",
                        hint="make one with `tunectl preload collect PATHS -o LIST`")
    header = parse_header(lines[0], source)
    body = [(n, line) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    return PreloadList(parse_rows(body, source), str(header.get("created", "")))
