"""The record of intent: what tunectl has tuned, read by every command run without -p or DEV.

One record in the state directory (``active.json``; `tunectl.system.state` keeps
its generations and checksums):

- ``ref``: the profile, a library name or the absolute resolved path of its file;
- ``name`` and ``files``: the profile's name and the files it was read from;
- ``path`` and ``profile_sha256``: the file the profile was read from and the SHA-256
  of its text (`tunectl.tuning.active`). Without -p a profile whose file changed since
  it was applied, or that is no longer root's alone, is refused (exit 2);
- ``scope``: stable identities of the devices the applies of this profile were
  limited to; absent: every device;
- ``rules``: present while udev rules are installed: their file, the profile
  they were rendered from and their scope (absent: every device).

A full rollback clears the record (`StateStore.clear_active_profile`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tunectl.context import Context
from tunectl.profile.library import DEFAULT_PROFILE
from tunectl.profile.resolve import Profile, load_profile
from tunectl.tuning import active as active_record


@dataclass
class Active:
    """The profile a command acts on, where it came from, and what to tell the user about that."""

    profile: Profile
    ref: str  # as it is (or would be) recorded
    record: dict | None  # the record of intent, when one exists
    from_record: bool  # no -p: the record chose the profile
    notes: list[str] = field(default_factory=list)  # said first, before any other output


def load_profile_for(ctx: Context, ref: str | None) -> Profile:
    """The profile `ref` (None: the default), checked once per content: the verdict is cached in the state dir."""
    return load_profile(ref, ctx.search_path, ctx.state.validation_cache())


def current(ctx: Context) -> dict | None:
    """The record of intent; None when nothing is applied (or the state directory does not exist yet)."""
    return ctx.state.active_profile() if ctx.state.exists() else None


def recorded_ref(ref: str) -> str:
    """A profile reference as the record keeps it: a file by its absolute resolved path, a library name as it is.

    A udev RUN, a cron job and a person in another directory all read the same record.
    """
    return active_record.absolute_ref(ref) or ref


def text_sha256(profile: Profile) -> str | None:
    """The SHA-256 the record keeps of the profile's text (`tunectl.tuning.active`); None for a built-in one."""
    return record_of(profile, profile.name).get("profile_sha256")


def record_of(profile: Profile, ref: str) -> dict:
    """The record of intent for `profile` applied by the name or path `ref` (no scope, no rules yet)."""
    if not profile.files:
        return {"ref": recorded_ref(ref), "name": profile.name, "files": profile.files}
    return active_record.profile_record(ref, profile.name, profile.files)


def _files(files: object) -> list[str] | None:
    return [os.path.realpath(f) for f in files] if isinstance(files, list) else None


def same_profile(record: dict | None, other: dict) -> bool:
    """One profile: the same name from the same files (wherever the command that read them ran)."""
    return record is not None and (record.get("name"), _files(record.get("files"))) == (
        other.get("name"), _files(other.get("files")))


def choose(ctx: Context, ref: str | None, command: str = "") -> Active:
    """-p wins; else the profile of the record (refused when its file changed); else the default, said first."""
    record = current(ctx)
    if ref:
        return Active(load_profile_for(ctx, ref), recorded_ref(ref), record, False)
    if record is None:
        note = (f"no profile applied yet (nothing recorded in {ctx.state.dir}): using '{DEFAULT_PROFILE}'"
                + (f"; `tunectl {command} -p PROFILE` chooses one" if command else ""))
        return Active(load_profile_for(ctx, None), DEFAULT_PROFILE, None, False, [note])
    # The recorded file must still be root's alone, there, and the text that was applied (`tunectl.tuning.active`).
    ref = active_record.recorded_ref(record)
    return Active(load_profile_for(ctx, ref), ref, record, True)


def with_scope(record: dict, previous: dict | None, scope: list[str] | None) -> dict:
    """The record after an apply limited to `scope` (identities; None: every device); installed rules stay recorded.

    An apply without DEV clears the scope. One with DEV keeps the profile's
    record unscoped when the same profile was last applied to every device (they
    are all tuned by it), adds to the scope of an earlier limited apply of the
    same profile, and otherwise starts a new scope. Records without a scope (all
    records before scopes existed) mean every device.
    """
    out = dict(record)
    if previous is not None and isinstance(previous.get("rules"), dict):
        out["rules"] = previous["rules"]
    if scope is None:
        return out
    same = same_profile(previous, record)
    if same and "scope" not in previous:
        return out
    earlier = previous.get("scope", []) if same and isinstance(previous.get("scope"), list) else []
    out["scope"] = sorted(set(earlier) | set(scope))
    return out


def without(record: dict, identities: set[str]) -> dict:
    """The record after a rollback of `identities`: they leave the scope (a scope left empty means nothing applied)."""
    out = dict(record)
    if isinstance(out.get("scope"), list):
        out["scope"] = [i for i in out["scope"] if i not in identities]
    return out


def scope_of(record: dict | None) -> list[str] | None:
    """The record's scope (identities), None for every device (or a hand-edited scope that is not a list)."""
    if record is None or not isinstance(record.get("scope"), list):
        return None
    return [str(i) for i in record["scope"]]


def kept_originals(rules: dict | None) -> dict[str, dict[str, str]]:
    """identity -> udev property (``TUNECTL_ORIG_*``) -> value, the originals `udev install` kept for below: in the
    record of its rules; what is not of that shape is left out."""
    kept = rules.get("kept") if rules is not None else None
    if not isinstance(kept, dict):
        return {}
    return {identity: {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, str)}
            for identity, values in kept.items() if isinstance(identity, str) and isinstance(values, dict)}


def installed_rules(record: dict | None) -> dict | None:
    """The rules the record says are installed, or None."""
    rules = record.get("rules") if record is not None else None
    return rules if isinstance(rules, dict) and isinstance(rules.get("path"), str) else None
