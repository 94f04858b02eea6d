"""The fstab file as tunectl replaces it: the original kept for good, a numbered backup per change,
no lost edit of another writer, no temp file left behind.

- ``FSTAB.tunectl.orig``: the file as it was before tunectl first changed it;
  written once, never overwritten (``mounts rollback`` restores from it).
- ``FSTAB.tunectl.bak.N``: the file as it was before each change (N counts up).
- A change is written to a temp file ``.FSTAB.tunectl-tmp.<12 hex digits>`` beside it and
  renamed over it only if the file still holds the bytes the change was computed
  from: an edit by another writer meanwhile stops the fix, nothing is lost. The
  check runs right before the rename; a writer that does not take tunectl's lock
  can still slip into the instant between the two (documented in tunectl(8)).
- Temp files of a killed run are removed by the next run, under the lock.
- The original and the backups are tunectl's own files: one that is a symbolic
  link or not a regular file is never read or written through; the command
  stops and says so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from tunectl.errors import ExitCode, NotPermitted, TunectlError, UsageError
from tunectl.system.trust import (
    OthersMayWrite,
    TooLarge,
    Untrusted,
    atomic_write,
    check_dir,
    open_dir,
    read_regular,
    read_regular_stat,
    resolve_own_links,
    sweep_temps,
)

ORIG_SUFFIX = ".tunectl.orig"
BACKUP_SUFFIX = ".tunectl.bak."
TMP_TAG = ".tunectl-tmp."
MAX_FSTAB_BYTES = 64 << 20
TYPE_CHECKING = False  # typing costs start-up every command pays; the name is for checkers only
if TYPE_CHECKING:
    from typing import TypeVar

    Read = TypeVar("Read")  # what _whole's `read` returns: the bytes, or the bytes and their fstat


class NotReplaced(TunectlError):
    """The fstab was left as it is: another writer changed it, or a file tunectl keeps beside it is not its own."""

    exit_code = ExitCode.PARTIAL


def resolve(path: str | os.PathLike) -> Path:
    """The fstab `path` names, through links root (or the user) owns only: another user's link is refused,
    so its target is never rewritten nor are files created beside it."""
    try:
        return resolve_own_links(path)
    except Untrusted as e:
        raise UsageError(f"{e.message}: not followed", hint=e.hint, where=str(path)) from None
    except OSError as e:
        raise TunectlError(f"cannot use {path}: {e.strerror or e}", where=str(path)) from None


def read_current(real: Path) -> bytes | None:
    """The fstab's bytes now (None when absent), read without blocking: a named pipe there is refused."""
    return _read_current(real)[0]


def _read_current(real: Path) -> tuple[bytes | None, os.stat_result | None]:
    """`read_current`, and the fstat of the file read (None when absent)."""
    try:
        # `real` came from resolve(): through no link now
        return _whole(real, lambda: read_regular_stat(real, MAX_FSTAB_BYTES, resolved=True, whole=True))
    except FileNotFoundError:
        return None, None
    except Untrusted as e:
        raise NotReplaced(f"{real}: {e.about(real)}; nothing was replaced", hint=f"{e.hint}; name a regular fstab file") \
            from None


def _whole(path: Path, read: Callable[[], Read]) -> Read:
    """What `read` read whole (`read_whole`), refused when longer than MAX_FSTAB_BYTES: its first bytes alone,
    taken as the whole, were kept as the backup of a file they are not, or restored as the original."""
    try:
        return read()
    except TooLarge:
        raise NotReplaced(f"{path} is larger than {MAX_FSTAB_BYTES} bytes, not an fstab file; nothing was replaced",
                          hint=f"look at what grew {path}; tunectl copies, compares and restores an fstab whole only") from None


def original_of(real: Path) -> Path:
    return real.with_name(real.name + ORIG_SUFFIX)


def tmp_prefix(real: Path) -> str:
    return f".{real.name}{TMP_TAG}"


def ready_to_write(path: str | os.PathLike) -> list[str]:
    """Before `mounts fix` or `mounts rollback` writes the fstab `path` (under tunectl's lock): the file it names
    (`resolve`), in a directory root (or the user) alone may write (`refuse_untrusted_dir`), the temp files a
    killed tunectl left beside it removed (`sweep`); their names."""
    real = resolve(path)
    refuse_untrusted_dir(real)
    return sweep(real)


def refuse_untrusted_dir(real: Path) -> None:
    """The rule `udev install` keeps for its rules directory (`trust.check_dir`): tunectl writes beside the fstab
    (FSTAB.tunectl.orig, FSTAB.tunectl.bak.N, its temp file) only in a directory root (or the user running it)
    alone can write. In another user's directory those copies, of a file that may hold passwords, would be that
    user's to read, swap or replace; `--fstab` there is refused (UsageError) before anything is written."""
    try:
        check_dir(real.parent)
    except Untrusted as e:
        # its owner or mode: how to make it root's, not the shared "or move it aside" (the fstab's own directory)
        hint = f"{e.fix}, " if isinstance(e, OthersMayWrite) else f"{e.hint}; or "
        raise UsageError(f"cannot write {real}: {e.message} (tunectl keeps its original and backups beside it)",
                         hint=f"{hint}fix a copy in a directory of your own, or run as that directory's owner",
                         where=str(real)) from None
    except OSError as e:
        raise TunectlError(f"cannot use {real.parent}: {e.strerror or e}", where=str(real)) from None


def _open_parent(real: Path) -> int:
    """The directory `real` (from resolve()) is in, opened through no link: what tunectl lists, reads and removes
    beside the fstab is named relative to it. By name, each step went through the path again, and the owner of a
    directory on it (`--fstab` in a user's directory) could swap it for a link to a root-only one in between: root
    then removed, listed or read (and wrote into that user's fstab) what is there. Untrusted when it changed."""
    _, fd = open_dir(real.parent, shared=True)
    return fd


def sweep(real: Path) -> list[str]:
    """Remove the temp files a killed tunectl left beside `real` (call under the lock); their names. Only tunectl's
    own go (`trust.sweep_temps`: its name pattern, a regular file the caller owns, no link)."""
    with contextlib.suppress(OSError, Untrusted):  # the directory changed: nothing swept, the write refuses it
        fd = _open_parent(real)
        try:
            return sweep_temps(fd, tmp_prefix(real))
        finally:
            os.close(fd)
    return []


def _own_file_problem(path: Path) -> str | None:
    """Why `path` (an original or backup tunectl keeps) must not be used; None when it is absent or a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link, not the file tunectl keeps there"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file"
    return None


def _refuse_unless_own(path: Path) -> None:
    problem = _own_file_problem(path)
    if problem:
        raise NotReplaced(f"{problem}; nothing was replaced", hint=f"move {path} away if it is not tunectl's, "
                                                                    "then run the same command again")


def _read_own(path: Path) -> bytes:
    """An original or backup, opened through no link at all (its directory came from resolve()): a link there, or
    on the way since, is refused (FileNotFoundError when absent)."""
    _refuse_unless_own(path)
    try:
        return _whole(path, lambda: read_regular(path, MAX_FSTAB_BYTES, resolved=True, whole=True))
    except Untrusted as e:
        raise NotReplaced(f"{path}: {e.about(path)}; nothing was replaced",
                          hint=f"move {path} away if it is not tunectl's, then run the same command again") from None


def next_backup(real: Path) -> Path:
    pattern = re.compile(re.escape(real.name + BACKUP_SUFFIX) + r"([0-9]{1,9})\Z")
    fd = _open_parent(real)
    try:
        numbers = [int(m.group(1)) for e in os.listdir(fd) if (m := pattern.match(e))]
    finally:
        os.close(fd)
    return real.with_name(f"{real.name}{BACKUP_SUFFIX}{max(numbers, default=0) + 1}")


def _unchanged(real: Path, read: bytes) -> os.stat_result:
    """The fstat of the fstab as read now, which must still hold `read` (NotReplaced when not): the owner and mode
    its copies and its replacement take, from the one open that read it, never from another open by name."""
    now, st = _read_current(real)
    if now != read or st is None:
        raise NotReplaced(f"{real} was changed by another writer while tunectl was editing it; nothing was replaced "
                           "(the other writer's edit stays)", hint="run the same command again: it starts from the file "
                                                                   "as it is now")
    return st


def replace(real: Path, read: bytes, new: bytes, verify: Callable[[Path], None] | None = None) -> str:
    """Replace `real` (whose content was `read`) with `new`; keep the original and a numbered backup.

    The backup named in the return value holds `read`. Raises TunectlError
    (nothing replaced) when the file no longer holds `read`, NotPermitted when it
    cannot be written.
    """
    def check(tmp: Path) -> None:
        _unchanged(real, read)
        if verify is not None:
            verify(tmp)
            _unchanged(real, read)  # again, right before the rename

    try:
        like = _unchanged(real, read)  # owner and mode of the file read, not of a second open by name
        orig = original_of(real)
        _refuse_unless_own(orig)
        if not os.path.lexists(orig):
            atomic_write(orig, read, like=like, tmp_prefix=tmp_prefix(real), shared_dir=True)
        backup = next_backup(real)
        _refuse_unless_own(backup)
        atomic_write(backup, read, like=like, tmp_prefix=tmp_prefix(real), shared_dir=True)
        # Any directory an fstab was named in: the files are created beside it, never through a link.
        atomic_write(real, new, like=like, verify=check, tmp_prefix=tmp_prefix(real), shared_dir=True)
    except Untrusted as e:
        raise TunectlError(f"cannot write {real}: {e.about(real)}", hint=e.hint) from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise NotPermitted(f"cannot write {real}: {e.strerror}", hint="run as root") from None
        raise TunectlError(f"cannot write {real}: {e.strerror}") from None
    return str(backup)


def restore_original(path: Path, check_only: bool = False) -> tuple[str, str | None]:
    """Put back the fstab tunectl first changed (`mounts rollback`): (what happened, backup of the replaced file)."""
    real = resolve(path)
    orig = original_of(real)
    try:
        data = _read_own(orig)
    except FileNotFoundError:
        raise UsageError(f"no original of {real} is kept ({orig} does not exist): tunectl never changed it",
                         hint="nothing to roll back") from None
    except OSError as e:
        raise TunectlError(f"cannot read {orig}: {e.strerror}") from None
    now = read_current(real) or b""
    if now == data:
        return f"{real} already is the original ({orig})", None
    if check_only:
        return f"{real} would be restored from {orig} (--check: nothing written)", None
    backup = replace(real, now, data)
    return f"{real} restored from {orig}; the file it replaced is kept as {backup}", backup
