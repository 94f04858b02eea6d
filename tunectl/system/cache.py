"""The validation cache (STATE/validated/): an optimisation, never a source of settings.

An entry records that one profile text passed one checker. It is used only
when the directory and the file are trusted (`tunectl.system.trust`: root's,
or the invoking user's when tunectl does not run as root; not writable by
anyone else) and the entry names the SHA-256 of the very text being loaded
and of the checker; anything else is ignored and the text is checked again.
The entry's document is the checker's verdict (its warnings); the settings are
always parsed from the text (`tunectl.profile.library.check_file`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from tunectl.system import trust

MAX_ENTRY_BYTES = 16 << 20


class ValidationCache:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)

    def get(self, key: str, text_sha256: str, checker: str) -> dict | None:
        """The document stored for `key` when the entry is trusted and names this text and checker."""
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
        with contextlib.suppress(OSError, trust.Untrusted, ValueError, TypeError):
            data = json.dumps({"text_sha256": text_sha256, "checker": checker, "document": document}).encode()
            trust.ensure_dir(self.dir, 0o755)
            trust.atomic_write(self.dir / f"{key}.json", data, 0o644)
