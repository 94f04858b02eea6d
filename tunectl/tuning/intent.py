"""The record of intent: what tunectl has tuned, read by every command run without -p or DEV.

One record in the state directory (``active.json``, its file name since the
first release; `tunectl.system.state` keeps its generations and checksums), the
type `Intent`:

- ``ref``: the profile, a library name or the absolute resolved path of its file
  (a udev RUN, a cron job and a person in another directory all read the same record);
- ``name`` and ``files``: the profile's name and the files it was read from;
- ``path`` and ``profile_sha256``: the file the profile was read from and the SHA-256
  of its text. Without -p a profile whose file changed since it was applied, or that
  is no longer root's alone (`tunectl.system.trust`), is refused (exit 2);
- ``scope``: stable identities of the devices the applies of this profile were
  limited to; absent: every device;
- ``rules``: present while udev rules are installed (`Rules`): their file, the profile
  they were rendered from and their scope (absent: every device).

A full rollback clears the record (``{"applied": false}``: `clear`).
`Intent.from_json` is the one place a record is checked; the types are immutable.
"""

from __future__ import annotations

import os

from tunectl.context import Context
from tunectl.digests import sha256
from tunectl.errors import UsageError
from tunectl.profile.library import DEFAULT_PROFILE, looks_like_path
from tunectl.profile.reader import MAX_PROFILE_BYTES
from tunectl.profile.resolve import Profile, load_profile
from tunectl.record import field, record, replace
from tunectl.system import trust
from tunectl.system.state import ACTIVE, StateStore


class IntentError(ValueError):
    """Why a record of intent cannot be used (a hand edit): its generation counts as damaged."""


def _identities(value: object) -> tuple[str, ...] | None:
    """A scope: identities; None (every device) for none, or for a hand-edited scope that is not a list."""
    return tuple(str(i) for i in value) if isinstance(value, list) else None


def _kept(value: object) -> dict[str, dict[str, str]]:
    """Originals kept for below: (`Rules.kept`); what a hand edit left of another shape is dropped."""
    if not isinstance(value, dict):
        return {}
    return {identity: {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, str)}
            for identity, values in value.items() if isinstance(identity, str) and isinstance(values, dict)}


def _names(value: object) -> tuple[str, ...] | None:
    """The udev property names of `Rules.below_only`; None (not said) for a hand edit that is not a list of texts."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@record(frozen=True)
class Rules:
    """The udev rules `udev install` wrote: their file, the profile rendered, its text's hash, the rules' digest."""

    path: str
    ref: str | None
    name: str | None
    profile_sha256: str | None
    digest: str | None
    scope: tuple[str, ...] | None = None  # identities the rules match; None: every device
    # identity -> udev property (TUNECTL_ORIG_*) -> value: what below: sets, as install found it (udev.install)
    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    # the udev properties (TUNECTL_ORIG_*) the rules keep for below: alone; None: rules installed before it was said
    below_only: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        out: dict = {"path": self.path, "ref": self.ref, "name": self.name, "profile_sha256": self.profile_sha256,
                     "digest": self.digest}
        if self.scope is not None:
            out["scope"] = list(self.scope)
        if self.kept:
            out["kept"] = {identity: dict(values) for identity, values in self.kept.items()}
        if self.below_only is not None:
            out["below_only"] = list(self.below_only)
        return out

    @classmethod
    def from_json(cls, data: object) -> Rules | None:
        """None for rules a hand edit left without a file."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return None
        return cls(data["path"], _text(data.get("ref")), _text(data.get("name")), _text(data.get("profile_sha256")),
                   _text(data.get("digest")), _identities(data.get("scope")), _kept(data.get("kept")),
                   _names(data.get("below_only")))

    @property
    def profile(self) -> str | None:
        """The profile as people know it: its name, else its reference."""
        return self.name or self.ref


@record(frozen=True)
class Intent:
    """The record of intent: the profile the last apply used (its reference, files, digest), its scope and rules."""

    ref: str
    name: str | None
    files: tuple[str, ...] | None
    path: str | None = None
    profile_sha256: str | None = None
    scope: tuple[str, ...] | None = None  # None: every device
    rules: Rules | None = None

    def to_json(self) -> dict:
        out: dict = {"ref": self.ref, "name": self.name, "files": list(self.files) if self.files is not None else None}
        if self.path is not None:
            out["path"] = self.path
        if self.profile_sha256 is not None:
            out["profile_sha256"] = self.profile_sha256
        if self.scope is not None:
            out["scope"] = list(self.scope)
        if self.rules is not None:
            out["rules"] = self.rules.to_json()
        return out

    @classmethod
    def from_json(cls, data: object) -> Intent | None:
        """The record a state file holds; None for a record a full rollback cleared."""
        if not isinstance(data, dict):
            raise IntentError("it is not a JSON object")
        if data.get("applied") is False:
            return None  # cleared by a full rollback: nothing is tuned
        if not isinstance(data.get("ref"), str):
            raise IntentError("it names no profile ('ref')")
        for key in ("path", "profile_sha256"):  # what trusted_ref checks the profile's file by: never dropped
            if data.get(key) is not None and not isinstance(data[key], str):
                raise IntentError(f"its {key!r} is not text, and the profile's file could not be checked against it")
        files = data.get("files")
        return cls(data["ref"], _text(data.get("name")),
                   tuple(str(f) for f in files) if isinstance(files, list) else None,
                   _text(data.get("path")), _text(data.get("profile_sha256")), _identities(data.get("scope")),
                   Rules.from_json(data.get("rules")))

    def of_profile(self, name: str, files: list[str] | tuple[str, ...] | None) -> bool:
        """One profile: the same name from the same files (wherever the command that read them ran)."""
        def real(fs: list[str] | tuple[str, ...] | None) -> list[str] | None:
            return [os.path.realpath(f) for f in fs] if fs is not None else None

        return (self.name, real(self.files)) == (name, real(files))

    def trusted_ref(self) -> str:
        """The reference a command without -p acts on; UsageError (exit 2) when its file cannot be trusted now:
        it must still be root's alone, there, and the text that was applied."""
        ref = self.ref
        again = f"pass -p PROFILE, or apply it again (tunectl apply -p {ref})"
        if looks_like_path(ref) and not os.path.isabs(ref):
            raise UsageError(f"the active profile was recorded as the relative path {ref}, which names a different "
                             "file in every directory; tunectl does not act on it",
                             hint="pass -p PROFILE; the next apply records an absolute path")
        path = self.path if self.path is not None else (ref if looks_like_path(ref) else None)
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
        if self.profile_sha256 is not None and sha256(text).hexdigest() != self.profile_sha256:
            raise UsageError(f"the active profile {path} changed since it was applied", hint=again)
        return ref

    def scoped(self, previous: Intent | None, scope: list[str] | None) -> Intent:
        """This record after an apply limited to `scope` (identities; None: every device); installed rules stay.

        An apply without DEV clears the scope. One with DEV keeps the profile's
        record unscoped when the same profile was last applied to every device (they
        are all tuned by it), adds to the scope of an earlier limited apply of the
        same profile, and otherwise starts a new scope. Records without a scope (all
        records before scopes existed) mean every device.
        """
        out = replace(self, rules=previous.rules if previous is not None else None, scope=None)
        if scope is None:
            return out
        same = previous is not None and previous.of_profile(self.name or "", self.files)
        if same and previous.scope is None:
            return out
        earlier = previous.scope if same and previous.scope is not None else ()
        return replace(out, scope=tuple(sorted(set(earlier) | set(scope))))

    def without(self, identities: set[str]) -> Intent:
        """The record after a rollback of `identities`: they leave the scope (a scope left empty: nothing applied)."""
        if self.scope is None:
            return self
        return replace(self, scope=tuple(i for i in self.scope if i not in identities))


def absolute_ref(ref: str) -> str:
    """A profile reference as the record keeps it: a file by its absolute resolved path, a library name as it is."""
    if not ref or not looks_like_path(ref):
        return ref
    from tunectl.system import trust

    # The walk the profile was read by (never another user's link), not realpath: a directory on the way swapped
    # for another user's link since the read would be followed (recording a file that user chose) or, swapped
    # back under realpath's readlink, end in EINVAL.
    try:
        return str(trust.resolve_own_links(ref))
    except (trust.Untrusted, OSError) as e:
        raise UsageError(f"{ref}: changed while tunectl read it ({e})", hint="run again; if it recurs, find who "
                         "changes it", code="untrusted-link", where=ref) from None


def of(profile: Profile, ref: str) -> Intent:
    """The record of intent for `profile` applied by the name or path `ref` (no scope, no rules yet), with the hash
    of its first file's text as it was read for `profile` (else as it reads now, when it can be read)."""
    # One walk, one answer: the paths the files were read at (the loader's walk). The reference of a profile named
    # by path is its first file as read: taken again by name (a second walk, a realpath), a link put on the way in
    # between made the record name a file other than the one hashed, which a later command without -p then loads.
    files = tuple(profile.read_from) if len(profile.read_from) == len(profile.files) else \
        tuple(os.path.realpath(f) for f in profile.files)
    intent = Intent(files[0] if files and looks_like_path(ref) else absolute_ref(ref), profile.name, files)
    if not profile.files:
        return intent
    if profile.sha256 is not None:  # the text the settings came from: one read again now may have been edited since
        return replace(intent, path=files[0], profile_sha256=profile.sha256)
    try:
        text = trust.read_regular(files[0], MAX_PROFILE_BYTES)
    except (OSError, trust.Untrusted):
        return intent
    return replace(intent, path=files[0], profile_sha256=sha256(text).hexdigest())


def load(state: StateStore) -> Intent | None:
    """The record in the state directory; None when nothing is applied."""
    return state.load(ACTIVE, Intent.from_json)


def save(state: StateStore, intent: Intent) -> None:
    state.save(ACTIVE, intent.to_json(), Intent.from_json)


def clear(state: StateStore) -> None:
    """Nothing is tuned any more (a full rollback): a new generation says so; older ones stay for a post-mortem."""
    state.save(ACTIVE, {"applied": False}, Intent.from_json)


def current(ctx: Context) -> Intent | None:
    """The record of intent; None when nothing is applied (or the state directory does not exist yet)."""
    return load(ctx.state) if ctx.state.exists() else None


@record
class Choice:
    """The profile a command acts on, where it came from, and what to tell the user about that."""

    profile: Profile
    ref: str  # as it is (or would be) recorded
    intent: Intent | None  # the record of intent, when one exists
    from_record: bool  # no -p: the record chose the profile
    notes: list[str] = field(default_factory=list)  # said first, before any other output


def load_profile_for(ctx: Context, ref: str | None) -> Profile:
    """The profile `ref` (None: the default), checked once per content: the verdict is cached in the state dir."""
    return load_profile(ref, ctx.search_path, ctx.state.validation_cache())


def choose(ctx: Context, ref: str | None, command: str = "") -> Choice:
    """-p wins; else the profile of the record (refused when its file changed); else the default, said first."""
    intent = current(ctx)
    if ref:
        return Choice(load_profile_for(ctx, ref), absolute_ref(ref), intent, False)
    if intent is None:
        note = (f"no profile applied yet (nothing recorded in {ctx.state.dir}): using '{DEFAULT_PROFILE}'"
                + (f"; `tunectl {command} -p PROFILE` chooses one" if command else ""))
        return Choice(load_profile_for(ctx, None), DEFAULT_PROFILE, None, False, [note])
    ref = intent.trusted_ref()
    return Choice(load_profile_for(ctx, ref), ref, intent, True)
