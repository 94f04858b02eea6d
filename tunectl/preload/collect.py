"""`preload collect`: describe the regular files of some trees, whole or only their cached pages, into a list.

walk, entry_for and describe_file are shared with `record`, which lists the files a command opens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as stat_
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from tunectl.errors import ExitCode, OutOfDescriptors, UsageError
from tunectl.preload import metadata, order
from tunectl.preload.listfile import write_list
from tunectl.preload.listing import Entry
from tunectl.preload.skip import UNREADABLE, VANISHED, Skip, failed
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.system import pagecache, trust
from tunectl.system.trust import Untrusted, open_listed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.system.roots import Roots


@record
class CollectReport(Report):
    list_path: str
    entries: list[Entry]
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verbose: int = 0
    metadata: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # MAJ:MIN -> device byte ranges
    mounts: dict[str, str] = field(default_factory=dict)  # MAJ:MIN -> mount point, for a boot that renumbers
    placed: dict[str, str] = field(default_factory=dict)  # MAJ:MIN -> "squashfs": offsets from the inode table

    @property
    def exit_code(self) -> ExitCode:
        """As replay's: vanished files are expected (exit 0); unreadable ones are a partial failure (3): the list
        was written without them."""
        return ExitCode.PARTIAL if any(s.status == UNREADABLE for s in self.skipped) else ExitCode.OK

    def print_text(self, out) -> None:
        from tunectl.preload.text import collected, print_report

        print_report(self, out, collected)

    def to_json(self) -> dict:
        return {"list": self.list_path, "files": len(self.entries), "bytes": sum(e.bytes for e in self.entries),
                "physical": sum(1 for e in self.entries if e.physical is not None),
                "order": order.order_name(self.entries) if self.entries else None,
                "skipped": [s.to_json() for s in self.skipped], "notes": self.notes,
                "metadata": {dev: {"ranges": len(r), "bytes": sum(n for _, n in r)}
                             for dev, r in sorted(self.metadata.items())}}

    def place(self, roots: Roots | None) -> None:
        """Files on squashfs (no FIEMAP) placed by their image's inode table (root reads the image);
        nothing without roots."""
        if roots is None:
            return
        from tunectl.preload import places
        from tunectl.system.sysfs import Sysfs

        self.entries, placed, notes = places.place(self.entries, Sysfs(roots.sys), roots.dev, roots.proc)
        self.placed.update(placed)
        self.notes.extend(notes)

    def record_metadata(self, roots: Roots | None) -> None:
        """The metadata pass's ranges for the file systems the entries are on (ext4: the device's cached
        pages, read by root only); nothing without roots (a caller that does not name the machine)."""
        if roots is None:
            return
        from tunectl.system.sysfs import Sysfs

        devices = {e.device for e in self.entries}
        found, notes = metadata.collect(devices, Sysfs(roots.sys), roots.dev, roots.proc)
        self.metadata.update(found)
        self.mounts.update(metadata.mount_points(devices, roots.proc))
        self.notes.extend(notes)


class Found(NamedTuple):
    """A regular file the walk found: `path` as the list records it, and where to open it: the name `name` in the
    directory the walk holds open as `dir_fd` (valid until the walk goes on), or `dir_fd` -1 for a file named
    on the command line (opened by `path`)."""
    path: str
    dir_fd: int = -1
    name: str = ""


def walk(paths: Iterable[str]) -> Iterator[Found | Skip]:
    """Regular files named, and those below the directories named, in directory order; first a skip for each path
    named that is not listed (`_judge`), then in its place a skip for a directory named that is gone or another
    one (a link, another directory: another user's swap) when the walk opens it.

    Each path named is judged once (`trust.walk`: followed only through links root or the user owns). A directory
    is then opened by the path the judgement landed on, following no link and compared with its look
    (`trust.open_landed`); below it the walk goes by descriptor: each subdirectory is opened relative to its
    parent's descriptor (O_NOFOLLOW, its device and inode compared with the look), so a directory another user
    swaps for a link, or for another directory, while the walk is in the tree is passed over, never listed
    through. Inside trees only d_type decides (no stat of files, no open): links are not followed and device
    nodes, FIFOs and sockets are never opened (opening a tape rewinds it); the walk crosses into file systems
    mounted below, as it always has. Paths are the directory named (made absolute) and the names below it. A
    file named through root's or the user's link is listed by the file it resolves to, which replay (opening
    nothing through a link) can read. Out of descriptors (`ulimit -n`): OutOfDescriptors, never a tree passed
    over in silence.
    """
    judged = [(top, _judge(top)) for top in paths]  # every skip of a path named comes first, as it always has
    for _, landed in judged:
        if isinstance(landed, Skip):
            yield landed
    for top, landed in judged:
        if isinstance(landed, Skip):
            continue
        assert landed.st is not None
        if not stat_.S_ISDIR(landed.st.st_mode):
            yield Found(landed.path)
            continue
        base = os.path.abspath(top)
        try:
            fd = trust.open_landed(landed)
        except OSError as e:
            _stop_if_out_of_descriptors(base, e)
            yield failed(top, e.errno or errno.EIO)  # gone since the judgement, or a permission: said, as for a
            continue  # path named that is not there
        if fd is None:  # changed since the judgement (a link or another directory put there): passed over, said
            yield Skip(top, UNREADABLE, "changed while collect looked at it (a link or another directory put in its "
                                        "place): not listed")
            continue
        yield from _below(fd, base if base.endswith("/") else base + "/")


def _judge(path: str) -> trust.Landed | Skip:
    """Where the path named lands (a directory or a regular file, reached through no other user's link), or the
    skip that says why nothing is listed for it (a FIFO, a device, a link to nothing, another user's link on the
    way): a line the report shows, not a silently empty list."""
    try:
        landed = trust.walk(os.path.abspath(path))
    except Untrusted as e:
        return Skip(path, UNREADABLE, e.found)
    except OSError as e:
        _stop_if_out_of_descriptors(path, e)
        return failed(path, e.errno or errno.EIO)
    assert landed.st is not None
    if not (stat_.S_ISDIR(landed.st.st_mode) or stat_.S_ISREG(landed.st.st_mode)):
        return Skip(path, UNREADABLE, f"{trust.irregular(landed.st.st_mode)}: collect lists regular "
                                      "files")
    return landed


def _stop_if_out_of_descriptors(where: str, e: OSError) -> None:
    """Out of descriptors is the process's limit, not `where`'s fault: the walk stops with an error that says so
    (the caller writes no list), never an unreadable line or a tree passed over in silence."""
    if e.errno in trust.NO_DESCRIPTORS:
        raise OutOfDescriptors.at(where, e.errno == errno.ENFILE, "stopped part way, no list written",
                                  "run it again") from None


def _below(top_fd: int, top_prefix: str) -> Iterator[Found]:
    """The regular files below the directory open as `top_fd` (closed here), depth first in directory order;
    one descriptor held per level."""
    stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = []
    fd, prefix = top_fd, top_prefix
    try:
        while fd >= 0:
            subdirs = []
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        if entry.is_file(follow_symlinks=False):
                            yield Found(prefix + entry.name, fd, entry.name)
                        elif entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(OSError):  # gone since the listing: passed over
                                subdirs.append((entry.name, entry.stat(follow_symlinks=False)))  # the look
            except OSError as e:  # unreadable: passed over, but for want of a descriptor
                _stop_if_out_of_descriptors(prefix.rstrip("/") or "/", e)
            stack.append((fd, prefix, iter(subdirs)))
            fd = -1
            while stack and fd < 0:  # the next subdirectory, depth first: of this one, else of the one above
                parent, parent_prefix, todo = stack[-1]
                for name, look in todo:
                    fd = _open_subdir(parent, name, look, parent_prefix)
                    if fd >= 0:
                        prefix = parent_prefix + name + "/"
                        break
                else:
                    stack.pop()
                    os.close(parent)
    finally:  # a walk left part way (the caller stopped) closes what it holds
        for held in [fd, *(held for held, _, _ in stack)]:
            if held >= 0:
                os.close(held)


def _open_subdir(parent: int, name: str, look: os.stat_result, parent_prefix: str) -> int:
    """The directory `name` in `parent` opened without following a link and compared with the walk's look at it
    (`trust.open_as_looked`); -1 when it is no longer that directory (swapped for a link or another directory:
    passed over, as an unreadable directory is) or cannot be opened, but for want of a descriptor."""
    try:
        fd = trust.open_as_looked(parent, name, look, trust.DIR_READ)
    except OSError as e:
        _stop_if_out_of_descriptors(parent_prefix + name, e)
        return -1
    return -1 if fd is None else fd


def open_found(found: Found) -> int:
    """A descriptor on what the walk found: by name in the directory the walk holds (O_NOFOLLOW, non-blocking:
    d_type was the look, and the caller's fstat refuses anything but a regular file before any read; a mount on
    the name is looked at through first, `trust.open_in_tree`), or a file named on the command line by
    `open_listed` (its look first). Raises Untrusted or OSError."""
    if found.dir_fd < 0:
        return open_listed(os.path.abspath(found.path))  # resolved once, never through another user's link
    return trust.open_in_tree(found.dir_fd, found.name, found.path)


def open_or_skip(found: Found) -> tuple[int, Skip | None]:
    """A descriptor on what the walk found (`open_found`: never through another user's link, never a device), or
    -1 and why not: a Skip (unreadable, vanished), None for what is not listed (in a tree: a link, a pipe, a
    device, or swapped for one since the walk saw a file; a path named says why, as `_judge` does). Out of
    descriptors stops the walk (OutOfDescriptors)."""
    try:
        return open_found(found), None
    except Untrusted as e:
        return -1, None if e.wrong_type and found.dir_fd >= 0 else Skip(found.path, UNREADABLE, e.found)
    except OSError as e:
        _stop_if_out_of_descriptors(found.path, e)
        if e.errno == errno.ELOOP:
            return -1, None
        status = VANISHED if e.errno == errno.ENOENT else UNREADABLE
        return -1, Skip(found.path, status, os.strerror(e.errno or errno.EIO))


def entry_for(path: str, fd: int, st: os.stat_result, ranges: tuple[tuple[int, int], ...]) -> Entry:
    """The list entry for an open file: its identity, the ranges to bring in, and where the first one lies on disk."""
    physical = pagecache.first_physical(fd, ranges[0][0]) if ranges else None
    return Entry(path, pagecache.device_of(st), st.st_ino, st.st_size,
                 st.st_mtime_ns, ranges, physical)


def describe_file(path: str | Found, resident: bool = False) -> tuple[Entry | None, Skip | None]:
    """One list entry for a file (a path, or what the walk found): whole, or with `resident` only its cached pages
    (None when none are)."""
    found = path if isinstance(path, Found) else Found(os.path.abspath(path))
    fd, skip = open_or_skip(found)
    if fd < 0:
        return None, skip
    try:
        st = os.fstat(fd)
        if not stat_.S_ISREG(st.st_mode):
            return None, None
        if resident:
            if not pagecache.residency_observable(found.path, st):
                return None, Skip(found.path, UNREADABLE, "residency not observable: mincore reports every page of "
                                                          "a file you neither own nor may write as resident (run as "
                                                          "root)")
            ranges = tuple(order.pages_to_ranges(pagecache.residency(fd, st.st_size), st.st_size))
            if not ranges:
                return None, None
        else:
            ranges = ((0, st.st_size),) if st.st_size else ()
        return entry_for(found.path, fd, st, ranges), None
    except OSError as e:
        return None, Skip(found.path, UNREADABLE, os.strerror(e.errno or errno.EIO))
    finally:
        os.close(fd)


def collect(paths: Sequence[str], list_path: str, resident: bool = False, roots: Roots | None = None) -> CollectReport:
    """The files below `paths` (whole, or with `resident` only their cached pages) and, with `roots`,
    the metadata pass: the device pages holding their inodes, directories and extent blocks (ext4)."""
    for p in paths:
        if not os.path.lexists(p):
            raise UsageError(f"{p}: no such file or directory", hint="collect takes existing files and directories")
    report = CollectReport(list_path, [])
    seen: set[tuple[str, int]] = set()
    for found in walk(paths):
        if isinstance(found, Skip):  # a path named that is not listed
            report.skipped.append(found)
            continue
        entry, skip = describe_file(found, resident)
        if skip:
            report.skipped.append(skip)
        if entry and (entry.device, entry.inode) not in seen:  # hard links: read once
            seen.add((entry.device, entry.inode))
            report.entries.append(entry)
    report.record_metadata(roots)  # after the walk: the metadata it read (or boot read) is cached now
    report.place(roots)  # after the metadata: reading a squashfs image's tables caches its device pages
    write_list(list_path, report.entries, report.metadata, mounts=report.mounts, placed=report.placed)
    return report


