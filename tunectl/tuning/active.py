"""The record of the active profile: written by apply, trusted by later commands only when the file still is.

A profile given as a file is recorded by its absolute, resolved path, a name
on the search path by its name; both with the file they resolved to and the
SHA-256 of its text. A command run without -p acts on the record only while
that file is root's alone (`tunectl.system.trust`), still there, and unchanged.
"""

from __future__ import annotations

import hashlib
import os

from tunectl.errors import UsageError
from tunectl.profile.library import looks_like_path
from tunectl.profile.reader import MAX_PROFILE_BYTES
from tunectl.system import trust


def absolute_ref(ref: str | None) -> str | None:
    """A profile reference as apply records it: a file by its absolute resolved path, a name as it is."""
    return os.path.realpath(ref) if ref and looks_like_path(ref) else ref


def profile_record(ref: str, name: str, files: list[str]) -> dict:
    """The record of `ref` (see `absolute_ref`) as loaded: its name, files, and the hash of its first file."""
    record = {"ref": absolute_ref(ref), "name": name, "files": [os.path.realpath(f) for f in files]}
    try:
        text = trust.read_regular(os.path.realpath(files[0]), MAX_PROFILE_BYTES)
    except (OSError, trust.Untrusted):
        return record
    return dict(record, path=os.path.realpath(files[0]), profile_sha256=hashlib.sha256(text).hexdigest())


def same_profile(record: dict | None, name: str, files: list[str]) -> bool:
    """Whether the record is of this profile (the same name from the same files)."""
    return record is not None and (record.get("name"), record.get("files")) == (name, [os.path.realpath(f) for f in files])


def recorded_ref(record: dict) -> str:
    """The reference a command without -p acts on; UsageError (exit 2) when the file cannot be trusted now."""
    ref = str(record["ref"])
    again = f"pass -p PROFILE, or apply it again (tunectl apply -p {ref})"
    if looks_like_path(ref) and not os.path.isabs(ref):
        raise UsageError(f"the active profile was recorded as the relative path {ref}, which names a different "
                         "file in every directory; tunectl does not act on it", hint="pass -p PROFILE; the next "
                                                                                   "apply records an absolute path")
    path = record.get("path") if isinstance(record.get("path"), str) else (ref if looks_like_path(ref) else None)
    if path is None:
        return ref
    try:
        text = trust.read_regular(path, MAX_PROFILE_BYTES, trusted=True)
    except trust.Untrusted as e:
        raise UsageError(f"the active profile {e.message}: it cannot be trusted to decide what root writes",
                         hint=f"{e.hint}; or {again}") from None
    except OSError as e:
        raise UsageError(f"the active profile {path} cannot be read ({e.strerror}): moved or removed since it "
                         "was applied", hint=again) from None
    if "profile_sha256" in record and hashlib.sha256(text).hexdigest() != record["profile_sha256"]:
        raise UsageError(f"the active profile {path} changed since it was applied", hint=again)
    return ref
