"""The state store: the journal of original values, the active profile, and the lock.

Every file is replaced atomically (temp file, fsync, rename, fsync of the
directory) and every mutation happens under an exclusive flock, so a udev
hot-plug run and an Ansible run never interleave.

Each state file keeps generations: a save first links the current file to
``NAME.1`` (after ``NAME.1`` moved to ``NAME.2``), then replaces ``NAME``. Every
generation carries a SHA-256 of its content, so a truncated, hand-edited or
bit-rotted file is recognised; reading falls back to the newest generation that
is intact and says so. Damage an administrator has to fix (a directory where
the file should be, no permission, a file from a newer tunectl, a full disk)
is a `StateError` (exit 5), never a guess.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from tunectl import __version__
from tunectl.digests import sha256
from tunectl.errors import NotPermitted, StateError, UsageError
from tunectl.system import trust
from tunectl.system.cache import ValidationCache
from tunectl.system.lockfile import acquire, holder, utc_now
from tunectl.system.trust import Untrusted, atomic_write

JOURNAL = "journal.json"
ACTIVE = "active.json"
HOLD = "hold.json"  # a running bench's record (`tunectl.system.hold`)
JOURNAL_VERSION = 2  # 2: generations, a checksum, who changed each value; 1 (no checksum) is still read
GENERATIONS = 3  # NAME, NAME.1, NAME.2
MAX_STATE_BYTES = 64 << 20  # a journal of every disk of a large server is a few hundred KiB
_META = ("version", "generation", "saved", "tunectl", "sha256")
TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")


def kernel_name(name: object) -> bool:
    """A block device's kernel name as tunectl writes it in a state record (sda, nvme0n1, dm-0; cciss!c0d0: the
    journal's devices, the devices a running bench holds): verify prints them and passes over a held device's
    drift, so a name with a slash, a blank or a control character (a line break that would forge verify's note)
    makes the record one this tunectl did not write."""
    return isinstance(name, str) and 0 < len(name) <= 255 and not any(c <= " " or c in "/\x7f" for c in name)


class _Damaged(ValueError):
    """The file exists but its content is not a state file tunectl wrote: fall back to an older generation."""


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _sha256(body: dict) -> str:
    return sha256(_canonical(body)).hexdigest()


def seal(payload: dict, generation: int) -> bytes:
    """The bytes of one generation of a state file: the payload, its version and generation, and their checksum."""
    body = dict(payload, version=JOURNAL_VERSION, generation=generation, tunectl=__version__, saved=utc_now())
    body["sha256"] = _sha256(body)
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def unseal(raw: bytes) -> dict:
    """Bytes of a state file -> its payload and meta keys; `_Damaged` says why they cannot be trusted.

    Raises StateError for a file from a newer tunectl: falling back would throw its records away.
    """
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise _Damaged(f"not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise _Damaged(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise _Damaged("not valid JSON (nested too deeply)") from None
    except ValueError:  # a number of more than 4300 digits (Python's limit): tunectl never writes one
        raise _Damaged("not valid JSON (a number far too long)") from None
    if not isinstance(data, dict):
        raise _Damaged("not a tunectl state file (a JSON object is expected)")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _Damaged(f"not a tunectl state file (version {version!r})")
    if version > JOURNAL_VERSION:
        raise _Newer(version, __version__)
    if version >= 2:
        body = dict(data)
        recorded = body.pop("sha256", None)
        if recorded != _sha256(body):
            raise _Damaged("its checksum does not match: it was cut short or changed after tunectl wrote it")
    return data


def _generation_of(data: dict) -> int | None:
    """A state file's generation: 0 when it has none (version 1), None when it is not a whole number >= 0."""
    generation = data.get("generation", 0)
    if isinstance(generation, int) and not isinstance(generation, bool) and 0 <= generation < 2**63:
        return generation
    return None


def _shown_value(value: object) -> str:
    """A hand-made value, short and on one line, for a warning."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:39] + "…"


class _Newer(Exception):
    def __init__(self, version: int, ours: str) -> None:
        super().__init__(version, ours)
        self.version, self.ours = version, ours


def _blocking_name(e: OSError, target: Path) -> tuple[str, os.stat_result] | None:
    """What stopped a save of `target` when it is another name than `target`: a save moves NAME.1 to NAME.2,
    links NAME as .NAME.1.link and renames that over NAME.1 (and keeps a damaged NAME as NAME.damaged), and a
    directory at one of those names makes the call fail. The name the failed call was given that is no regular
    file (the destination first), with its look; None when the error is `target`'s own (a full disk, a read-only
    filesystem, a file on the way that a walk named: `_in_the_way`)."""
    if _in_the_way(e) is not None:
        return None
    for name in (e.filename2, e.filename):
        if name is None or os.fspath(name) == os.fspath(target):
            continue
        try:
            st = os.lstat(name)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            return os.fspath(name), st
    return None


class StateStore:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self._warnings: dict[str, str] = {}  # name -> the fallback of its last read, for the command to print
        self._read_from: dict[str, int | None] = {}  # name -> generation index read (None: no file yet)
        self._generation: dict[str, int] = {}
        # name -> (what the files looked like, what was read and parsed): a command reads each file once, however
        # many parts of it ask; any change of the files (or the directory) since makes it read and check them again.
        # What the parse makes is immutable (tunectl.tuning.journal, tunectl.tuning.intent): kept, never copied.
        self._memo: dict[str, tuple[tuple, object]] = {}
        self._locked = False
        self.command = "tunectl"  # who holds the lock, as a waiting command shows it
        self.wait_seconds: float | None = None  # None: wait for the lock as long as it takes
        self.on_wait: Callable[[str], None] | None = None  # told once, when the lock is held by another run
        self.fake_roots: list[str] = []  # the run looks at a tree, not this machine: its state is not written here
        self._deferred_cache: ValidationCache | None = None  # handed out before the directory existed

    def _untrusted(self, e: Untrusted) -> StateError:
        return StateError(f"state directory {self.dir} cannot be trusted: {e.message}",
                          hint=f"{e.hint}; or point --state-dir / TUNECTL_STATE_DIR at a directory only root can write")

    def _ensure_dir(self) -> None:
        if self.fake_roots:
            raise UsageError(f"a run on a fake tree ({', '.join(self.fake_roots)}) does not write the real state "
                             f"directory {self.dir}: its journal would hold values of another machine as this one's "
                             "originals", hint="pass --state-dir DIR (or TUNECTL_STATE_DIR) for the tree's own state",
                             code="fake-root-state", where=str(self.dir))
        try:
            trust.ensure_dir(self.dir, 0o755)
        except Untrusted as e:
            raise self._untrusted(e) from None
        except OSError as e:
            what = "it exists and is not a directory" if isinstance(e, FileExistsError) else _reason(e, self.dir)
            hint = "run as root, or point --state-dir / TUNECTL_STATE_DIR at a writable directory" \
                if e.errno in (errno.EACCES, errno.EPERM) else _hint(e, self.dir)
            if e.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
                raise NotPermitted(f"cannot create state directory {self.dir}: {what}", hint=hint) from None
            raise StateError(f"cannot create state directory {self.dir}: {what}", hint=hint) from None
        if self._deferred_cache is not None:
            cache, self._deferred_cache = self._deferred_cache, None
            cache.created()

    def exists(self) -> bool:
        """Whether the state directory is there; StateError when it is there but not root's alone, or cannot be
        reached (a loop of links, a file on its way: never taken for "nothing recorded")."""
        try:
            os.lstat(self.dir)
        except FileNotFoundError:
            return False
        except OSError:
            pass  # ELOOP, ENOTDIR: check_dir says what and where
        try:
            trust.check_dir(self.dir)
        except Untrusted as e:
            raise self._untrusted(e) from None
        except OSError as e:
            raise StateError(f"state directory {self.dir} cannot be used: {_reason(e, self.dir)}",
                             hint=_hint(e, self.dir)) from None
        return True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self._ensure_dir()
        lock = self.dir / "lock"
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
        try:
            fd = os.open(lock, flags, 0o600)
        except OSError as e:
            what = "a symbolic link" if e.errno == errno.ELOOP else _reason(e, lock)
            hint = f"remove {lock}; tunectl creates it again" if e.errno == errno.ELOOP else _hint(e, lock)
            if e.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
                raise NotPermitted(f"cannot open lock {lock}: {what}", hint="run as root") from None
            raise StateError(f"cannot open lock {lock}: {what}", hint=hint) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StateError(f"lock {lock} is {trust.irregular(st.st_mode)}",
                                 hint=f"remove {lock}; tunectl creates it again")
            why = trust.problem(st)
            if why:
                raise StateError(f"lock {lock} cannot be trusted: {trust.acl_said(lock, why)}",
                                 hint=f"remove {lock}; tunectl creates it again")
            self._acquire(fd, lock)
            self._locked = True
            # A writer killed mid-save leaves its temp file; with the lock held no writer runs, so they go
            # now, whether or not this run saves anything. A bench writes its hold under the lock too.
            for name in (JOURNAL, ACTIVE, HOLD):
                self._sweep(name)
            yield
        finally:
            self._locked = False
            os.close(fd)

    def _acquire(self, fd: int, lock: Path) -> None:
        acquire(fd, lock, self.command, self.wait_seconds, self.on_wait)

    def holder(self) -> str | None:
        """Who holds the lock right now (as it wrote itself into the lock file), or None when nobody does."""
        return holder(self.dir / "lock")

    # --- reading -------------------------------------------------------------------------------

    def generations(self, name: str) -> list[Path]:
        return [self.dir / name] + [self.dir / f"{name}.{i}" for i in range(1, GENERATIONS)]

    def _read_one(self, path: Path) -> dict | None:
        """One generation's content; None when the file does not exist."""
        try:
            fd, st = trust.open_regular(path, trusted=True)
        except FileNotFoundError:
            return None
        except Untrusted as e:
            if e.wrong_type:
                raise StateError(f"{path} is {e.found}",
                                 hint=f"move it aside (mv {path} {path}.moved); tunectl keeps its state in plain files") \
                    from None
            if e.path == str(path):  # this file, not the directory: another user's journal is never used
                raise StateError(f"{e.message}; tunectl does not use state it did not write",
                                 hint=f"move it aside (mv {path} {path}.moved) if you know where it came from") from None
            raise self._untrusted(e) from None
        except OSError as e:
            if e.errno == errno.EIO:
                raise _Damaged(f"cannot be read: {e.strerror}") from None
            raise StateError(f"cannot read {path}: {_reason(e, path)}", hint=_hint(e, path)) from None
        try:
            if st.st_size > MAX_STATE_BYTES:
                raise _Damaged(f"it is {st.st_size} bytes long; a state file is far smaller")
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as e:
            raise _Damaged(f"cannot be read: {e.strerror}") from None
        finally:
            os.close(fd)
        try:
            return unseal(b"".join(chunks))
        except _Newer as e:
            raise StateError(f"{path} was written by a newer tunectl (state format {e.version}; "
                             f"tunectl {e.ours} reads up to {JOURNAL_VERSION})",
                             hint="run the newer tunectl that wrote it; an older one would lose what it records") from None

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings.values())

    def forget_reads(self) -> None:
        """Start a new command: read every file afresh."""
        self._memo.clear()

    def _signature(self, paths: list[Path]) -> tuple:
        out: list[tuple | None] = []
        for path in (self.dir, *paths):
            try:
                st = os.lstat(path)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_dev, st.st_ino, st.st_mode, st.st_uid)
                       + ((st.st_size, st.st_mtime_ns, st.st_ctime_ns) if path != self.dir else ()))
        return tuple(out)  # the directory's times change with every other file written in it: not counted

    def load(self, name: str, parse: Callable[[dict], T]) -> T | None:
        """`parse` of the payload of the newest intact generation of `name`; None when there is none at all.

        `parse` raises ValueError (why) for a payload tunectl cannot use: that generation counts as damaged.
        """
        paths = self.generations(name)
        signature = self._signature(paths)
        memo = self._memo.get(name)
        if memo is not None and memo[0] == signature and name in self._read_from:
            return memo[1]  # type: ignore[return-value]
        data = self._load_files(name, paths, parse)
        self._memo[name] = (signature, data)
        return data

    def _load_files(self, name: str, paths: list[Path], parse: Callable[[dict], T]) -> T | None:
        self._warnings.pop(name, None)
        damage: list[str] = []
        for index, path in enumerate(paths):
            try:
                data = self._read_one(path)
                parsed = parse({k: v for k, v in data.items() if k not in _META}) if data is not None else None
            except ValueError as e:  # _Damaged, and a payload `parse` cannot use
                damage.append(f"{path.name}: {e}")
                continue
            if data is None:
                damage.append(f"{path.name}: missing")
                continue
            self._read_from[name] = index
            generation = _generation_of(data)
            self._generation[name] = generation or 0
            if generation is None:  # hand-made: said, not silently taken as 0
                self._warnings[name] = (f"tunectl: warning: {path}: its generation {_shown_value(data['generation'])} "
                                        "is not a whole number: counted as 0 (the next save writes generation 1)")
            if index:
                saved = f", saved {data['saved']}" if isinstance(data.get("saved"), str) else ""
                self._warnings[name] = (
                    f"tunectl: warning: {paths[0]} cannot be used ({damage[0].split(': ', 1)[1]}); "
                    f"falling back to {path} (generation {self._generation[name]}{saved}): "
                    "what was recorded after that generation is lost")
            return parsed
        if all(d.endswith(": missing") for d in damage):
            self._read_from[name] = None
            self._generation[name] = 0
            return None
        lost = "the original values it held are lost" if name == JOURNAL else "what it recorded is lost"
        raise StateError(f"no generation of {paths[0]} can be read ({'; '.join(damage)}): {lost}",
                         hint=self._start_over_hint(name))

    def _start_over_hint(self, name: str) -> str:
        if name == JOURNAL:
            return (f"the original values tunectl journalled cannot be restored; set the devices back by hand "
                    f"(a reboot brings kernel defaults), then move {self.dir}/{name}* aside and the next apply "
                    "starts a new journal")
        return f"move {self.dir}/{name}* aside; tunectl starts a new one"

    # --- writing -------------------------------------------------------------------------------

    def save(self, name: str, payload: dict, parse: Callable[[dict], object]) -> None:
        """Write `payload` as the newest generation of `name` (`parse`: as for `load`, to find the intact one)."""
        self._memo.pop(name, None)
        self._ensure_dir()
        if name not in self._read_from:
            self.load(name, parse)
        paths = self.generations(name)
        source = self._read_from[name]
        generation = self._generation.get(name, 0) + 1
        try:
            if self._locked:
                self._sweep(name)
            if source == 0:
                self._rotate(paths)
            elif source is not None:
                # Keep the unreadable file for a post-mortem; the intact generation becomes NAME.1.
                if paths[0].exists():
                    os.replace(paths[0], self.dir / f"{name}.damaged")
                for damaged in paths[1:source]:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(damaged)
                # Plain renames, not `_move`: each target is empty by now (unlinked above, or moved on the step
                # before), or, with NAME.1 intact, the name itself, which `_move` would unlink as a second name.
                for i, path in enumerate(paths[source:]):
                    if path.exists():
                        os.replace(path, paths[1 + i])
            atomic_write(paths[0], seal(payload, generation))
        except OSError as e:
            blocker = _blocking_name(e, paths[0])
            if blocker is not None:  # not NAME's own trouble: name what stands where a generation goes
                where, st = blocker
                raise StateError(f"cannot write {paths[0]}: {where} is {trust.irregular(st.st_mode)} (a save moves "
                                 f"the older generations along); {paths[0].name} still holds the previous state",
                                 hint=f"move {where} aside; tunectl keeps its state in plain files") from None
            raise StateError(f"cannot write {paths[0]}: {_reason(e, paths[0])}; it still holds the previous state",
                             hint=_hint(e, paths[0])) from None
        self._read_from[name] = 0
        self._generation[name] = generation

    def _rotate(self, paths: list[Path]) -> None:
        """NAME.1 -> NAME.2, then NAME linked as NAME.1: NAME itself is never missing."""
        for i in range(len(paths) - 1, 1, -1):
            if paths[i - 1].exists():
                _move(paths[i - 1], paths[i])
        tmp = self.dir / _link_name(paths[0].name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.link(paths[0], tmp)
        _move(tmp, paths[1])

    def _sweep(self, name: str) -> None:
        """Temp files of writers killed mid-save (only while we hold the lock: no writer is running). The one sweep
        of tunectl's temp files (`trust.sweep_temps`): only `atomic_write`'s own names, regular files this user
        owns, looked at before any open; a link, a directory or another user's file with a like name stays.
        `_rotate`'s ``.NAME.1.link`` goes too, by the same rule: a writer killed between its link and its rename
        leaves it, and a run that never saves (a rollback with nothing left to restore) would keep it for good."""
        with contextlib.suppress(OSError):
            fd = os.open(self.dir, trust.DIR_READ)
            try:
                trust.sweep_temps(fd, f".{name}.")
                # Only a second name of a generation: the file must have another name too (a killed rotation's
                # link always does; a lone copy stays for the next save's `_rotate` or a person to look at).
                trust.remove_own(fd, _link_name(name), lambda link: os.fstat(link).st_nlink > 1)
            finally:
                os.close(fd)

    # --- the journal and the record of intent (their types: tunectl.tuning.journal, tunectl.tuning.intent) ---

    def recovered(self, name: str = JOURNAL) -> bool:
        """True when `name` was read from an older generation (the current one is damaged or missing)."""
        return bool(self._read_from.get(name))

    def validation_cache(self) -> ValidationCache:
        """The cache of profile verdicts. Its directory is used when the state directory is trusted and writable
        and the run may write it: a run on a fake tree writes nothing in the real state directory (`fake_roots`),
        not even this cache (status and a refused apply each added a verdict there whenever /var/lib/tunectl
        existed); such a run gets a cache without a directory (the shipped profiles' verdicts only). When the
        state directory does not exist yet, what this run's checks pass is kept until the run creates it (the
        first apply on a machine: the verify after it checks nothing again)."""
        if self.fake_roots:
            return ValidationCache(None)
        if not self.exists():
            if self._deferred_cache is None:  # one per run: a second load of the profile finds what the first kept
                self._deferred_cache = ValidationCache(self.dir / "validated", deferred=True)
            return self._deferred_cache
        return ValidationCache(self.dir / "validated" if os.access(self.dir, os.W_OK) else None)


def _move(source: Path, target: Path) -> None:
    """Rename `source` over `target`, also when both are names of one file. rename(2) then does nothing and keeps
    both names: a save killed after its rotation, before NAME was written anew, leaves NAME and NAME.1 one file,
    and two such kills NAME, NAME.1 and NAME.2; the next rotation then kept NAME.1 and left its .NAME.1.link
    (a root test's rollback left one). The name that should be gone goes."""
    os.replace(source, target)
    with contextlib.suppress(FileNotFoundError):
        left, there = os.lstat(source), os.lstat(target)
        if (left.st_dev, left.st_ino) == (there.st_dev, there.st_ino):
            os.unlink(source)


def _link_name(name: str) -> str:
    """The name `_rotate` links NAME under before renaming it over NAME.1 (NAME itself is never missing)."""
    return f".{name}.1.link"


def _in_the_way(e: OSError) -> str | None:
    """What an ENOTDIR names as standing where a directory must be: `path` itself or a part of its path, as trust's
    walk names it (its `strerror` says what is there); None when the system said "Not a directory" of the whole
    path, naming no part."""
    if e.errno != errno.ENOTDIR or not e.filename or e.strerror == os.strerror(errno.ENOTDIR):
        return None
    return os.fsdecode(e.filename)


def _reason(e: OSError, path: Path) -> str:
    if e.errno == errno.EISDIR:
        return "it is a directory"
    if e.errno == errno.ENOTDIR:
        found = _in_the_way(e)
        if found is None:
            return "a part of its path is not a directory"
        return e.strerror if found == str(path) else f"{found}: {e.strerror}"
    return e.strerror or str(e)


def _hint(e: OSError, path: Path) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free some space on the filesystem holding {path.parent} (df {path.parent}), then run again"
    if e.errno == errno.EROFS:
        return f"{path.parent} is on a read-only filesystem; point --state-dir / TUNECTL_STATE_DIR at a writable one"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"run as root, or check the owner and mode of {path}"
    if e.errno == errno.ENOTDIR:  # what is in the way, never `path` below it (a path that cannot exist)
        found = _in_the_way(e)
        what = found if found is not None else f"the file on the way to {path}"
        return f"move {what} aside, or point --state-dir / TUNECTL_STATE_DIR elsewhere"
    if e.errno in (errno.EISDIR, errno.ELOOP):
        return f"move {path} aside; tunectl keeps its state in plain files"
    return f"check {path} and its filesystem"
