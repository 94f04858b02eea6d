"""A list's entries in a compact pre-decoded form, kept beside the list (pure: entries in, bytes out, and back).

A boot-time replay decodes every line of its list: json's scanner and a check per row cost a warm /usr/share
list (53,625 files) about 0.15 s of CPU, a third of what the replay spends beyond WILLNEED's own loop (#30).
The same entries as packed columns (one array of machine integers per numeric field, the paths one string)
load in a fraction of that: C-level conversions, and checks a column at a time (bounds, shapes), never a
Python frame per row. The JSON list stays what a person, `show` and every other reader read: this form is a
cache of its entries, written beside it (LIST.cols) by `collect` and `record`, used only while it names the
list it was made from (device, inode, size, mtime_ns) and declined otherwise (the list is then decoded as
always). Nothing in it is executed or unpickled, and a checksum covers it: a damaged, truncated or crafted
file is declined, never trusted. Every column is checked before the first entry is handed out (`checked`); a
replay then takes the columns a chunk at a time (`Chunk`), and its compiled data pass reads them as they are: an
entry's tuple is made only when it is taken from the chunk (a file that pass leaves to the Python loop, the inode
pass's sample, a time bin), never for the clean file.

Layout (native byte order, named in MAGIC): MAGIC, then struct HEAD (version, the list's dev, ino, size,
mtime_ns, the entry count, the CRC-32 of everything after it), then SECTIONS, each a u64 byte length and its bytes:
paths (file names as os.fsencode gives them, NUL-separated), devices (the distinct MAJ:MIN, NUL-separated),
device (u32 index into devices per entry), inode, size (u64), mtime_ns (i64), physical (i64, -1: unknown),
count (u32 ranges per entry), offset, length (u64, every entry's ranges in order).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, compress, repeat

from tunectl.preload.listing import Entry, _is_device

VERSION = 1
SUFFIX = ".cols"
MAGIC = b"tunectl-preload-columns " + sys.byteorder.encode() + b"\n"
_MAGIC_ANY = b"tunectl-preload-columns "  # a columns file of either byte order begins so
HEAD = struct.Struct("=IQQQqQI")  # version, dev, ino, size, mtime_ns, entries, CRC-32 of all after it
LENGTH = struct.Struct("=Q")
SECTIONS = (("paths", None), ("devices", None), ("device", "I"), ("inode", "Q"), ("size", "Q"), ("mtime_ns", "q"),
            ("physical", "q"), ("count", "I"), ("offset", "Q"), ("length", "Q"))
_SIZES = {"I": 4, "Q": 8, "q": 8}


class Declined(Exception):
    """The columns cannot stand for the list (made from another list, another version, damaged): why."""


def _packed(code: str, values: Sequence[int]) -> bytes:
    if array(code).itemsize != _SIZES[code]:
        raise OverflowError(f"array {code!r} is not {_SIZES[code]} bytes here")
    return array(code, values).tobytes()


def encode(entries: Sequence[Entry], key: tuple[int, int, int, int]) -> bytes | None:
    """The columns of `entries`, bound to the list whose (dev, ino, size, mtime_ns) is `key`; None when they
    cannot hold the entries exactly (a number past 64 bits, a name that does not come back as it was)."""
    paths = [e.path for e in entries]
    names = [os.fsencode(p) for p in paths]
    if not all(map(bytes.isascii, names)) and [os.fsdecode(b) for b in names] != paths:
        return None  # e.g. "\udcc3\udca9", which names the file "é" names, but is not equal to it
    if any(b"\0" in b for b in names) or any(e.physical is not None and e.physical < 0 for e in entries):
        return None  # not an entry a list's reader takes: the JSON says so, at its line
    devices = sorted({e.device for e in entries})
    index = {d: i for i, d in enumerate(devices)}
    flat = [r for e in entries for r in e.ranges]
    try:
        body = [b"\0".join(names), "\0".join(devices).encode("ascii"),
                _packed("I", [index[e.device] for e in entries]), _packed("Q", [e.inode for e in entries]),
                _packed("Q", [e.size for e in entries]), _packed("q", [e.mtime_ns for e in entries]),
                _packed("q", [-1 if e.physical is None else e.physical for e in entries]),
                _packed("I", [len(e.ranges) for e in entries]), _packed("Q", [r[0] for r in flat]),
                _packed("Q", [r[1] for r in flat])]
        rest = b"".join(LENGTH.pack(len(b)) + b for b in body)
        head = HEAD.pack(VERSION, *key, len(entries), zlib.crc32(rest))
    except (OverflowError, struct.error, UnicodeEncodeError, TypeError):
        return None
    return MAGIC + head + rest


def is_columns(fd: int) -> bool:
    """Whether the file open at `fd` begins as a columns file does (of any byte order): one tunectl wrote."""
    return os.pread(fd, len(_MAGIC_ANY), 0) == _MAGIC_ANY


def decode(data: bytes, key: tuple[int, int, int, int]) -> list[Entry]:
    """The entries `encode` wrote, every column checked as `listing` checks a row; Declined otherwise."""
    return checked(data, key).entries()


def checked(data: bytes, key: tuple[int, int, int, int]) -> Columns:
    """The columns `encode` wrote, every one checked as `listing` checks a row (Declined otherwise), their entries
    not made yet: `Columns.entries` makes those of a slice, `Columns.chunk` hands one out to make as taken."""
    if not data.startswith(MAGIC):
        raise Declined("not a tunectl columns file of this machine's byte order")
    at = len(MAGIC)
    try:
        version, dev, ino, size, mtime_ns, n, crc = HEAD.unpack_from(data, at)
    except struct.error:
        raise Declined("truncated") from None
    if version != VERSION:
        raise Declined(f"version {version}, not {VERSION}")
    if (dev, ino, size, mtime_ns) != tuple(key):
        raise Declined("made from another list (or this one before it changed)")
    at += HEAD.size
    view = memoryview(data)
    if zlib.crc32(view[at:]) != crc:
        raise Declined("damaged (its checksum differs)")
    found = {}
    for name, code in SECTIONS:
        try:
            (length,) = LENGTH.unpack_from(data, at)
        except struct.error:
            raise Declined("truncated") from None
        at += LENGTH.size
        if at + length > len(data):
            raise Declined("truncated")
        part = view[at:at + length]
        at += length
        if code is None:
            found[name] = bytes(part)
            continue
        column = array(code)
        if column.itemsize != _SIZES[code] or length % column.itemsize:
            raise Declined(f"{name}: not whole numbers")
        column.frombytes(part)
        found[name] = column  # made Python ints only as entries are made (`Columns.entries`, `entry`)
    if at != len(data):
        raise Declined("more after its last column")
    return _columns(found, n)


class Columns:
    """A columns file's entries, checked, made a slice at a time (`entries`): a streamed replay makes a chunk's
    entries as it reads that chunk, so its first read waits for the checks of the whole file, not for every
    entry's tuples (#30: about half the decode, paid before a boot-time replay's first read), and the making of
    the rest runs while the disk reads what was sent. A plain class, as every type a boot-time replay loads."""

    def __init__(self, paths: list[str], devices: list[str], index: array, inodes: array, sizes: array,
                 mtimes: array, physical: array, counts: array, offsets: array, lengths: array) -> None:
        self.paths, self.inodes, self.sizes, self.mtimes, self.physical = paths, inodes, sizes, mtimes, physical
        self.devices, self.index = devices, index
        self.counts, self.offsets, self.lengths = counts, offsets, lengths
        # where each entry's pairs begin; None: one pair each (a collected list, whole files), entry i's is pair i
        self.firsts = None if counts.count(1) == len(paths) else [0, *accumulate(counts)]

    def __len__(self) -> int:
        return len(self.paths)

    def entries(self, start: int = 0, stop: int | None = None, devices: list[str] | None = None) -> list[Entry]:
        """The entries from `start` to `stop` (the end when None), as list slicing cuts them; `devices`: the
        devices' names now (renumbered, in the columns' order), the columns' own when None."""
        start, stop, _ = slice(start, stop).indices(len(self.paths))
        stop = max(start, stop)
        n = stop - start
        if self.firsts is None:
            ranges: Iterable[tuple] = zip(zip(self.offsets[start:stop].tolist(), self.lengths[start:stop].tolist()))
        else:
            first, last = self.firsts[start], self.firsts[stop]
            ranges = _ranges(self.counts[start:stop].tolist(), self.offsets[first:last].tolist(),
                             self.lengths[first:last].tolist(), n)
        return list(map(tuple.__new__, repeat(Entry), zip(self.paths[start:stop], self.device_names(start, stop, devices),
                                                          self.inodes[start:stop].tolist(),
                                                          self.sizes[start:stop].tolist(),
                                                          self.mtimes[start:stop].tolist(), ranges,
                                                          self.offsets_of(start, stop))))

    def entry(self, i: int, devices: list[str] | None = None) -> Entry:
        """Entry `i` alone (0 <= i < len), as `entries` makes it."""
        devices = self.devices if devices is None else devices
        first, last = (i, i + 1) if self.firsts is None else (self.firsts[i], self.firsts[i + 1])
        physical = self.physical[i]
        return tuple.__new__(Entry, (self.paths[i], devices[self.index[i]], self.inodes[i], self.sizes[i],
                                     self.mtimes[i], tuple(zip(self.offsets[first:last], self.lengths[first:last])),
                                     None if physical == -1 else physical))

    def device_names(self, start: int, stop: int, devices: list[str] | None = None) -> Iterable[str]:
        """The device of each entry from `start` to `stop` (`devices`: as `entries`)."""
        devices = self.devices if devices is None else devices
        return repeat(devices[0], stop - start) if len(devices) == 1 else map(devices.__getitem__,
                                                                              self.index[start:stop])

    def offsets_of(self, start: int, stop: int) -> list[int | None]:
        """The physical offset of each entry from `start` to `stop`, None where unknown (as the list says null)."""
        physical: list[int | None] = list(self.physical[start:stop].tolist())
        if -1 in physical:
            at = -1
            for _ in range(physical.count(-1)):
                at = physical.index(-1, at + 1)
                physical[at] = None
        return physical

    def bytes_of(self, start: int, stop: int) -> int:
        """What the entries from `start` to `stop` read: the sum of their ranges' lengths (`Entry.bytes`)."""
        if self.firsts is None:
            return sum(self.lengths[start:stop])
        return sum(self.lengths[self.firsts[start]:self.firsts[stop]])

    def chunk(self, start: int, stop: int, devices: list[str] | None = None) -> Chunk:
        """The entries from `start` to `stop` (within the columns) as a Chunk, none of them made yet."""
        return Chunk(self, start, max(start, min(stop, len(self.paths))), self.devices if devices is None else devices)


class Chunk(Sequence):
    """Entries `start` to `stop` of checked columns, as a sequence of entries, each Entry made only when it is
    taken: a streamed replay hands a chunk's columns to the compiled data pass as they are (`pass_columns`) and
    makes the tuples of only the files that pass leaves to the Python loop (#30: making every entry's tuples, and
    the pass reading them back, cost a /usr/share replay of 53,625 files ~0.1-0.15 s of CPU). What a replay asks
    of every entry of a chunk (`listing.column`, `listing.total_bytes`) is answered from the columns; `devices`: the
    devices' names now (renumbered), in the columns' order. Iterated or sliced, it makes the entries as
    `Columns.entries` does."""

    def __init__(self, columns: Columns, start: int, stop: int, devices: list[str]) -> None:
        self._columns, self._start, self._stop, self._devices = columns, start, stop, devices

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, i):  # noqa: ANN001, ANN204 (an int or a slice, as a list takes)
        n = self._stop - self._start
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                return self[:][i]
            return self._columns.entries(self._start + start, self._start + max(start, stop), self._devices)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("chunk index out of range")
        return self._columns.entry(self._start + i, self._devices)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self[:])

    def __eq__(self, other: object) -> bool:
        return self[:] == (other[:] if isinstance(other, Chunk) else other)

    __hash__ = None  # type: ignore[assignment]  (a list's equality, a list's hash)

    def column(self, field: str) -> list:
        """Every entry's `field` (one of Entry's), as the entries would give it: from the columns, but the ranges."""
        columns, start, stop = self._columns, self._start, self._stop
        if field == "path":
            return columns.paths[start:stop]
        if field == "device":
            return list(columns.device_names(start, stop, self._devices))
        if field == "physical":
            return columns.offsets_of(start, stop)
        numbers = {"inode": columns.inodes, "size": columns.sizes, "mtime_ns": columns.mtimes}.get(field)
        if numbers is None:
            return [e[Entry._fields.index(field)] for e in self[:]]
        return numbers[start:stop].tolist()

    def total_bytes(self) -> int:
        return self._columns.bytes_of(self._start, self._stop)

    def pass_columns(self) -> tuple:
        """What the compiled data pass reads of these entries (`replay.pass_columns`), from the columns as they
        are: no entry made."""
        c, start, stop = self._columns, self._start, self._stop
        first, last = (start, stop) if c.firsts is None else (c.firsts[start], c.firsts[stop])
        firsts = None if c.firsts is None else array("Q", c.firsts[start:stop]).tobytes()
        return (c.paths[start:stop], self._devices, c.index[start:stop].tobytes(), c.inodes[start:stop].tobytes(),
                c.sizes[start:stop].tobytes(), c.mtimes[start:stop].tobytes(), c.counts[start:stop].tobytes(), firsts,
                first, c.offsets[first:last].tobytes(), c.lengths[first:last].tobytes())


def _columns(found: dict, n: int) -> Columns:
    """The decoded columns, checked column by column; Declined at the first problem."""
    text = str(found["paths"], "utf-8", "surrogateescape")  # os.fsdecode, without a call per name
    paths = text.split("\0") if n else []
    if len(paths) != n or n and (not text.startswith("/") or text.count("\0/") != n - 1):
        raise Declined("paths: expected absolute names, one per entry")
    try:
        devices = str(found["devices"], "ascii").split("\0") if found["devices"] else []
    except UnicodeDecodeError:
        raise Declined("devices: not MAJ:MIN") from None
    if not all(map(_is_device, devices)):
        raise Declined("devices: not MAJ:MIN")
    index, inodes, sizes, mtimes, physical, counts, offsets, lengths = (
        found[k] for k in ("device", "inode", "size", "mtime_ns", "physical", "count", "offset", "length"))
    if any(len(c) != n for c in (index, inodes, sizes, mtimes, physical, counts)):
        raise Declined("columns of different lengths")
    if max(index, default=0) >= len(devices):
        raise Declined("device: past the devices listed")
    if sum(counts) != len(offsets) or len(lengths) != len(offsets) or min(lengths, default=1) < 1:
        raise Declined("ranges: expected (offset, length) pairs, each length at least 1")
    if min(physical, default=0) < -1:
        raise Declined("physical: expected byte offsets")
    return Columns(paths, devices, index, inodes, sizes, mtimes, physical, counts, offsets, lengths)


def _ranges(counts: list[int], offsets: list[int], lengths: list[int], n: int) -> list[tuple]:
    """Each of `n` entries' ranges, ((offset, length), ...), from their `counts` and their pairs (checked: the
    counts add up to the pairs); a Python step only where an entry has not one range."""
    pairs = list(zip(offsets, lengths))
    ranges: list[tuple] = []
    done = at = 0  # entries and pairs taken
    for i in compress(range(n), map((1).__ne__, counts)):  # a Python step only where an entry has not one range
        ranges += zip(pairs[at:at + i - done])  # the one-range entries before it: ((offset, length),) each
        at += i - done
        ranges.append(tuple(pairs[at:at + counts[i]]))
        at += counts[i]
        done = i + 1
    ranges += zip(pairs[at:])
    return ranges
