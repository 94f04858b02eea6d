"""Trust of the files tunectl reads and writes as root: owner, mode and type, checked before use.

A file is trusted when it and every directory above it belong to root (or,
when tunectl runs as another user, to that user) and no one else can write
them; a world-writable directory with the sticky bit (/tmp) may stand above,
as nobody else can rename what it holds. Nothing here follows a symbolic
link in the last component of a path, and nothing opens a file that is not
a regular one: a named pipe or a tty is refused before it can block.

Every refusal is an `Untrusted` naming the path, what was found and a hint;
the caller turns it into its own error (exit 5 for the state directory, 2
for a profile or a list).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from tunectl.system.termination import stop_not_said

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

_KIND = {stat.S_IFREG: "a regular file", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS


class Untrusted(Exception):
    """A file or directory that must not be used: `path`, what was found, and what to do."""

    def __init__(self, path: str | os.PathLike, found: str, hint: str, wrong_type: bool = False) -> None:
        super().__init__(f"{path}: {found}")
        self.path, self.found, self.hint, self.wrong_type = str(path), found, hint, wrong_type
        self.message = f"{path}: {found}"

    def about(self, target: str | os.PathLike) -> str:
        """What was found, said after `target`'s own name: `found` alone when it is `target` itself, else `message`
        (a directory on its way): "cannot write X: a named pipe", never "X: X: a named pipe"."""
        return self.found if self.path == str(target) else self.message


class TooLarge(Exception):
    """A file longer than its reader's cap (`read_whole`): its first `cap` bytes alone, taken as the whole, would
    lose every line after them and cut one mid-value. `size`: at least cap + 1 (the file's size when known)."""

    def __init__(self, path: str | os.PathLike, cap: int, size: int) -> None:
        super().__init__(f"{path}: larger than {cap} bytes")
        self.path, self.cap, self.size = str(path), cap, size


def kind(mode: int) -> str:
    return _KIND.get(stat.S_IFMT(mode), "not a regular file")


NOT_REGULAR = ", not a regular file"


def irregular(mode: int) -> str:
    """The one wording of what stands where a regular file was wanted: "a named pipe, not a regular file"."""
    return kind(mode) + NOT_REGULAR


def not_regular(path: str | os.PathLike, mode: int) -> Untrusted:
    """The refusal of a file to read that is no regular file (`mode`: a look, not followed, or the open's fstat): a
    device node or a named pipe put in its place is never opened, or read from once open. The one wording of a
    listed name, a tree's file (`read_in_root`) and a path given (`open_regular`)."""
    return Untrusted(path, irregular(mode), f"name a regular file; move {path} aside", True)


def trusted_uids() -> frozenset[int]:
    """Root, and the user tunectl runs as (the same when run as root)."""
    return frozenset({0, os.geteuid()})


def owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def problem(st: os.stat_result, final: bool = True) -> str | None:
    """Why a file or directory with this stat cannot be trusted, or None.

    `final`: the object itself; above it, a sticky world-writable directory is allowed.
    """
    if st.st_uid not in trusted_uids():
        return f"owned by {owner(st.st_uid)}, not root"
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        if not final and stat.S_ISDIR(st.st_mode) and mode & stat.S_ISVTX and st.st_uid == 0:
            return None
        return writable_by(mode)
    return None


_GROUP_WRITES = "writable by its group"


def writable_by(mode: int) -> str:
    """The one wording of a mode that lets others write: "mode 0664: writable by its group" (`acl_said` says it
    of a file with an ACL)."""
    return f"mode {stat.S_IMODE(mode):04o}: " + ("writable by others" if mode & stat.S_IWOTH else _GROUP_WRITES)


def acl_said(path: str | os.PathLike, why: str) -> str:
    """A refusal's `why` as true of `path`. On a file or directory with an access ACL the group bits are the ACL's
    mask, so "writable by its group" may mean a user or group the ACL names: said by name ("its ACL lets nobody
    (uid 65534) write"). Looked at (never followed) only when the group bits are the reason: a refusal's cost."""
    if not why.endswith(_GROUP_WRITES):
        return why
    try:
        raw = os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except OSError:  # none (ENODATA), or no ACLs on that file system: the group bits are its group's
        return why
    writers = _acl_writers(raw)
    return why[:-len(_GROUP_WRITES)] + (f"its ACL lets {', '.join(writers)} write" if writers else
                                        "its ACL's mask allows writing")


def _acl_writers(raw: bytes) -> list[str]:
    """Who an access ACL (as the kernel stores it: a version, then tag, permissions and id, 8 bytes an entry) lets
    write besides the owner: its group, and the users and groups it names, each as its mask allows."""
    import struct

    if len(raw) < 4 or (len(raw) - 4) % 8:
        return []
    entries = list(struct.iter_unpack("<HHI", raw[4:]))
    mask = next((perm for tag, perm, _ in entries if tag == 0x10), 0o7)
    writers = []
    for tag, perm, uid_or_gid in entries:
        if not perm & mask & 0o2:
            continue
        if tag == 0x02:
            writers.append(f"user {owner(uid_or_gid)}")
        elif tag == 0x04:
            writers.append("its group")
        elif tag == 0x08:
            writers.append(f"group {_group(uid_or_gid)}")
    return writers


def _group(gid: int) -> str:
    try:
        import grp

        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except (KeyError, ImportError):
        return f"gid {gid}"


class OthersMayWrite(Untrusted):
    """A file or directory whose owner or mode (`problem`: `found`) lets another user change it. `fix`: how to
    make it root's alone (chmod go-w takes the write from an ACL's mask too); the hint adds "or move it aside",
    which a caller may say its own way (`mounts fix`: not of the fstab's own directory)."""

    def __init__(self, path: str | os.PathLike, why: str) -> None:
        self.fix = f"make it root's and not group/world-writable (chown root: {path}; chmod go-w {path})"
        super().__init__(path, acl_said(path, why), f"{self.fix}, or move it aside")


def link_loop(path: str | os.PathLike, thing: str, wrong_type: bool = False) -> Untrusted:
    """The refusal of a path whose symbolic links lead round and round (ELOOP): the one wording of every walk. The
    hint names what to give instead; no owner or mode would end the loop."""
    return Untrusted(path, "a symbolic link loop", f"name the {thing} itself", wrong_type)


def check_dir(path: str | os.PathLike, final: bool = True, shared: bool = False) -> Path:
    """Every directory of `path` from / down, checked; the path with its symlinks resolved (`walk`).

    The last component must be a directory, not a symbolic link. A symbolic link
    higher up is followed when root or the user owns it, and the walk goes on
    from its target. `shared` (a directory a user named for an output): any
    owner and mode will do, and a link anywhere is followed when root or the
    user owns it, never one another user planted.
    """
    from pathlib import Path  # here: a replay at boot does not import pathlib

    def not_a_link(dir_fd: int, name: str, st: os.stat_result, shown: str) -> None:
        if stat.S_ISLNK(st.st_mode) and final and not shared:
            raise Untrusted(shown, f"a symbolic link (to {os.readlink(name, dir_fd=dir_fd)})",
                            "name the directory itself, not a link to it")

    try:
        landed = walk(os.fspath(path), last=not_a_link, judge=None if shared else lambda st: problem(st, final=False))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_loop(e.filename, "directory") from None
        raise
    resolved = Path(landed.path)
    _check_stat(resolved, landed.st, final=final, shared=shared)
    return resolved


def _check_stat(path: Path, st: os.stat_result, final: bool, shared: bool = False) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{kind(st.st_mode)}, not a directory", str(path))
    why = None if shared else problem(st, final=final)
    if why:
        raise OthersMayWrite(path, why)


def check_root(path: str | os.PathLike) -> Path:
    """A root directory tunectl reads a tree below (a fake sysfs, udev database, /proc): checked as `check_dir`.

    Walked as `walk` goes (a link, at its last component too, followed when root or the user owns it, each
    directory passed judged as one above a file); a root that does not exist yet is judged by its nearest
    existing parent, which must then be root's alone: nobody else may create it later.
    """
    try:
        return check_dir(walk(os.fspath(path), judge=lambda st: problem(st, final=False)).path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_loop(path, "directory") from None
        if e.errno != errno.ENOENT or not e.filename:
            raise
        return check_dir(os.path.dirname(e.filename))


def resolve_own_links(path: str | os.PathLike) -> Path:
    """`path` with its symbolic links resolved (`walk`), each one root's or the user's: another user's link anywhere
    on it is refused (Untrusted), never followed. A path whose last component does not exist (yet) is returned as
    it is."""
    from pathlib import Path  # here: a replay at boot does not import pathlib
    try:
        return Path(walk(os.fspath(path), missing_ok=True).path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_loop(e.filename, "file") from None
        raise


def ensure_dir(path: str | os.PathLike, mode: int = 0o755) -> Path:
    """`path` as a trusted directory, created (with its parents) with `mode` whatever the umask."""
    from pathlib import Path  # here: a replay at boot does not import pathlib
    path = Path(path)
    missing = []
    probe = Path(os.path.abspath(path))
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    parent = check_dir(probe, final=not missing)
    if missing:
        _make_below(parent, [d.name for d in reversed(missing)], mode)
    return check_dir(path)


def _make_below(parent: Path, names: list[str], mode: int) -> None:
    """The directories `names` (each inside the one before) made below `parent` (as check_dir resolved it), each
    through a descriptor of the one above, opened without following a link: a name another user turned into a
    link since it was seen missing is refused (Untrusted), never created through; one that appeared meanwhile
    must pass `problem` before anything is made in it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _open_dir(parent)
    try:
        for name in names:
            try:
                os.mkdir(name, mode, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise Untrusted(parent / name, "changed while tunectl created it (a link or a file took its place)",
                                    "run again; if it recurs, find who changes it") from None
                raise
            os.close(fd)
            fd = nxt
            if made:
                os.fchmod(fd, mode)  # whatever the umask
            elif why := problem(os.fstat(fd), final=False):
                raise OthersMayWrite(parent / name, why)
            parent = parent / name
    finally:
        os.close(fd)


def _open_dir(resolved: Path) -> int:
    """A descriptor on the directory `check_dir` resolved, opened through no link (`_walk_no_link`): a component
    swapped for a link since the check makes this fail instead of going elsewhere."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return _walk_no_link(str(resolved), flags, flags)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Untrusted(resolved, "changed while tunectl looked at it (a part became a link)",
                            "run again; if it recurs, find who changes it") from None
        raise


def open_dir(path: str | os.PathLike, shared: bool = False) -> tuple[Path, int]:
    """`path` passed by `check_dir` and a descriptor on it (the caller closes it) through which to list, write
    and remove its entries: opened through no link, and checked again through the descriptor."""
    resolved = check_dir(path, shared=shared)
    fd = _open_dir(resolved)
    why = None if shared else problem(os.fstat(fd))
    if why:  # changed since check_dir looked
        os.close(fd)
        raise OthersMayWrite(resolved, why)
    return resolved, fd


_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH, _RESOLVE_IN_ROOT = \
    0x01, 0x02, 0x04, 0x08, 0x10
_AT_FDCWD = -100
_SYS_OPENAT2 = 437  # the same number on every architecture (new system calls share one table since 5.1)
_openat2_missing = False
# How often a scoped openat2 that says EAGAIN (a rename elsewhere) is tried: at 1 in 60 under a user's rename loop
# (measured), 64 in a row do not happen; a path that keeps changing under the lookup still ends in EAGAIN.
_SCOPED_TRIES = 64


_syscall = None  # libc's syscall(2), loaded once: a replay opens every file of its list through it


def _openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:
    import ctypes

    global _syscall
    if _syscall is None:
        _syscall = ctypes.CDLL(None, use_errno=True).syscall
    how = (ctypes.c_uint64 * 3)(flags, 0, resolve)  # struct open_how: flags, mode, resolve
    name = os.fsencode(rel)
    if b"\0" in name:  # a char * ends at the first NUL: refused as os.open refuses it, never another name opened
        raise ValueError("embedded null byte")
    for _ in range(_SCOPED_TRIES):
        fd = _syscall(_SYS_OPENAT2, dir_fd, name, ctypes.byref(how), 24)
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        # Kernel quirk: with RESOLVE_BENEATH or RESOLVE_IN_ROOT, a ".." on the way (a tree's block/sda ->
        # ../devices/... link) fails EAGAIN when any rename or mount anywhere on the system happened during the
        # lookup (rename_lock, mount_lock): the kernel cannot tell it stayed inside. openat2(2): retry. Any user
        # can rename in a loop: taken as the attribute's absence, a tree's disk lost its class or vanished.
        if code != errno.EAGAIN or not resolve & (_RESOLVE_BENEATH | _RESOLVE_IN_ROOT):
            break
    raise OSError(code, os.strerror(code), rel)


def _below(root: str | os.PathLike, rel: str, flags: int, resolve: int,
           by_hand: Callable[[str | os.PathLike, str, int], int]) -> int:
    """`rel` opened below `root` by openat2 with `resolve`; before Linux 5.6, by `by_hand(root, rel, flags)`."""
    global _openat2_missing
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not _openat2_missing:
            try:
                return _openat2(root_fd, rel, flags, resolve | _RESOLVE_NO_MAGICLINKS)
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    raise
                _openat2_missing = True
        return by_hand(root, rel, flags)
    finally:
        os.close(root_fd)


def open_beneath(root: str | os.PathLike, rel: str, flags: int) -> int:
    """`rel` opened below the directory `root`, never anywhere else, its last component never a link.

    Links inside the tree are followed as long as they stay below `root` (openat2 with
    RESOLVE_BENEATH, resolved once by the kernel); a link that leaves it, an absolute
    one or a `..` above the root fails with EXDEV. Without openat2 (before 5.6) the path
    is resolved in user space and refused when it leaves the root.
    """
    return _below(root, rel, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY, _RESOLVE_BENEATH, _beneath_by_hand)


def _beneath_by_hand(root: str | os.PathLike, rel: str, flags: int) -> int:
    base = os.path.realpath(root)
    parent = os.path.realpath(os.path.join(base, os.path.dirname(rel)))
    if os.path.commonpath([base, parent]) != base:
        raise OSError(errno.EXDEV, "leaves the root through a link", rel)
    return os.open(os.path.join(parent, os.path.basename(rel)), flags)


def open_in_root(root: str | os.PathLike, rel: str, flags: int) -> int:
    """`rel` opened as a program whose "/" is `root` opens it: every link on the way, the last one too, resolved
    inside the tree, an absolute one from `root` and a `..` stopping there (openat2 with RESOLVE_IN_ROOT), so a
    tree's ``x.rules -> /usr/lib/udev/rules.d/x.rules`` is read from the tree, never from this machine.

    For a tree the caller trusts (a configuration root check_trusted passed). Without openat2 (before 5.6)
    the path is resolved in user space, relative links and `..` as the kernel would; an absolute link
    then fails with EXDEV and says why: the host's file is never read in its place.
    """
    # openat2 refuses a flag O_PATH ignores (EINVAL): O_NOCTTY only on a real open
    flags |= os.O_CLOEXEC | (0 if flags & os.O_PATH else os.O_NOCTTY)
    if os.path.samestat(os.stat(root), os.stat("/")):  # this machine's own tree: no ctypes to load for a status
        return os.open(os.path.join("/", rel), flags)
    return _below(root, rel, flags, _RESOLVE_IN_ROOT, _in_root_by_hand)


def _in_root_by_hand(root: str | os.PathLike, rel: str, flags: int) -> int:
    stack: list[str] = []
    parts = _parts(rel)
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if stack:
                stack.pop()
            continue
        here = os.path.join(root, *stack, part)
        try:
            st = os.lstat(here)
        except OSError:
            stack.append(part)  # missing, or not a directory on the way: the open below says which
            continue
        if not stat.S_ISLNK(st.st_mode):
            stack.append(part)
            continue
        target = os.readlink(here)
        links += 1
        if target.startswith("/"):
            raise OSError(errno.EXDEV, f"a symbolic link to {target} (an absolute one): this kernel has no openat2 "
                          f"(Linux 5.6) to resolve it inside {root}, and tunectl does not read this machine's file "
                          "in its place", rel)
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
        parts = _parts(target) + parts
    return os.open(os.path.join(root, *stack), flags | os.O_NOFOLLOW)


PROC_FD = "/proc/self/fd"  # this process's open files as procfs shows them; missing where /proc is not mounted
PROC_HINT = "mount procfs there (mount -t proc proc /proc): tunectl reopens a file it looked at through /proc/self/fd"


def _proc_fd_there() -> bool:
    """Whether PROC_FD is there at all (looked at without opening any file in it): False only where /proc is not
    mounted (or /proc/self leads nowhere: a procfs of another PID namespace)."""
    try:
        os.close(os.open(PROC_FD, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
    except FileNotFoundError:
        return False
    return True


def reopen(fd: int, flags: int, shown: str | os.PathLike) -> int | None:
    """A new open with `flags` (the caller's to close) of the very file open at `fd` (an O_PATH look, or a
    descriptor held since the start), through PROC_FD/N: the kernel's link to that open file, no name resolved
    again, so what was looked at is what is opened. Its device and inode are compared with `fd`'s all the same:
    another file there (a /proc that is no procfs) is Untrusted naming `shown`. None when /proc is not mounted (a
    bare chroot, a container without it): the caller opens another way or says so. Raises OSError (a permission,
    no descriptors; no entry for `fd` where PROC_FD itself is there: not a missing /proc, never a fallback)."""
    try:
        new = os.open(f"{PROC_FD}/{fd}", flags | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:  # every open descriptor has its entry there: no procfs at /proc, if PROC_FD is gone
        if _proc_fd_there():
            raise
        return None
    held, now = os.fstat(fd), os.fstat(new)
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(new)
        raise Untrusted(shown, f"{PROC_FD}/{fd} is another file than the one tunectl holds open", PROC_HINT, True)
    return new


def read_in_root(root: str | os.PathLike, rel: str, limit: int, whole: bool = False) -> bytes:
    """At most `limit` + 1 bytes of the regular file `rel` of the tree `root`, found by `open_in_root` (O_PATH) and
    looked at before it is opened: anything else (a named pipe, a device node, a directory) is refused (Untrusted
    naming `rel`), never opened: an open of a device acts on it (a watchdog starts), of a pipe waits. The file
    looked at is opened for reading through /proc/self/fd (`reopen`: its open file, no name resolved again),
    without blocking. Where /proc is not mounted (a bare chroot) `rel` is found in the tree again and opened
    without blocking, then compared with the look (device, inode, type: another thing there since is refused as
    a change); only a swap in that window, in a tree the caller trusts, could open something else.
    `whole`: all of it or TooLarge (`read_whole`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK
    found = open_in_root(root, rel, os.O_PATH)
    try:
        look = os.fstat(found)
        if not stat.S_ISREG(look.st_mode):
            raise not_regular(rel, look.st_mode)
        fd = reopen(found, flags, rel)
    finally:
        os.close(found)
    if fd is None:
        fd = open_in_root(root, rel, flags)
        if not is_looked(os.fstat(fd), look):
            os.close(fd)
            raise changed_opening(rel)
    try:
        return read_whole(fd, rel, limit) if whole else _read_up_to(fd, limit)
    finally:
        os.close(fd)


def open_listed(path: str, flags: int = _READ, checked: bool = False, links: bool = True) -> int:
    """The regular file at the absolute `path`, resolved once: what was judged is what is opened.

    First without following any link on the way (openat2 RESOLVE_NO_SYMLINKS: one
    call, and a directory swapped for a link since the path was judged fails it);
    a path through a link (``/lib`` on merged-/usr) is then walked one component at
    a time relative to directory descriptors (O_PATH, O_NOFOLLOW), following only
    links root or the user owns, and the last component is looked at before it is
    opened: a device, a named pipe or another user's link is refused, never opened.
    `checked`: the caller already judged the name (lstat, statx) as a regular file.
    `links=False`: `path` was resolved (realpath) and judged as such: any link on it now
    means it changed since, and it is refused.
    Raises Untrusted (a link another user owns, not a regular file) or OSError.
    """
    global _openat2_missing
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    if not _openat2_missing or not links:
        try:
            if not checked:
                return _looked_at_open(path, flags)
            if not links:
                return _walk_no_link(path, flags)
            return _openat2(_AT_FDCWD, path, flags, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        except OSError as e:
            if e.errno == errno.ENOSYS:
                _openat2_missing = True
            elif e.errno != errno.ELOOP:
                raise
            elif not links:
                raise Untrusted(path, "changed while tunectl looked at it (a part became a symbolic link)",
                                "run again; if it recurs, find who changes it", True) from None
    return _walk_open(path, flags, links)


_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _directory_no_link(path: str, walk: bool) -> int:
    """The directory `path` opened (O_PATH) without following any link on the way or at its end (ELOOP for one):
    by openat2, one call, or by `walk`ing it a component at a time (no ctypes to load; where openat2 is missing).
    (openat2 without O_NOFOLLOW: with O_DIRECTORY a linked directory would fail ENOTDIR, "vanished", instead of
    ELOOP; RESOLVE_NO_SYMLINKS follows no link either way, and the walk says ELOOP for a link at the end too.)"""
    if walk:
        return _walk_no_link(path, _PATH_DIR)
    return _openat2(_AT_FDCWD, path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC,
                    _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)


def _looked_at_open(path: str, flags: int) -> int:
    """The absolute `path` opened after a look at its name (not followed): its directory is opened (O_PATH)
    without following any link on the way (openat2 RESOLVE_NO_SYMLINKS, or the walk where openat2 is missing),
    then the name is looked at and opened relative to it. A look by the whole path would resolve the directories
    on the way, following another user's link (into an automount point: a mount triggered as root) before the
    open refused it. ELOOP when a link is on the way or is the name; a name not a regular file is refused, and so
    is one another thing stands at by the open (`open_as_looked`: device, inode and type compared with the look):
    a named pipe swapped in between is opened without blocking and would read as an empty file."""
    directory, _, name = path.rpartition("/")
    try:
        # the walk where ctypes is not loaded yet (a replay's list, a small list's files: ~4 ms of CPU saved), or
        # where openat2 is missing; openat2 once it is loaded (one call rather than one per component)
        dir_fd = _directory_no_link(directory or "/", walk=_syscall is None or _openat2_missing)
        try:
            # a link: ELOOP, as the open says it, and open_listed walks on through root's own links
            return _regular_as_looked(path, dir_fd, name, os.lstat(name, dir_fd=dir_fd), flags, False)
        finally:
            os.close(dir_fd)
    except OSError as e:
        if e.filename == path or e.errno == errno.ENOSYS:
            raise
        raise OSError(e.errno, e.strerror, path) from None


def _walk_no_link(path: str, flags: int, dir_flags: int = _PATH_DIR) -> int:
    """The absolute `path` opened as openat2 with RESOLVE_NO_SYMLINKS opens it, without loading ctypes (~3 ms of
    CPU at every start that reads a profile): each directory is opened relative to the one before it with
    `dir_flags` (O_NOFOLLOW), so a link anywhere on the way fails the open (ELOOP, as openat2 says) instead of
    being followed, whatever is swapped in between two steps; the last component is opened with `flags` (the
    caller's O_NOFOLLOW). The one walk of both a file (O_PATH on the way) and a directory (`_open_dir`: its own
    flags all the way down, "/" itself when `flags` has O_DIRECTORY). An error names the whole `path`."""
    parts = [part for part in path.split("/") if part]
    fd = os.open("/", dir_flags)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nxt = os.open(part, flags if last else dir_flags, dir_fd=fd)
            except NotADirectoryError:  # a link, with O_DIRECTORY, says ENOTDIR: say ELOOP, as openat2 does (the
                # last component too, when it is a directory that is asked for). A directory there by the look was
                # no directory at the open: a link swapped back (another user's loop of renames), changed as much as
                # a link seen now. Only a file that stays one is ENOTDIR.
                if stat.S_IFMT(os.lstat(part, dir_fd=fd).st_mode) in (stat.S_IFLNK, stat.S_IFDIR):
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
                raise
            if last:
                return nxt
            os.close(fd)
            fd = nxt
        if flags & os.O_DIRECTORY:
            return os.open("/", flags)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    except OSError as e:
        if e.filename == path:
            raise
        raise OSError(e.errno, e.strerror, path) from None
    finally:
        os.close(fd)


def chosen_by_no_other(st: os.stat_result) -> bool:
    """Owned by root or by this process's user, and writable by no one else (an ACL granting another user write
    shows in the group bits, its mask). The one rule for a preload list that decides what this process does
    (`preload.listfile`) and for a directory whose names a replay opens without a look first (`ListedOpener`)."""
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def why_chosen_by_other(st: os.stat_result) -> str:
    """Why `chosen_by_no_other` says no, in words: the owner ("not root" as root, "neither root nor you"
    otherwise) or the mode; "" when it says yes."""
    if chosen_by_no_other(st):
        return ""
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by {owner(st.st_uid)}, " + ("not root" if os.geteuid() == 0 else "neither root nor you")
    return writable_by(st.st_mode)


def chosen_by_other(st: os.stat_result) -> str | None:
    """As root, why a file whose text decides what root does (a profile: what it writes to sysfs; a preload list:
    what it reads; a tuned profile it turns into one) cannot be used: another user owns it or may write it, so the
    choice would be theirs (SPEC 4a). None when it is root's alone, and always None when not run as root: a user's
    own run acts with that user's rights only. The one rule for every such input (`open_regular(decides=True)`,
    `preload.listfile`)."""
    if os.geteuid() != 0:
        return None
    return why_chosen_by_other(st) or None


def decides_hint(path: str | os.PathLike) -> str:
    """What to do with a file `chosen_by_other` refused."""
    return f"review it, then make it root's alone (chown root: {path}; chmod go-w {path}), or copy it somewhere only " \
           "root writes"


LISTED_READ = _READ | os.O_NOCTTY  # a listed file opened relative to its directory: no link, never blocks


def open_unlooked(dir_fd: int, name: str, path: str) -> int:
    """The listed file `name` (its absolute `path`) opened relative to `dir_fd`, a directory where a name is not
    looked at first (`ListedOpener`: a nodev mount, chosen by no other), without crossing a mount on the name
    either (openat2 RESOLVE_NO_XDEV): what is mounted over it (a bind-mounted device node brings the devices of
    its own mount along) fails EXDEV, unopened, and the caller refuses it ("mounted over"). Before Linux 5.6
    (no openat2) nothing refuses a mount at the open: the name is looked at first, as in any other directory.
    Raises Untrusted (no regular file by that look) or OSError. (_datapass.c read_file makes the same open.)"""
    fd = _no_mount_crossed(dir_fd, name, path)
    return fd if fd >= 0 else _regular_looked_at(dir_fd, name, path)


def open_in_tree(dir_fd: int, name: str, path: str) -> int:
    """A name a walk by descriptor listed as a regular file by its d_type (collect's tree), opened (LISTED_READ):
    without crossing a mount on it (openat2 RESOLVE_NO_XDEV), since d_type is the name's own, not what is mounted
    over it (a device node bind-mounted there would be opened with no look). A mount there: looked at through it
    and opened only as the regular file it showed (`_regular_looked_at`), as is every name before Linux 5.6.
    Raises Untrusted (not a regular file, or changed between the look and the open) or OSError."""
    try:
        fd = _no_mount_crossed(dir_fd, name, path)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        fd = -1
    return fd if fd >= 0 else _regular_looked_at(dir_fd, name, path)


def _no_mount_crossed(dir_fd: int, name: str, path: str) -> int:
    """`name` opened (LISTED_READ) relative to `dir_fd` by openat2 with RESOLVE_NO_XDEV (EXDEV: a mount on the
    name); -1 where openat2 is missing (ENOSYS, remembered). Raises OSError naming `path`."""
    global _openat2_missing
    if _openat2_missing:
        return -1
    try:
        return _openat2(dir_fd, name, LISTED_READ | os.O_CLOEXEC, _RESOLVE_NO_XDEV)
    except OSError as e:
        if e.errno != errno.ENOSYS:
            raise OSError(e.errno, e.strerror, path) from None
        _openat2_missing = True
    return -1


def _regular_looked_at(dir_fd: int, name: str, path: str) -> int:
    """`name` looked at (not followed; through a mount on it), refused unless a regular file, and opened only as
    that file (`open_as_looked`). Raises Untrusted or OSError."""
    look = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(look.st_mode):
        raise not_regular(path, look.st_mode)
    fd = open_as_looked(dir_fd, name, look, LISTED_READ)
    if fd is None:
        raise changed_opening(path)
    return fd


# Out of descriptors: this process's limit (EMFILE, RLIMIT_NOFILE: `ulimit -n`) or the system's file table (ENFILE).
# The process's problem, never a listed file's.
NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def directories_to_keep(most: int) -> int:
    """How many directory descriptors to keep open at once: `most`, or a quarter of the descriptors this process
    may have open (the soft RLIMIT_NOFILE, `ulimit -n`: 64 keeps 16) when that is fewer, at least 1. The rest stays
    for the file being read, io_uring, the list and whatever the caller holds."""
    limit = os.sysconf("SC_OPEN_MAX")  # getrlimit(RLIMIT_NOFILE)'s soft limit, without importing resource
    return most if limit <= 0 else max(1, min(most, limit // 4))


class ListedOpener:
    """`open_listed(path, checked=True)` for many files, cheaper: each directory is resolved once.

    A directory is opened (O_PATH) by openat2 with RESOLVE_NO_SYMLINKS, as open_listed
    opens a file, and kept; its files are opened relative to that descriptor, the name
    alone and O_NOFOLLOW: one C call per file, and nothing swapped into the path after
    the directory was opened is followed. A directory with a link on its way (``/lib``
    on merged-/usr), or a kernel without openat2, falls back to `open_listed` per file.
    `walk`: the directory opened one component at a time instead, with the same refusal of links (`_walk_no_link`).
    At most `keep` directories stay open (a list in disk order visits them in runs), fewer under a low
    `ulimit -n` (`directories_to_keep`; the number kept is its `keep`); `close` lets them go (out of
    descriptors: try again after it).

    A name not `checked` is looked at (not followed) before it is opened, so that a device
    node or a named pipe put in its place is refused unopened, except in a directory on a
    file system mounted nodev that no other user can have written (`chosen_by_no_other` on
    the directory itself, through its descriptor: owned by root or this user, writable by no
    group and no other). On a nodev mount no device node can be opened at all (the kernel
    refuses it before any driver sees it), and there the open crosses no mount on the name
    (`open_unlooked`: a device node bind-mounted over it, from a mount that allows devices, is
    refused unopened, EXDEV), so the one thing the open can reach besides a
    regular file is a named pipe or a socket, which only root or this user can have put
    there: the open never blocks (O_NONBLOCK: a named pipe opens at once, a socket fails),
    never takes a terminal (O_NOCTTY), and the caller's fstat refuses anything but the listed
    regular file before any read. Owner and mode alone are not enough: a container's root is
    uid 0 too, and may make device nodes in a volume it shares with the host (a watchdog
    node, opened, arms the watchdog), so on a mount that allows devices the look stays.
    """

    def __init__(self, keep: int = 512, walk: bool = False) -> None:
        self.dirs: dict[str, tuple[int, bool]] = {}  # directory -> (O_PATH descriptor or -1, look before opening)
        self.keep = directories_to_keep(keep)  # at most this many stay open; one more lets them all go
        # walk: each directory opened by `_walk_no_link` (a call per component, ~30 us more per directory than
        # openat2, but no ctypes to load: ~4 ms of CPU): for a list of few files (the replay's small-list path)
        self.walk = walk

    def directory(self, directory: str) -> tuple[int, bool]:
        """`directory` opened (kept): its descriptor, -1 to open its files one by one (`open_listed`), and whether
        a name not checked is looked at before it is opened. Raises OSError (gone, not a directory)."""
        global _openat2_missing
        found = self.dirs.get(directory)
        if found is not None:
            return found
        fd, look = -1, True
        if self.walk or not _openat2_missing:
            try:
                fd = _directory_no_link(directory, self.walk)  # a link on the way: ELOOP, the fall-back show takes too
            except OSError as e:
                if e.errno == errno.ENOSYS:
                    _openat2_missing = True
                elif e.errno != errno.ELOOP:
                    raise  # the directory is gone or not one: every file in it fails the same way
        if fd >= 0:
            # the directory opened, not the name: a swap after the open changes nothing
            # (and where openat2 is missing, a walk's directory: no open there refuses a mount on the name)
            look = _openat2_missing or not os.fstatvfs(fd).f_flag & os.ST_NODEV or not chosen_by_no_other(os.fstat(fd))
        if len(self.dirs) >= self.keep:
            self.close()
        self.dirs[directory] = found = (fd, look)
        return found

    def open(self, path: str, checked: bool = True) -> int:
        """The file at the absolute `path`; `checked`: the caller already judged the name a regular file, else
        it is looked at (not followed) first and anything else refused unopened, but in a directory on a nodev
        mount no other user can have written (see the class). The caller checks the descriptor (fstat) before use,
        before any read. Raises Untrusted or OSError as open_listed does. (The replay's data pass inlines this.)"""
        directory, _, name = path.rpartition("/")
        fd, look = self.directory(directory or "/")
        if fd < 0:
            return open_listed(path, checked=checked)
        if not look:
            return open_unlooked(fd, name, path)  # nor through a mount on the name
        if not checked:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                raise not_regular(path, mode)
        return os.open(name, LISTED_READ, dir_fd=fd)

    def close(self) -> None:
        for fd, _ in self.dirs.values():
            if fd >= 0:
                os.close(fd)
        self.dirs.clear()

    def __enter__(self) -> ListedOpener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parts(path: str) -> list[str]:
    """The components of `path` as pathlib's `parts` has them, without its root ("/"): no "" and no "."."""
    return [p for p in path.split("/") if p and p != "."]


LINK_HINT = ("root follows only links that root owns (a user must not decide what root reads or writes), and tunectl "
             "follows no link another user owns: name the file or device itself")


class Landed:
    """Where `walk` led: `path` with every link followed (as this machine names it: ``/dev/...`` for a tree's dev
    root), `st` the look (not followed) at what is there (None: missing, with `missing_ok`), `untrusted` the first
    directory passed that another user can change (as `problem` says it; empty: none), and `opened` what the
    caller's `last` made of the last component."""

    __slots__ = ("path", "st", "untrusted", "opened")

    def __init__(self, path: str, st: os.stat_result | None, untrusted: str = "", opened: object = None) -> None:
        self.path, self.st, self.untrusted, self.opened = path, st, untrusted, opened


class OthersLink(Untrusted):
    """A symbolic link on the way that neither root nor the user owns: `path` is the link."""


def walk(path: str, tree: str | None = None, *, links: bool = True, missing_ok: bool = False,
         last: Callable[[int, str, os.stat_result, str], object] | None = None,
         judge: Callable[[os.stat_result], str | None] | None = None) -> Landed:
    """The one walk of a path the way root may follow it: which links root follows, through which directories.

    From ``/`` one component at a time, each looked at (not followed) relative to a descriptor of the directory
    before it (O_PATH, O_NOFOLLOW: a directory swapped for a link between two steps fails the step, never leads
    elsewhere). A symbolic link is followed only when root or the user owns it; every directory passed is judged
    by `problem` and the first that fails is kept (`Landed.untrusted`: the caller decides what it may take
    through one). `tree`: the dev root of a tree that describes another machine, standing for ``/dev`` (the only
    part of it the walk sees; `path` is then as the tree names it). `links=False`: any link is refused (ELOOP).
    `last(dir_fd, name, st, shown)`: called on the last component as looked at (a link too, before it is followed);
    what it returns ends the walk (`Landed.opened`), None goes on. `judge`: a directory passed (``/`` too) that
    it finds fault with is refused (Untrusted) instead of kept.

    Raises OthersLink (another user's link); OSError naming the path walked so far: ELOOP (a link loop, or any
    link with `links=False`), ENOENT (missing: with `missing_ok`, only a missing last component returns, `st`
    None), ENOTDIR (`strerror`: what is there, "not a directory"), EXDEV (outside a tree's dev root), or as
    the system says (EACCES).
    """
    todo = _parts(os.path.abspath(path) if tree is None else path)
    at: list[str] = []  # the components reached so far: a path with no link on it
    fds = [os.open("/", _PATH_DIR) if tree is None else -1]  # a descriptor of each directory of `at`; -1: a tree's /
    try:
        st: os.stat_result | None = os.fstat(fds[0]) if tree is None else None
        why = (judge or problem)(st) if st is not None else None
        if why and judge:
            raise OthersMayWrite("/", why)
        untrusted = f"/: {why}" if why else ""  # a tree's dev root and the directories above it: `roots.check_trusted`
        followed = 0
        settled = st is not None  # `st` is the look at what `at` ends on (not after a "..", nor a link followed)
        while todo:
            part = todo.pop(0)
            if part == "..":
                if at:
                    at.pop()
                    os.close(fds.pop())
                settled = False
                continue
            shown = "/" + "/".join(at + [part])
            if fds[-1] < 0 and part != "dev":
                raise OSError(errno.EXDEV, "outside the tree's dev root", shown)
            try:
                st = os.lstat(tree) if fds[-1] < 0 else os.stat(part, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                if missing_ok and not todo:
                    return Landed(shown, None, untrusted)
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from None
            if not todo and last is not None and (opened := last(fds[-1], part, st, shown)) is not None:
                return Landed(shown, st, untrusted, opened)
            if stat.S_ISLNK(st.st_mode):
                followed += 1
                if not links or followed > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
                if st.st_uid not in trusted_uids():
                    raise OthersLink(shown, f"a symbolic link owned by {owner(st.st_uid)}, not root", LINK_HINT)
                target = os.readlink(part, dir_fd=fds[-1])
                if target.startswith("/"):
                    at = []
                    while len(fds) > 1:
                        os.close(fds.pop())
                todo = _parts(target) + todo
                settled = False
                continue
            if todo:
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, f"{kind(st.st_mode)}, not a directory", shown)
                try:  # a directory swapped for a link or another one since the look (or gone): refused
                    fd = open_as_looked(None if fds[-1] < 0 else fds[-1], tree if fds[-1] < 0 else part, st,
                                        _PATH_DIR)
                except FileNotFoundError:
                    fd = None
                if fd is None:
                    raise Untrusted(shown, "changed while tunectl looked at it (a directory on the way was "
                                    "replaced)", "run again; if it recurs, find who changes it")
                fds.append(fd)
                why = (judge or problem)(st)
                if why and judge:
                    raise OthersMayWrite(shown, why)
                if why and not untrusted:
                    untrusted = f"{shown}: {why}"
            at.append(part)
            settled = True
        # Ended on a directory by a ".." or a link to "/" (its target has no last component to look at; `st` is still
        # the look at the link): what is there now, through its descriptor.
        if not settled:
            if fds[-1] < 0:
                raise OSError(errno.EXDEV, "outside the tree's dev root", "/")
            st = os.fstat(fds[-1])
        return Landed("/" + "/".join(at), st, untrusted)
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def open_as_looked(dir_fd: int | None, name: str, look: os.stat_result, flags: int) -> int | None:
    """`name` in the directory open as `dir_fd` (None: `name` is absolute) opened with `flags` and O_NOFOLLOW, only
    if it is still what the caller looked at (`look`: an lstat, a DirEntry's stat). None when another thing stands
    at the name now: a symbolic link (ELOOP; ENOTDIR with O_DIRECTORY), another type or another file (device and
    inode); the caller refuses it in its own words. The one open after a look of every walk by descriptor.
    Raises OSError for what is no change: gone (ENOENT: the caller's "vanished"), a permission, no descriptors."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.ENOTDIR and flags & os.O_DIRECTORY):
            return None
        raise
    try:
        now = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not is_looked(now, look):
        os.close(fd)
        return None
    return fd


def is_looked(now: os.stat_result, look: os.stat_result) -> bool:
    """What was opened (`now`, its fstat) is what was looked at (`look`): the same device, inode and type."""
    return (now.st_dev, now.st_ino, stat.S_IFMT(now.st_mode)) == (look.st_dev, look.st_ino, stat.S_IFMT(look.st_mode))


def changed_opening(path: str | os.PathLike) -> Untrusted:
    """The refusal of a file another thing stood at by its open than at the look before it."""
    return Untrusted(path, "changed while tunectl opened it", "run again; if it recurs, find who changes it", True)


def open_walked(path: str, kinds: frozenset[int]) -> tuple[int, os.stat_result]:
    """`path` opened once for reading, as `walk` follows it: a link on the way or at the end only when root or the
    user owns it, the last component looked at first and opened only when its type is one of `kinds` (stat's
    S_IFREG, S_IFBLK): a named pipe, a character device (/dev/zero, a watchdog) or a directory put there is
    refused, never opened. Opened O_NOFOLLOW and O_NONBLOCK (cleared once open: a read of a file or a block device
    never blocks on it anyway), then compared with the look (`open_as_looked`). The caller reads through the
    descriptor from here on, never by the name again. Its descriptor and fstat.
    Raises OthersLink (another user's link, on the way or at the end), Untrusted (a link loop, a type not in
    `kinds`, a change since the look) or OSError (ENOENT, ENOTDIR, EACCES ...) naming `path`."""
    import fcntl

    wanted = " or ".join(_KIND[k] for k in sorted(kinds, key=lambda k: _KIND[k]))

    def opened(dir_fd: int, name: str, st: os.stat_result, shown: str) -> tuple[int, os.stat_result] | None:
        if stat.S_ISLNK(st.st_mode):
            return None  # followed by the walk when root or the user owns it
        if stat.S_IFMT(st.st_mode) not in kinds:  # `shown`: the path the walk looked at (no "..", a link's target)
            raise Untrusted(path, f"{kind(st.st_mode)}, not {wanted}", f"name {wanted}; {shown} is {kind(st.st_mode)}",
                            True)
        fd = _opened_as_looked(path, dir_fd, name, st, _READ | os.O_NOCTTY)
        return fd, os.fstat(fd)

    try:
        landed = walk(path, last=opened)
    except OthersLink as e:
        raise OthersLink(path, e.found if e.path == path else f"{e.path} on its way: {e.found}", LINK_HINT,
                         True) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_loop(path, "file", True) from None
        raise OSError(e.errno, e.strerror, path) from None
    # `opened` looked at no last component: `path` is "/" (a ".." in it is gone by abspath), or its last link's
    # target ends in ".." or is "/": a directory
    if landed.opened is None:
        raise Untrusted(path, f"a directory, not {wanted}", f"name {wanted}; {path} is a directory", True)
    fd, st = landed.opened  # type: ignore[misc]
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd, st


def _regular_as_looked(path: str, dir_fd: int, name: str, st: os.stat_result, flags: int, links: bool) -> int:
    """The regular file `name` in `dir_fd` (`path`) opened only if it is still what `st` (an lstat) saw: anything
    else refused, a link as `links` says (Untrusted, or ELOOP for the caller to walk on or refuse)."""
    if stat.S_ISLNK(st.st_mode) and links:
        raise Untrusted(path, "a symbolic link", "list the file itself, not a link to it", True)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    return _opened_as_looked(path, dir_fd, name, st, flags)


def _opened_as_looked(path: str, dir_fd: int, name: str, st: os.stat_result, flags: int) -> int:
    """`open_as_looked`, with another thing at the name since the look refused as a change (Untrusted naming
    `path`): the one open after the look of `open_walked` and `_walk_open`."""
    fd = open_as_looked(dir_fd, name, st, flags)
    if fd is None:
        raise changed_opening(path)
    return fd


def _walk_open(path: str, flags: int, links: bool = True) -> int:
    try:
        fd = walk(path, links=links,
                  last=lambda dir_fd, name, st, _shown: _regular_as_looked(path, dir_fd, name, st, flags, links)).opened
    except OthersLink as e:
        raise Untrusted(path, f"{e.path} on its way: {e.found}", LINK_HINT, True) from None
    except OSError as e:
        if e.errno == errno.ELOOP and not links:
            raise Untrusted(path, "changed while tunectl looked at it (a part became a symbolic link)",
                            "run again; if it recurs, find who changes it", True) from None
        if e.errno == errno.ELOOP:
            raise Untrusted(path, "a symbolic link loop", "list the file by a path without another user's links",
                            True) from None
        if e.filename == path:
            raise
        raise OSError(e.errno, e.strerror, path) from None
    if not isinstance(fd, int):  # "/", or a path whose last link's target ends in ".." or is "/" (as open_walked)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return fd


DIR_READ = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # a directory to list, never through a link


def open_landed(landed: Landed) -> int | None:
    """The directory `walk` landed on (a path with no link on it, and the walk's look at it: the one judgement of
    which links root may follow) opened to list (DIR_READ) for a caller that walks the tree by descriptor from
    here on: by that path, following no link on the way, and compared with the look (`open_as_looked`). None
    when it changed since (a link swapped in on the way, another directory at the name). Raises OSError (gone,
    a permission, out of descriptors)."""
    assert landed.st is not None
    parent, _, name = landed.path.rpartition("/")
    if not name:  # "/"
        return open_as_looked(None, "/", landed.st, DIR_READ)
    try:
        dir_fd = _walk_no_link(parent or "/", _PATH_DIR)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise
    try:
        return open_as_looked(dir_fd, name, landed.st, DIR_READ)
    finally:
        os.close(dir_fd)


def open_regular(path: str | os.PathLike, trusted: bool = False, flags: int = _READ,
                 resolved: bool = False, decides: bool = False) -> tuple[int, os.stat_result]:
    """A descriptor on the regular file at `path` (not followed if a symbolic link) and its stat.

    Opened without blocking, so a named pipe or a tty is refused, never waited on.
    `trusted`: the file and its directories must also pass `problem`. `resolved`: `path`
    was resolved (realpath) and judged; it is opened through no link at all (`open_listed`).
    `decides`: its text decides what root does; as root, one another user owns or may write is refused
    (`chosen_by_other`, judged on the open file: what was judged is what is read).
    """
    if trusted:
        check_dir(os.path.dirname(os.path.abspath(path)), final=True)
    try:
        fd = open_listed(str(path), flags, checked=True, links=False) if resolved else os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Untrusted(path, "a symbolic link", "name the file itself, not a link to it", True) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        why = problem(st) if trusted else None
        if why:
            raise OthersMayWrite(path, why)
        why = chosen_by_other(st) if decides else None
        if why:
            raise Untrusted(path, f"{acl_said(path, why)}: as root, tunectl acts on no file another user can change",
                            decides_hint(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | os.PathLike, limit: int, trusted: bool = False, resolved: bool = False,
                 decides: bool = False, whole: bool = False) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path` (see `open_regular`); `whole`: all of it or TooLarge
    (`read_whole`)."""
    return read_regular_stat(path, limit, trusted, resolved, decides, whole)[0]


def read_regular_stat(path: str | os.PathLike, limit: int, trusted: bool = False, resolved: bool = False,
                      decides: bool = False, whole: bool = False) -> tuple[bytes, os.stat_result]:
    """`read_regular`, and the fstat of the very file read (its owner and mode, for a copy to take: `like`)."""
    fd, st = open_regular(path, trusted, resolved=resolved, decides=decides)
    try:
        return read_whole(fd, path, limit) if whole else _read_up_to(fd, limit), st
    finally:
        os.close(fd)


def read_whole(fd: int, path: str | os.PathLike, cap: int) -> bytes:
    """All of the file open as `fd` (`path`, to name it), or TooLarge when it holds more than `cap` bytes: read up
    to one byte past the cap, so a file that grows while it is read is refused, never taken in part. The reader
    of every file that must be whole (a rules file, an fstab, a tuned profile's file); each says TooLarge its way."""
    data = _read_up_to(fd, cap)
    if len(data) > cap:
        raise TooLarge(path, cap, max(len(data), os.fstat(fd).st_size))
    return data


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks, left = [], limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _replace_hint(path: Path, mode: int) -> str:
    """What to do when the path to write is no regular file. A device, pipe or socket (`-o /dev/full`,
    `--csv /dev/stdout`) is never to be moved aside: the output goes to a file instead."""
    if stat.S_ISDIR(mode):
        return f"name a file, not a directory (a new path, or a regular file to replace); or move {path} aside"
    return ("tunectl writes only regular files, whole (a temp file renamed over the old one): name a new path or a "
            "regular file")


def atomic_write(path: Path, data: bytes, mode: int = 0o644, like: Path | os.stat_result | None = None,
                 verify: Callable[[Path], None] | None = None, shared_dir: bool = False,
                 tmp_prefix: str | None = None) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never half of one.

    The temp file is created with O_EXCL beside `path`, through a descriptor of
    the directory, and renamed over `path`: a link at `path` is replaced, never
    written through. The directory must pass `check_dir`; `shared_dir` (an output
    a user named, such as a CSV in their home or /tmp): any directory the path
    names. A `path` that is there and is neither a regular file nor a link is
    refused. A link at an output's path that root or the user owns (/dev/stdout, a
    "latest" link) is followed; its target passes the same checks, so a
    terminal or pipe there is refused, never replaced. `like`: the temp file takes
    that file's owner and mode (a stat: of a file the caller already has open, so nothing is opened again). `verify(tmp)`
    runs on the synced temp file before the rename; if it raises, `path` is untouched.
    `tmp_prefix`: the temp file's name before its random part (default ``.NAME.``), so a
    sweep after a killed writer can tell its own files.
    """
    stop_not_said()  # a stop Python dropped comes before the file is replaced (a journal, a rules file), not after
    with PendingWrite(path, mode, like, shared_dir, tmp_prefix) as pending:
        pending.commit(data, verify)


def _output_target(path: Path) -> Path:
    """Where an output a user named is written: `path`, or, when a link root or the user owns stands there (a
    "latest" link, /dev/stdout), the path it leads to, as `walk` follows it (from descriptors, through no link
    another user owns: behind one, even root's own link at the end is that user's choice). Another user's link
    at the end is not followed: it is replaced. When the walk fails, `path` as it is: `open_dir` then says why."""
    from pathlib import Path  # here: a replay at boot does not import pathlib

    followed = []

    def at_end(_dir_fd: int, _name: str, st: os.stat_result, shown: str) -> str | None:
        if stat.S_ISLNK(st.st_mode) and st.st_uid in trusted_uids():
            followed.append(shown)
            return None  # followed: its target is the end now
        return shown

    try:
        landed = walk(os.fspath(path), missing_ok=True, last=at_end)
    except (OSError, Untrusted):
        return path
    return Path(landed.path) if followed else path


TMP_DIGITS = 12  # hex digits of a temp file's random part (`PendingWrite`): how a sweep tells tunectl's own


def sweep_temps(dir_fd: int, prefix: str) -> list[str]:
    """Remove the temp files a killed tunectl writer (`PendingWrite`) left in the directory open at `dir_fd`; their
    names. Only what is surely tunectl's own goes: a name `prefix` + 12 hex digits, a regular file (no link, no
    device or pipe: looked at before any open, so none is opened), owned by this user. A file a live writer still
    holds (its flock, taken as it is created) is left; a writer whose new file is swept before it takes the lock
    sees it unlinked and makes another (`PendingWrite`). A directory that cannot be listed sweeps nothing."""
    import fcntl
    import re

    gone: list[str] = []
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return gone
    tail = re.compile(f"[0-9a-f]{{{TMP_DIGITS}}}")

    def not_held(fd: int) -> bool:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a running writer's: BlockingIOError, it stays
        return True

    for name in names:
        if name.startswith(prefix) and tail.fullmatch(name, len(prefix)) and remove_own(dir_fd, name, not_held):
            gone.append(name)
    return gone


def remove_own(dir_fd: int, name: str, mine: Callable[[int], bool]) -> bool:
    """Unlink `name` in the directory open at `dir_fd` (opened through no link another user owns: `open_dir`) only
    when it is surely this process's own file: a regular file (no link, device or pipe: looked at before any open,
    so none is opened), owned by this user, still the file looked at when opened, and `mine(fd)` says so of its
    content (an OSError it raises: no). Whether it was removed; an OSError anywhere leaves the name. The one rule
    for a file tunectl removes beside one it writes (`sweep_temps`; a stale `preload.columns` file).

    The name may be swapped between the last look and the unlink only by someone who may write the directory,
    who could as well remove that name: an unlink reaches no file elsewhere (it never follows a link)."""
    import contextlib

    with contextlib.suppress(OSError):
        looked = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(looked.st_mode) or looked.st_uid != os.geteuid():
            return False
        fd = open_as_looked(dir_fd, name, looked, _READ | os.O_NOCTTY)
        if fd is None:
            return False  # another file (or a link) came to stand at the name since the look
        try:
            if not mine(fd):
                return False
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (looked.st_dev, looked.st_ino):
                return False
            os.unlink(name, dir_fd=dir_fd)
            return True
        finally:
            os.close(fd)
    return False


class PendingWrite:
    """`atomic_write` in two steps: every check and the temp file now, the data and the rename at `commit`.

    For an output filled by minutes of work (a bench sweep's CSV): a path that cannot be written is refused
    before the work starts, not after it. Until `commit`, `path` is untouched; leaving the `with` block without
    one (an error, Ctrl-C) removes the temp file. A writer SIGKILLed meanwhile leaves it: `sweep` removes such
    leftovers beside `path` first (`sweep_temps`; `swept` names them)."""

    def __init__(self, path: Path, mode: int = 0o644, like: Path | os.stat_result | None = None, shared_dir: bool = False,
                 tmp_prefix: str | None = None, sweep: bool = False) -> None:
        from pathlib import Path  # here: a replay at boot does not import pathlib

        path = _output_target(Path(path)) if shared_dir else Path(path)
        st = like if isinstance(like, os.stat_result) else None
        if like is not None and st is None:
            fd, st = open_regular(like)
            os.close(fd)
        self.path = path
        self.parent, self._dir_fd = open_dir(path.parent, shared=shared_dir)
        self._fd = -1
        prefix = tmp_prefix or f".{path.name}."
        self.swept: list[str] = []
        try:
            self._check_target()
            if sweep:
                self.swept = sweep_temps(self._dir_fd, prefix)
            self._create(prefix)
            os.fchmod(self._fd, stat.S_IMODE(st.st_mode) if st else mode)
            if st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(self._fd, st.st_uid, st.st_gid)
        except BaseException:
            self.abort()
            raise

    def _create(self, prefix: str) -> None:
        """The temp file, locked (flock) for as long as this writer lives, so a sweep (`sweep_temps`) leaves it."""
        import fcntl

        for _ in range(3):
            # secrets.token_hex's own bytes (os.urandom), without its import of hashlib, hmac and random (OpenSSL)
            self._tmp = f"{prefix}{os.urandom(TMP_DIGITS // 2).hex()}"
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                               dir_fd=self._dir_fd)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)  # waits only while a sweep looks at it
            except OSError:
                return  # a filesystem without flock: a sweep cannot lock the file either, so it leaves it
            if os.fstat(self._fd).st_nlink:
                return
            os.close(self._fd)  # swept between its creation and the lock: another name
            self._fd, self._tmp = -1, ""
        raise OSError(errno.EAGAIN, "each temp file was removed as it was made", str(self.parent))

    def _check_target(self) -> None:
        import contextlib

        with contextlib.suppress(FileNotFoundError):
            found = os.stat(self.path.name, dir_fd=self._dir_fd, follow_symlinks=False)
            if not (stat.S_ISREG(found.st_mode) or stat.S_ISLNK(found.st_mode)):
                raise Untrusted(self.path, irregular(found.st_mode),
                                _replace_hint(self.path, found.st_mode))

    def commit(self, data: bytes, verify: Callable[[Path], None] | None = None) -> None:
        """Write `data`, sync, run `verify(tmp)`, and rename the temp file over `path` (checked again first)."""
        try:
            with os.fdopen(self._fd, "wb") as f:
                self._fd = -1
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if verify is not None:
                verify(self.parent / self._tmp)
            self._check_target()  # the work took minutes: whatever came to stand at `path` meanwhile is checked
            os.replace(self._tmp, self.path.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            self._tmp = ""
            os.fsync(self._dir_fd)
        finally:
            self.abort()

    def abort(self) -> None:
        """Remove the temp file (if not renamed) and close; `path` is left as it was. Safe to call twice."""
        import contextlib

        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if getattr(self, "_tmp", ""):
            with contextlib.suppress(OSError):
                os.unlink(self._tmp, dir_fd=self._dir_fd)
            self._tmp = ""
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def __enter__(self) -> PendingWrite:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.abort()

