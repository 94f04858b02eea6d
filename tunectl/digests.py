"""SHA-256 from the interpreter's own module, not OpenSSL's.

`hashlib` loads `_hashlib`, which maps libcrypto: ~4 ms of CPU at the start of every
plan, apply and verify that hashes one small profile or state file. The built-in
`_sha2` (3.12 and later) or `_sha256` (3.11) computes the same digest; hashlib is the
fall-back for an interpreter built without them.
"""

from __future__ import annotations

try:
    from _sha2 import sha256 as _new  # type: ignore[import-not-found]
except ImportError:
    try:
        from _sha256 import sha256 as _new  # type: ignore[import-not-found,no-redef]
    except ImportError:
        from hashlib import sha256 as _new  # type: ignore[assignment]


TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Protocol

    class Digest(Protocol):
        def update(self, data: bytes, /) -> None: ...
        def digest(self) -> bytes: ...
        def hexdigest(self) -> str: ...


def sha256(*parts: bytes) -> Digest:
    """A SHA-256 hash object fed `parts` in order."""
    digest = _new()
    for part in parts:
        digest.update(part)
    return digest
