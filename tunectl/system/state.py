"""The state store: the journal of original values, the active profile, and the lock.

Every file is replaced atomically (temp file, fsync, rename, fsync of the
directory) and every mutation happens under an exclusive flock, so a udev
hot-plug run and an Ansible run never interleave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tunectl.errors import StateError

JOURNAL_VERSION = 1


def atomic_write(path: Path, data: bytes, mode: int = 0o644, like: Path | None = None,
                 verify: Callable[[Path], None] | None = None) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never half of one.

    `like`: the temp file takes that file's owner and mode (an edited /etc/fstab
    stays root:root 0644 even when its mode was unusual). `verify(tmp)` runs on
    the synced temp file before the rename; if it raises, `path` is untouched.
    """
    import tempfile

    st = os.stat(like) if like is not None else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st else mode)
            if st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if verify is not None:
            verify(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class StateStore:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)

    def _ensure_dir(self) -> None:
        try:
            self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as e:
            raise StateError(f"cannot create state directory {self.dir}: {e.strerror}",
                             hint="run as root, or point --state-dir / TUNECTL_STATE_DIR at a writable directory") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self._ensure_dir()
        try:
            fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StateError(f"cannot open lock {self.dir / 'lock'}: {e.strerror}",
                             hint="run as root, or use --state-dir") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_json(self, name: str, default: Any) -> Any:
        path = self.dir / name
        try:
            text = path.read_text()
        except FileNotFoundError:
            return default
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise StateError(f"cannot read {path}: {e.strerror}", hint="run as root") from None
            raise
        try:
            return json.loads(text)
        except ValueError:
            raise StateError(f"{path} is not valid JSON; it may have been edited by hand",
                             hint="move it aside (tunectl will start a new one), or repair it") from None

    def _write_json(self, name: str, data: Any) -> None:
        self._ensure_dir()
        try:
            atomic_write(self.dir / name, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        except OSError as e:
            raise StateError(f"cannot write {self.dir / name}: {e.strerror}", hint="run as root, or use --state-dir") from None

    def journal(self) -> dict:
        data = self._read_json("journal.json", None)
        if data is None:
            return {"version": JOURNAL_VERSION, "devices": {}}
        if data.get("version") != JOURNAL_VERSION:
            raise StateError(f"{self.dir / 'journal.json'} has version {data.get('version')}, expected {JOURNAL_VERSION}")
        return data

    def save_journal(self, journal: dict) -> None:
        self._write_json("journal.json", journal)

    def active_profile(self) -> dict | None:
        return self._read_json("active.json", None)

    def save_active_profile(self, record: dict) -> None:
        self._write_json("active.json", record)
