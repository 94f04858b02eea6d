"""The journal of original values, as types: what rollback restores, by stable device identity.

``journal.json`` (`tunectl.system.state` keeps its generations and checksums)
holds one `JournalEntry` per device tunectl changed: the value of each attribute
before tunectl's first change, the scheduler knobs per scheduler (as first seen
while that scheduler was active: a switch resets them), who set each value it has
now, and for a loop device the proof of its identity (`tunectl.tuning.relink`).

`Journal.from_json` is the one place a journal is checked and upgraded: a
version-1 journal (one ``iosched_snapshot`` of the scheduler active when it was
first written, knobs among the attributes) becomes the per-scheduler form here,
once. The types are immutable: a change makes a new journal, and "did it
change" is `!=`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from tunectl.record import field, record
from tunectl.system.state import JOURNAL, StateStore, kernel_name

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    # Only here: `X | Y` outside an annotation is evaluated at import, a TypeError before Python 3.10.
    Value = int | str | None

_SCHEDULER = re.compile(r"\A[a-z0-9-]{1,32}\Z")
_ATTRIBUTE = re.compile(r"\A(iosched/)?[a-z0-9_]{1,64}\Z")
_KNOB = re.compile(r"\A[a-z0-9_]{1,64}\Z")
_LOOP_BACKING = re.compile(r"\d{1,10}:\d{1,10}:\d{1,20}\Z")
_DEVNUM = re.compile(r"\d{1,10}:\d{1,10}\Z")


class JournalError(ValueError):
    """Why a journal's content cannot be used by rollback (a hand edit): its generation counts as damaged."""


def not_a_value(value: object) -> bool:
    """A journalled value no sysfs attribute holds: anything but text, a whole number or null (a list or object,
    true/false, 1.5, NaN: rollback would write "True" or "1.5"), a number beyond 64 bits, or text with a control
    character (NUL, newline) or a lone surrogate (no bytes to write), or longer than any attribute shows."""
    if value is None:
        return False
    if type(value) is int:  # not bool, a subclass of int
        return not -(1 << 63) <= value < 1 << 64
    if not isinstance(value, str):
        return True
    return len(value) > 256 or any(c < " " or "\ud800" <= c <= "\udfff" or c == "\x7f" for c in value)


def _knobs(data: object, identity: str, what: str) -> dict[str, Value]:
    if not isinstance(data, dict) or not all(isinstance(k, str) and _KNOB.match(k) and not not_a_value(v)
                                             for k, v in data.items()):
        raise JournalError(f"the {what} of {identity!r} is not a scheduler name with knobs")
    return dict(data)


@record(frozen=True)
class ChangedBy:
    """Who set a value: the profile (its recorded reference), tunectl's version, when, and `via` (udev rules, or
    the attribute whose write changed this one too)."""

    profile: str
    tunectl: str
    at: str
    via: str = ""

    def to_json(self) -> dict:
        out = {"profile": self.profile, "tunectl": self.tunectl, "at": self.at}
        return dict(out, via=self.via) if self.via else out

    @classmethod
    def from_json(cls, data: Mapping) -> ChangedBy:
        return cls(*(str(data.get(k, "?")) for k in ("profile", "tunectl", "at")), str(data.get("via", "")))

    def same_writer(self, other: ChangedBy | None) -> bool:
        """`other` is this writer (the same profile and version, and path when this one names it), whenever it
        ran: a re-apply records nothing new."""
        return other is not None and (self.profile, self.tunectl) == (other.profile, other.tunectl) \
            and (not self.via or self.via == other.via)


@record(frozen=True)
class LoopProof:
    """A loop device's identity that no rename or unlink changes: its backing file's device and inode
    (``maj:min:inode``) and its own device number (``maj:min``)."""

    backing: str
    devnum: str


@record(frozen=True)
class JournalEntry:
    """One device's originals: the attributes' and each scheduler's knobs' values before tunectl, and who set each."""

    name: str  # the kernel name when journalled (of two devices with one identity, rollback writes this one)
    attributes: Mapping[str, Value] = field(default_factory=dict)  # attribute -> its original
    iosched: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)  # scheduler -> its knobs' originals
    changed_by: Mapping[str, ChangedBy] = field(default_factory=dict)  # attribute -> who set the value it has now
    loop: LoopProof | None = None

    def original_knobs(self, scheduler: str | None) -> dict[str, Value]:
        """``iosched/KNOB`` -> the value `scheduler`'s knob had before tunectl first touched the device while it
        was active (journals before per-scheduler knobs: the knobs kept among the attributes)."""
        if scheduler in self.iosched:
            return {f"iosched/{k}": v for k, v in self.iosched[scheduler].items()}
        return {a: v for a, v in self.attributes.items() if a.startswith("iosched/") and v is not None}

    def to_json(self) -> dict:
        out: dict = {"name": self.name, "attributes": dict(self.attributes)}
        if self.iosched:
            out["iosched"] = {s: dict(k) for s, k in self.iosched.items()}
        if self.changed_by:
            out["changed_by"] = {a: by.to_json() for a, by in self.changed_by.items()}
        if self.loop is not None:
            out["loop"] = {"backing": self.loop.backing, "devnum": self.loop.devnum}
        return out

    @classmethod
    def from_json(cls, identity: str, data: object) -> JournalEntry:
        """Checked: attribute names become sysfs paths on rollback (a queue attribute or an iosched knob, nothing
        else) and every value one sysfs holds. A version-1 ``iosched_snapshot`` is upgraded here."""
        if not isinstance(data, dict) or not isinstance(data.get("attributes"), dict) \
                or not isinstance(data.get("name", ""), str):
            raise JournalError(f"the entry of {identity!r} has no 'attributes' object")
        if data.get("name") and not kernel_name(data["name"]):  # printed in rollback's notes, compared with names
            raise JournalError(f"the entry of {identity!r} names the device {data['name']!r}: not a kernel name")
        attributes = data["attributes"]
        for attr, value in attributes.items():
            if not _ATTRIBUTE.match(attr):
                raise JournalError(f"the entry of {identity!r} names {attr!r}, which is not a queue attribute")
            if not_a_value(value):
                raise JournalError(f"the entry of {identity!r} holds a value for {attr} that no sysfs attribute holds")
        per_scheduler = data.get("iosched", {})
        if not isinstance(per_scheduler, dict) or not all(isinstance(s, str) and _SCHEDULER.match(s)
                                                          for s in per_scheduler):
            raise JournalError(f"the scheduler knobs of {identity!r} are not scheduler names with knobs")
        iosched = {s: _knobs(k, identity, "scheduler knobs") for s, k in per_scheduler.items()}
        snap = data.get("iosched_snapshot")
        if snap is not None:
            if not (isinstance(snap, dict) and isinstance(snap.get("scheduler"), (str, type(None)))):
                raise JournalError(f"the iosched snapshot of {identity!r} is not a scheduler name with knobs")
            knobs = _knobs(snap.get("knobs"), identity, "iosched snapshot")
            # (a name no scheduler has was never restored: it is left out, not kept as a key no journal may hold)
            if isinstance(snap["scheduler"], str) and _SCHEDULER.match(snap["scheduler"]) \
                    and snap["scheduler"] not in iosched:
                # Version 1: the snapshot was the knobs of the scheduler active then, the knobs among the
                # attributes went with it (any scheduler's).
                iosched[snap["scheduler"]] = dict(knobs, **{a.split("/", 1)[1]: v for a, v in attributes.items()
                                                            if a.startswith("iosched/") and v is not None})
        by = data.get("changed_by", {})
        if not isinstance(by, dict):
            raise JournalError(f"the 'changed_by' of {identity!r} is not an object")
        loop = data.get("loop")
        if loop is not None and not (isinstance(loop, dict) and isinstance(loop.get("backing"), str)
                                     and isinstance(loop.get("devnum"), str) and _LOOP_BACKING.match(loop["backing"])
                                     and _DEVNUM.match(loop["devnum"])):
            raise JournalError(f"the 'loop' proof of {identity!r} is not a backing inode and a device number")
        return cls(str(data.get("name", "")), dict(attributes), iosched,
                   {a: ChangedBy.from_json(b) for a, b in by.items() if isinstance(b, dict)},
                   LoopProof(loop["backing"], loop["devnum"]) if loop is not None else None)


@record(frozen=True)
class Journal:
    """Every device's originals, by stable identity: what rollback restores."""

    devices: Mapping[str, JournalEntry] = field(default_factory=dict)  # stable identity -> entry

    def get(self, identity: str) -> JournalEntry | None:
        return self.devices.get(identity)

    def __contains__(self, identity: str) -> bool:
        return identity in self.devices

    def with_entry(self, identity: str, entry: JournalEntry) -> Journal:
        return Journal({**self.devices, identity: entry})

    def without(self, identities: Iterable[str]) -> Journal:
        gone = set(identities)
        return Journal({i: e for i, e in self.devices.items() if i not in gone})

    def to_json(self) -> dict:
        return {"devices": {identity: entry.to_json() for identity, entry in self.devices.items()}}

    @classmethod
    def from_json(cls, data: object) -> Journal:
        """The journal a state file holds: every check, and the upgrade of version 1, here and only here."""
        devices = data.get("devices") if isinstance(data, dict) else None
        if not isinstance(devices, dict):
            raise JournalError("it has no 'devices' object")
        return cls({str(identity): JournalEntry.from_json(identity, entry) for identity, entry in devices.items()})


def load(state: StateStore) -> Journal:
    """The journal of the state directory (an empty one when there is none yet)."""
    return state.load(JOURNAL, Journal.from_json) or Journal()


def save(state: StateStore, journal: Journal) -> None:
    state.save(JOURNAL, journal.to_json(), Journal.from_json)
