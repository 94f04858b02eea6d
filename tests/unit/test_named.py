"""tunectl.named: the exit codes and verdict words behave as the enums they were (#30: no enum at a boot replay)."""

from __future__ import annotations

import copy
import enum
import json
import pickle

import pytest

from tunectl.errors import ExitCode
from tunectl.status import Verdict


class _EnumVerdict(str, enum.Enum):  # what Verdict was: its own __str__ and __format__ gave the word
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


def _as_enums() -> list[tuple[object, object]]:
    codes = enum.IntEnum("ExitCode", [(c.name, c.value) for c in ExitCode])
    words = _EnumVerdict("Verdict", [(v.name, v.value) for v in Verdict])
    return [(ExitCode, codes), (Verdict, words)]


@pytest.mark.parametrize("named, real", _as_enums(), ids=["ExitCode", "Verdict"])
def test_named_constants_behave_as_the_enum_did(named, real) -> None:  # noqa: ANN001
    assert len(named) == len(real) and [m.name for m in named] == [m.name for m in real]
    for ours, theirs in zip(named, real):
        assert (ours.value, type(ours.value)) == (theirs.value, type(theirs.value))
        assert repr(ours) == repr(theirs) and str(ours) == str(theirs) and f"{ours}|{ours:>12}" == f"{theirs}|{theirs:>12}"
        assert ours == theirs.value and hash(ours) == hash(theirs) and bool(ours) == bool(theirs)
        assert json.dumps([ours, {ours: 1}]) == json.dumps([theirs, {theirs: 1}]) if isinstance(ours, str) \
            else json.dumps([ours]) == json.dumps([theirs])
        assert named(ours.value) is ours is getattr(named, ours.name) and isinstance(ours, named)
        assert copy.copy(ours) is ours and copy.deepcopy([ours])[0] is ours and pickle.loads(pickle.dumps(ours)) is ours
    with pytest.raises(ValueError, match="is not a valid"):
        named("no such value")
    with pytest.raises(ValueError, match="is not a valid"):
        named([])
