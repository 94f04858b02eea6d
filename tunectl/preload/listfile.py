"""A preload list on disk: read one in bounded memory (errors that say what to do) and write one atomically.

The format itself, text in and records out, is tunectl.preload.listing. A
list is read as a stream of batches of at most BATCH entries: a list of ten
million files costs the memory of one batch, not of ten million records. The
file is opened as `tunectl.system.trust` opens files: a regular file only,
never through a link, never waiting on a pipe.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat

from tunectl.errors import NotPermitted, UsageError
from tunectl.preload.listing import (
    Entry,
    ListError,
    PreloadList,
    mounts_of,
    parse_header,
    parse_lines,
    render,
    renumber,
    total_bytes,
)
from tunectl.preload.order import physical_order
from tunectl.system import trust

TYPE_CHECKING = False  # typing costs a boot-time replay's start-up
if TYPE_CHECKING:
    from tunectl.preload.columns import Columns

BATCH = 1 << 16  # entries decoded, checked and read at a time (about 40 MB of Python objects)
KEEP = 1 << 18  # a list up to this long is kept from the survey and replayed as one batch: parsed once
MAX_LINE = 16 << 20  # one entry: a path and its ranges


def _open_walked(path: str) -> tuple[int, os.stat_result]:
    """`path` opened as root may follow it (`trust.open_listed`): root's or the user's links on the way only,
    another user's link refused, never followed (a user who owns a directory on the path would swap it for a link
    to another list: root's private one), the name itself no link, a pipe or device refused unopened; and its stat."""
    try:
        fd = trust.open_listed(os.path.abspath(path))
    except trust.Untrusted as e:  # said of the path as it was given
        raise trust.Untrusted(path, e.found, e.hint, e.wrong_type) from None
    try:
        return fd, os.fstat(fd)  # the listed regular file: open_listed compared the open file with its look
    except BaseException:
        os.close(fd)
        raise


def _open(path: str, replayed: bool = True):
    """The list opened for reading; `replayed`: it will choose what this process reads (`check_replayable`)."""
    try:
        fd, st = _open_walked(path)
    except trust.Untrusted as e:
        hint = e.hint if " on its way: " in e.found else "name a list made by `tunectl preload collect` or `preload record`"
        raise ListError(e.message, hint=hint) from None
    except OSError as e:
        code = e.errno or errno.EIO
        if code in (errno.EACCES, errno.EPERM):
            raise NotPermitted(f"{path}: cannot read the preload list: {os.strerror(code)}",
                               hint="run as the user who wrote it, or as root") from None
        raise UsageError(f"{path}: cannot read the preload list: {os.strerror(code)}",
                         hint="make one with `tunectl preload collect PATHS -o LIST`") from None
    if replayed:
        try:
            check_replayable(st, path)
        except UsageError:
            os.close(fd)
            raise
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_replayable(st: os.stat_result, path: str) -> None:
    """Root replays only a list no other user can have chosen (UsageError otherwise): the list names the files a
    replay reads, and as root it reads any file into the page cache (/etc/shadow too), so a list owned by another
    user, or one others may write, is refused before any file is read. Checked on the open list's descriptor
    (`st`), at every open a replay makes of it. Another user's list is theirs to replay: the page cache is shared."""
    if trust.chosen_by_other(st) is None:
        return
    if st.st_uid != 0:
        try:
            import pwd

            name = pwd.getpwuid(st.st_uid).pw_name
            owner = f"{name} (uid {st.st_uid})"
        except (KeyError, ImportError):
            name, owner = f"#{st.st_uid}", f"uid {st.st_uid}"
        raise UsageError(f"{path}: owned by {owner}, not root: root does not replay another user's list "
                         "(the list would choose which files root reads); nothing was read",
                         hint=f"the page cache is shared: run it as its owner (e.g. `sudo -u {name} tunectl preload "
                              f"replay {path}`), or review it and `chown root {path}` it")
    raise UsageError(f"{path}: {trust.acl_said(path, trust.writable_by(st.st_mode))}: root does not replay a list "
                     "another user may write (it would choose which files root reads); nothing was read",
                     hint=f"review it, then `chmod go-w {path}`")


def _text(raw: bytes, path: str, n: int) -> str:
    if len(raw) > MAX_LINE:
        raise ListError.at(n, f"{path}:{n}: longer than {MAX_LINE} bytes, not a list entry")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ListError.at(n, f"{path}:{n}: not UTF-8 text") from None


def mounts_trusted(f) -> bool:
    """Whether the list's header "mounts" may be followed: the list (its open descriptor) is owned by root or by
    whoever replays it, and writable by no one else. Otherwise a user's list would make root stat paths it names
    (an autofs or NFS path can mount or hang a boot-time replay) and choose where the entries move."""
    return trust.chosen_by_no_other(os.fstat(f.fileno()))


def moved_devices(head: dict, path: str, trusted: bool = True) -> dict[str, str]:
    """The file systems of the list's header "mounts" that are mounted at the same place now under another
    device number (the disks were probed in another order at this boot): listed MAJ:MIN -> MAJ:MIN now.
    A mount point that is no mount now moves nothing: its files are then skipped as changed. Nothing moves
    when the list is not `trusted` (`mounts_trusted`)."""
    moved: dict[str, str] = {}
    if not trusted:
        return moved
    for device, target in mounts_of(head, path).items():
        try:
            if not os.path.ismount(target):
                continue
            st = os.stat(target)
        except OSError:
            continue
        now = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        if now != device:
            moved[device] = now
    return moved


def batches(path: str, size: int = BATCH, first: int | None = None, replayed: bool = True,
            seen: ColumnsRead | None = None) -> Iterator[tuple[str, Sequence[Entry]]]:
    """(created, entries) for every `size` entries of the list at `path` (the first batch `first` entries,
    when given: read and checked in a few ms, so a streamed replay starts its reads at once), in file
    order, on the device numbers of this boot (`moved_devices`).

    Every line is checked as it is read: a bad one stops the stream with ListError
    at path:line, so a caller that consumes the whole stream before acting acts
    on a list that is good throughout. With `first` (a streamed replay, which reads
    each batch as it comes), the entries before a bad one are yielded first, as a
    batch of their own: the replay reads every entry before the bad one and none
    after it. Lines are read and decoded a few MiB at a
    time, one call each (a boot-time replay decodes tens of thousands); a chunk with
    anything unusual in it (a long line, bad UTF-8, a blank line) goes line by line.
    `replayed` (the default): the entries will be read, so root refuses a list another user may have chosen
    (`check_replayable`); False for a reader that only shows the list. `seen`: told whether the entries came from
    the columns file beside the list, and why not (`ColumnsRead`).
    """
    with _open(path, replayed) as f:
        top = f.readline(MAX_LINE + 1)
        if not top.strip():
            raise ListError(f"{path}:1: empty file, not a preload list",
                            hint="make one with `tunectl preload collect PATHS -o LIST`")
        head = parse_header(_text(top, path, 1), path)
        created = str(head.get("created", ""))
        moved = moved_devices(head, path, mounts_trusted(f))
        cols = _columns_beside(path, os.fstat(f.fileno()), head)
        if seen is not None:
            seen.status, seen.reason = cols.status, cols.reason
        decoded, cols.columns = cols.columns, None
        if decoded is not None:
            yield from _slices(created, decoded, moved, first or size, size)
            return
        lines: list[str] = []
        numbers: list[int] = []
        want = first or size
        read = FIRST_READ if first else CHUNK  # doubled up to CHUNK: the first batch does not wait for 4 MiB
        try:
            yield from _batches(f, path, created, moved, lines, numbers, want, size, read)
        except ListError as e:
            if first is None or e.line is None:
                raise
            good, error = _before(lines, numbers, path, e)
            if good:
                yield created, renumber(good, moved)
            raise error from None


def _slices(created: str, decoded: Columns, moved: dict[str, str], want: int, size: int
            ) -> Iterator[tuple[str, Sequence[Entry]]]:
    """The columns' entries in batches as `_batches` cuts them: `want` first, then `size` each; one (empty) batch
    at least. Each batch is a `Chunk`: its entries are made only as they are taken (a streamed replay hands its
    columns to the compiled data pass as they are, and makes the entries of only the files that pass stops at)."""
    devices = [moved.get(d, d) for d in decoded.devices]
    yield created, decoded.chunk(0, want, devices)
    for start in range(want, len(decoded), size):
        yield created, decoded.chunk(start, start + size, devices)


COLUMNS_FROM = 1024  # entries: a shorter list's JSON decodes in about the time the columns' imports take
MAX_COLUMNS = 256 << 20  # bytes of a columns file: KEEP entries of long paths and many ranges fit


class ColumnsRead:
    """Whether a read of a list took its entries from the columns file beside it (`tunectl.preload.columns`) and,
    when not, why: `preload show -v`, `replay -v` and their --json say it. A plain class, as every type a
    boot-time replay loads."""

    USED, ABSENT, DECLINED = "used", "absent", "declined"

    def __init__(self, status: str = "", reason: str = "", columns: Columns | None = None) -> None:
        self.status = status  # USED, ABSENT (none made for such a list, or none there), DECLINED; "": not read
        self.reason = reason  # why not USED
        self.columns = columns  # USED: the checked columns, handed to `batches`, which makes their entries

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason}


def _columns_beside(path: str, st: os.stat_result, head: dict) -> ColumnsRead:
    """The checked columns of the file beside the list (`tunectl.preload.columns`), when it was made from this
    list (`st`, the open list's stat) and may be trusted: a regular file, not a link, owned by the list's owner
    and chosen by no other user (its entries decide what root reads). Otherwise why not, and the list is decoded
    as always. The columns are a cache, never the only copy: any reason to decline them costs time, not the replay."""
    files = head.get("files")
    if isinstance(files, int) and not COLUMNS_FROM <= files <= KEEP:
        # `write_columns` makes none for such a list: no import and no look for one at boot
        return ColumnsRead(ColumnsRead.ABSENT, f"none is made for a list of fewer than {COLUMNS_FROM} or more than "
                                               f"{KEEP} files")
    from tunectl.preload import columns

    try:
        fd, cst = _open_walked(path + columns.SUFFIX)
    except FileNotFoundError:
        return ColumnsRead(ColumnsRead.ABSENT, "none beside the list")  # the common case for another tool's list
    except trust.Untrusted as e:
        return ColumnsRead(ColumnsRead.DECLINED, e.found)
    except OSError as e:
        return ColumnsRead(ColumnsRead.DECLINED, os.strerror(e.errno or errno.EIO))
    try:
        why = _columns_distrusted(cst, st)
        if why:
            return ColumnsRead(ColumnsRead.DECLINED, why)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_COLUMNS + 1)
    except OSError as e:
        return ColumnsRead(ColumnsRead.DECLINED, os.strerror(e.errno or errno.EIO))
    finally:
        os.close(fd)
    try:
        packed = columns.checked(data, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    except columns.Declined as e:
        return ColumnsRead(ColumnsRead.DECLINED, str(e))
    if files is not None and files != len(packed):
        return ColumnsRead(ColumnsRead.DECLINED, f"holds {len(packed)} entries, the list's header says {files}")
    return ColumnsRead(ColumnsRead.USED, "", packed)


def _columns_distrusted(cst: os.stat_result, st: os.stat_result) -> str:
    """Why the columns file (`cst`) may not stand for the list (`st`): another owner, another user may have
    written it, larger than any list's columns; "" when none of these."""
    if cst.st_uid != st.st_uid:
        return f"owned by {trust.owner(cst.st_uid)}, not by the list's owner, {trust.owner(st.st_uid)}"
    why = trust.why_chosen_by_other(cst)  # its entries would choose what this process reads
    if why:
        return why
    if cst.st_size > MAX_COLUMNS:
        return f"larger than {MAX_COLUMNS >> 20} MiB, more than any list's columns"
    return ""


def write_columns(path: str, entries: Sequence[Entry]) -> bool:
    """The columns file beside the list just written at `path` (`tunectl.preload.columns`), bound to that list's
    device, inode, size and mtime; False when it was not written (a list of more than KEEP entries, which a
    replay streams in bounded memory, or of fewer than COLUMNS_FROM, whose JSON decodes in less time than
    loading the columns' modules takes; a list path that is not a regular file; a write that failed). A list
    without one replays as it always did, decoded from its JSON. When none is written, the one an earlier
    list left there (stale now: declined on read, but litter) is removed (`remove_columns`)."""
    if _written_columns(path, entries):
        return True
    remove_columns(path)
    return False


def _written_columns(path: str, entries: Sequence[Entry]) -> bool:
    """`write_columns` without the removal: whether the columns file was written."""
    from pathlib import Path

    from tunectl.preload import columns

    if not COLUMNS_FROM <= len(entries) <= KEEP:
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        data = columns.encode(entries, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        if data is None:
            return False
        trust.atomic_write(Path(path + columns.SUFFIX), data, mode=stat.S_IMODE(st.st_mode) & 0o644,
                           shared_dir=True)
    except (trust.Untrusted, OSError):
        return False  # the list itself is written and whole; only its replays' decoding is slower
    return True


def remove_columns(path: str) -> bool:
    """Remove the columns file beside the list at `path` (LIST.cols, the name the list was written under) when it is
    surely this user's and tunectl's: through a descriptor of the directory, walked as the list's own write walks
    it (`trust.atomic_write(shared_dir=True)`: no link another user owns on the way), a regular file (never a
    link, nor through one) owned by this user (`trust.remove_own`) that begins as a columns file does. Another
    user's, or anything else at that name, stays (a read declines it). Whether one was removed."""
    from pathlib import Path

    from tunectl.preload import columns

    name = os.path.basename(path) + columns.SUFFIX
    try:
        _, dir_fd = trust.open_dir(Path(path).parent, shared=True)
    except (trust.Untrusted, OSError):
        return False
    try:
        return trust.remove_own(dir_fd, name, columns.is_columns)
    finally:
        os.close(dir_fd)


def _before(lines: list[str], numbers: list[int], path: str, error: ListError) -> tuple[list[Entry], ListError]:
    """The entries of the pending lines before `error`'s line, and the first error among them (else `error`)."""
    from bisect import bisect_left

    while True:
        k = bisect_left(numbers, error.line)
        lines, numbers = lines[:k], numbers[:k]
        try:
            return parse_lines(lines, numbers, path), error
        except ListError as e:
            if e.line is None:
                raise
            error = e


def _batches(f, path: str, created: str, moved: dict[str, str], lines: list[str], numbers: list[int], want: int,
             size: int, read: int) -> Iterator[tuple[str, list[Entry]]]:
    """`batches` after the header: `lines` and `numbers` hold what is decoded and not yet yielded."""
    n = 1
    yielded = False
    tail = b""  # a line not yet ended
    while True:
        block = f.read(read)
        read = min(CHUNK, 2 * read)
        if block:
            data = tail + block
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE:
                    raise ListError.at(n + 1, f"{path}:{n + 1}: longer than {MAX_LINE} bytes, not a list entry")
                tail = data
                continue
            body, tail = data[:cut], data[cut + 1:]
        elif tail:
            body, tail = tail, b""
        else:
            break
        n = _decode(body, n, path, lines, numbers)
        while len(lines) >= want:
            yield created, renumber(parse_lines(lines[:want], numbers[:want], path), moved)
            yielded = True
            del lines[:want], numbers[:want]
            want = size
    if lines or not yielded:
        batch = renumber(parse_lines(lines, numbers, path), moved)
        del lines[:], numbers[:]
        yield created, batch


CHUNK = 4 << 20  # bytes of whole lines read and decoded at once
FIRST_READ = 64 << 10  # a streamed list's first read (about 400 entries of /usr/share), doubled up to CHUNK


def _decode(body: bytes, n: int, path: str, lines: list[str], numbers: list[int]) -> int:
    """The non-blank lines of `body` (whole lines n+1, n+2, ..., the last without its newline) onto `lines`,
    their numbers onto `numbers`; returns the number of the last line."""
    raw = None  # split into lines only where a line may be too long, or something is unusual
    if len(body) > MAX_LINE:
        raw = body.split(b"\n")
    if raw is None or max(map(len, raw)) <= MAX_LINE:
        try:
            text = body.decode("utf-8")  # UTF-8 never puts a newline byte inside a character: lines split alike
        except UnicodeDecodeError:
            text = None
        found = text.split("\n") if text is not None else []
        if found and all(map(str.startswith, found, repeat("["))):  # each line an entry, no blank line
            lines += found  # nothing unusual: the common case
            numbers += range(n + 1, n + 1 + len(found))
            return n + len(found)
    if raw is None:
        raw = body.split(b"\n")
    for k, one in enumerate(raw, start=n + 1):  # line by line: the bad one is named, blank ones left out
        line = _text(one, path, k)
        if line.strip():
            lines.append(line)
            numbers.append(k)
    return n + len(raw)


class Survey:
    """What a list asks for, found in one streaming pass before anything is read: files and bytes.

    A plain class, as every type a boot-time replay loads: importing dataclasses costs it several ms.
    """

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0
        self.entries: list[Entry] | None = []  # kept while the list has at most `keep` entries


def survey(path: str, size: int = BATCH, keep: int = KEEP, seen: ColumnsRead | None = None) -> Survey:
    """The list at `path` read once through, every entry checked (`tally`); `seen`: as for `batches`."""
    return tally((entries for _, entries in batches(path, size, seen=seen)), keep)


def tally(parts: Iterable[Sequence[Entry]], keep: int = KEEP) -> Survey:
    """The files and bytes of a list's checked batches, all of them, and the entries while there are at most
    `keep` (a replay then reads them as one batch, decoded once)."""
    found = Survey()
    for entries in parts:
        found.files += len(entries)
        found.bytes += total_bytes(entries)
        if found.entries is not None and found.files <= keep:
            found.entries.extend(entries)
        else:
            found.entries = None
    return found


def reread(path: str, found: Survey, size: int = BATCH) -> Iterator[Sequence[Entry]]:
    """The batches of a list `survey` did not keep, read again: each is counted first, and entries that add up
    to more than the survey found stop the stream (ListError) before that batch is read. Whoever may replace
    the list (its owner, or the owner of its directory) could otherwise swap a larger one in between, past
    the cap the survey was checked against."""
    from tunectl.units import format_bytes

    files = total = 0
    for _, entries in batches(path, size):
        files += len(entries)
        total += total_bytes(entries)
        if files > found.files or total > found.bytes:
            raise ListError(f"{path}: changed while it was replayed: read again, it holds more than the "
                            f"{found.files} files, {format_bytes(found.bytes)} it held when it was checked; "
                            "the rest of it was not read",
                            hint="replace a list with a rename of a complete file, never while it is replayed")
        yield entries


def read_list(path: str, seen: ColumnsRead | None = None) -> PreloadList:
    """The whole list at once, to show it (`preload show` and tests; a replay streams it with `batches`);
    `seen`: as for `batches`."""
    entries: list[Entry] = []
    made = ""
    for made, batch in batches(path, replayed=False, seen=seen):  # noqa: B007 (every batch carries the header's date)
        entries.extend(batch)
    return PreloadList(entries, made)


def header(path: str, replayed: bool = True) -> dict:
    """The list's header line alone, checked (the metadata ranges and the order travel in it); the metadata
    ranges on this boot's device numbers, as `batches` gives the entries, and "moved": what was renumbered.
    `replayed`: as for `batches` (root refuses another user's list before anything is read)."""
    with _open(path, replayed) as f:
        first = f.readline(MAX_LINE + 1)
        trusted = mounts_trusted(f)
    if not first.strip():
        raise ListError(f"{path}:1: empty file, not a preload list",
                        hint="make one with `tunectl preload collect PATHS -o LIST`")
    head = parse_header(_text(first, path, 1), path)
    moved = moved_devices(head, path, trusted)
    head["mounts_ignored"] = not trusted and bool(head.get("mounts"))
    head["metadata_dropped"] = []
    if moved and isinstance(head.get("metadata"), dict):
        head["metadata"], head["metadata_dropped"] = moved_metadata(head["metadata"], moved)
    head["moved"] = moved
    # A metadata range is read from the device as it is, not checked like a file: a list someone else may have
    # written would choose which bytes of a disk are read into memory (root refuses such a list outright).
    head["metadata_ignored"] = not trusted and bool(head.get("metadata"))
    if head["metadata_ignored"]:
        head["metadata"] = {}
    return head


def moved_metadata(metadata: dict, moved: Mapping[str, str]) -> tuple[dict, list[str]]:
    """The header's metadata ranges on this boot's numbers, and the numbers now whose ranges were dropped.

    Two listed devices that map to one number now (a file system moved onto the number another device is listed
    under, or two mount points over one another) leave it unknown whose ranges that number's device holds. A metadata
    range is read as it is, not checked like a file, so the ranges of such a number are all dropped: a replay must
    never read one device's ranges from another."""
    listed: dict[str, int] = {}
    for device in metadata:
        now = moved.get(device, device)
        listed[now] = listed.get(now, 0) + 1
    dropped = sorted(now for now, n in listed.items() if n > 1)
    return {now: r for d, r in metadata.items() if (now := moved.get(d, d)) not in dropped}, dropped


def write_list(path: str, entries: Sequence[Entry], metadata: Mapping[str, Sequence[tuple[int, int]]] | None = None,
               time_order: bool = False, mounts: Mapping[str, str] | None = None,
               placed: Mapping[str, str] | None = None) -> None:
    """The list, atomically. Entries in physical order (a replay's sort is then one pass over sorted keys),
    unless `time_order`: a record keeps the order the files were opened in, for time bins on rotational disks.
    `mounts`: where each device's file system is mounted (a later boot finds it there if its number moved);
    `placed`: the devices whose offsets came from a squashfs inode table."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    from pathlib import Path  # writing only: a replay does not import pathlib

    target = Path(path)
    try:
        ordered = list(entries if time_order else physical_order(entries))
        text = render(ordered, created, metadata, time_order, mounts, placed)
        trust.atomic_write(target, text.encode(), shared_dir=True)
    except trust.Untrusted as e:
        raise UsageError(f"{path}: cannot write the preload list: {e.message}", hint=e.hint) from None
    except OSError as e:
        code = e.errno or errno.EIO
        cls = NotPermitted if code in (errno.EACCES, errno.EPERM, errno.EROFS) else UsageError
        raise cls(f"{path}: cannot write the preload list: {os.strerror(code)}") from None
    write_columns(path, ordered)
