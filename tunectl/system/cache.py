"""The validation cache (STATE/validated/): an optimisation, never a source of settings.

An entry records that one profile text passed one checker. It is used only
when the directory and the file are trusted (`tunectl.system.trust`: root's,
or the invoking user's when tunectl does not run as root; not writable by
anyone else) and the entry names the SHA-256 of the very text being loaded
and of the checker; anything else is ignored and the text is checked again.
The entry's document is the checker's verdict (its warnings); the settings are
always parsed from the text (`tunectl.profile.library.check_file`).

The directory stays bounded: a write that finds more than MAX_ENTRIES entries
removes the oldest written down to KEEP_ENTRIES (entries for profiles long gone,
or for an older checker, are never read again; one still in use is checked
once more and written again), and temp files a killed writer left behind.

A cache without a directory holds nothing and keeps nothing (a run that may not write the state directory):
check_file still uses the verdicts shipped with the profiles (`tunectl.profile.shipped`). A deferred one
(the state directory does not exist yet) keeps what this run's checks passed until the run creates the
state directory (`created`): the first apply on a machine leaves its profile's verdict for the runs after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from tunectl.system import trust

MAX_ENTRY_BYTES = 16 << 20
MAX_ENTRIES, KEEP_ENTRIES = 256, 192  # a few KiB each; a library of a few dozen profiles over several upgrades
STALE_TEMP_SECONDS = 3600  # a temp file older than this is no write in progress
_HEX = frozenset("0123456789abcdef")


class ValidationCache:
    def __init__(self, directory: str | os.PathLike | None, deferred: bool = False) -> None:
        self.dir = None if directory is None else Path(directory)
        # deferred: (key, text digest, checker, document) of each put, until the state directory exists
        self._pending: list[tuple[str, str, str, dict]] | None = [] if deferred else None

    def get(self, key: str, text_sha256: str, checker: str) -> dict | None:
        """The document stored for `key` when the entry is trusted and names this text and checker."""
        if self._pending is not None:  # kept in this run, before the directory existed
            return next((d for k, sha, c, d in self._pending if (k, sha, c) == (key, text_sha256, checker)), None)
        if self.dir is None:
            return None
        try:
            raw = trust.read_regular(self.dir / f"{key}.json", MAX_ENTRY_BYTES, trusted=True)
            entry = json.loads(raw)
        except (OSError, trust.Untrusted, ValueError, RecursionError):
            return None
        if not isinstance(entry, dict) or entry.get("text_sha256") != text_sha256 or entry.get("checker") != checker:
            return None
        document = entry.get("document")
        return document if isinstance(document, dict) else None

    def put(self, key: str, text_sha256: str, checker: str, document: dict) -> None:
        """Store a verdict; a cache that cannot be written is no error (the next run checks again)."""
        if self.dir is None:
            return
        if self._pending is not None:
            self._pending.append((key, text_sha256, checker, document))
            return
        with contextlib.suppress(OSError, trust.Untrusted, ValueError, TypeError):
            data = json.dumps({"text_sha256": text_sha256, "checker": checker, "document": document}).encode()
            trust.ensure_dir(self.dir, 0o755)
            trust.atomic_write(self.dir / f"{key}.json", data, 0o644)
            self._prune()

    def created(self) -> None:
        """The state directory exists now (this run created it): the verdicts kept until now are stored."""
        pending, self._pending = self._pending or [], None
        for entry in pending:
            self.put(*entry)

    def _prune(self) -> None:
        """Remove the oldest entries beyond MAX_ENTRIES and stale temp files, through a descriptor of the
        trusted directory: only names this cache writes, and a link there is removed, never followed."""
        _, fd = trust.open_dir(self.dir)
        try:
            names = os.listdir(fd)
            entries = [name for name in names if _is_entry(name)]
            doomed = [name for name in names if name.startswith(".") and _is_temp(name)
                      and time.time_ns() - _mtime_ns(name, fd) > STALE_TEMP_SECONDS * 10**9]
            if len(entries) > MAX_ENTRIES:
                by_age = sorted(entries, key=lambda name: (_mtime_ns(name, fd), name))
                doomed += by_age[:len(entries) - KEEP_ENTRIES]
            for name in doomed:
                with contextlib.suppress(OSError):  # gone already (another writer pruned), or a directory
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)


def _is_entry(name: str) -> bool:
    """KEY.json, KEY being a SHA-256 in hex."""
    return len(name) == 69 and name.endswith(".json") and _HEX.issuperset(name[:64])


def _is_temp(name: str) -> bool:
    """.KEY.json.RANDOM: trust.atomic_write's temp file for an entry."""
    return len(name) == 83 and name[70] == "." and _is_entry(name[1:70]) and _HEX.issuperset(name[71:])


def _mtime_ns(name: str, fd: int) -> int:
    """When `name` (the entry itself, a link too) was written; 0 when another writer's pruning removed it."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime_ns
    except FileNotFoundError:
        return 0
