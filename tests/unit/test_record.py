"""`record` behaves as `dataclass` does: the same repr, ==, hash and frozenness, from methods written once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from tunectl.record import record


def pair(frozen: bool) -> tuple[type, type]:
    """The same class declared both ways."""
    def body() -> dict:
        return {"__annotations__": {"name": "str", "items": "list", "hidden": "int", "loose": "int"},
                "__module__": __name__, "__qualname__": "Outer.Thing",
                "items": field(default_factory=list), "hidden": field(default=0, repr=False),
                "loose": field(default=0, compare=False)}
    return (dataclass(frozen=frozen)(type("Thing", (), body())),
            record(frozen=frozen)(type("Thing", (), body())))


@pytest.mark.parametrize("frozen", [False, True])
def test_record_repr_eq_and_hash_are_dataclass_s(frozen: bool) -> None:
    generated, written = pair(frozen)
    for args in [("a",), ("a", [1, "x"], 3, 4), ("b", [], 0, 9)]:
        g, w = generated(*args), written(*args)
        assert repr(w) == repr(g)
        assert "Outer.Thing(name=" in repr(w) and "hidden" not in repr(w)
        assert (w == written(*args)) is True and (w != written(*args)) is False
        assert (w == written("other")) is (g == generated("other"))
        assert (w == g) is False  # another class is never equal, as with dataclass
        assert w.__eq__(object()) is NotImplemented
    # `loose` is compare=False: ignored by == (and hash), as with dataclass
    assert written("a", [], 0, 1) == written("a", [], 0, 2)
    assert generated("a", [], 0, 1) == generated("a", [], 0, 2)
    if frozen:
        assert hash(written("a", (), 1, 5)) == hash(generated("a", (), 1, 7))
        with pytest.raises(dataclasses.FrozenInstanceError):
            written("a").name = "b"
    else:
        assert written.__hash__ is None and generated.__hash__ is None
        with pytest.raises(TypeError):
            hash(written("a"))
    assert [f.name for f in dataclasses.fields(written)] == ["name", "items", "hidden", "loose"]
    assert dataclasses.replace(written("a"), name="b") == written("b")


def test_record_keeps_what_the_class_writes_itself() -> None:
    @record
    class Own:
        x: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Own(1)) == "own" and Own(1) == 2 and Own.__hash__ is None

    @record(frozen=True)
    class Hashed:
        x: int

        def __hash__(self) -> int:
            return 7

    assert hash(Hashed(1)) == 7


def test_record_repr_of_a_record_holding_itself() -> None:
    @record
    class Node:
        items: list

    node = Node([])
    node.items.append(node)
    assert repr(node) == "test_record_repr_of_a_record_holding_itself.<locals>.Node(items=[...])"


def test_a_frozen_record_refuses_what_a_frozen_dataclass_refuses() -> None:
    generated, written = pair(frozen=True)
    for cls in (generated, written):
        thing = cls("a", [1])
        for change in (lambda t: setattr(t, "name", "b"), lambda t: setattr(t, "hidden", 1),
                       lambda t: setattr(t, "new", 1), lambda t: delattr(t, "name"), lambda t: delattr(t, "new")):
            with pytest.raises(dataclasses.FrozenInstanceError):
                change(thing)
        assert (thing.name, thing.items, thing.hidden) == ("a", [1], 0)  # set by __init__, then fixed
        assert dataclasses.replace(thing, name="b").name == "b"

        class Plain(cls):  # a plain subclass may add attributes, not change fields
            pass

        sub = Plain("a")
        sub.extra = 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            sub.name = "b"

    @record(frozen=True)
    class Fixed:
        path: object

        def __post_init__(self) -> None:  # as profile.reader.Diagnostic mends a field
            object.__setattr__(self, "path", str(self.path))

    assert Fixed(3).path == "3"
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):
        @record(frozen=True)
        class Own:
            x: int

            def __setattr__(self, name: str, value: object) -> None:
                pass
