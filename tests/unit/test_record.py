"""`record` behaves as `dataclass` does: the same __init__, repr, ==, hash and frozenness, fields, replace and asdict,
without importing dataclasses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from tunectl import record as records
from tunectl.record import record


def pair(frozen: bool) -> tuple[type, type]:
    """The same class declared both ways."""
    def body(field) -> dict:  # noqa: ANN001 (dataclasses.field or tunectl.record.field)
        return {"__annotations__": {"name": "str", "items": "list", "hidden": "int", "loose": "int"},
                "__module__": __name__, "__qualname__": "Outer.Thing",
                "items": field(default_factory=list), "hidden": field(default=0, repr=False),
                "loose": field(default=0, compare=False)}
    return (dataclass(frozen=frozen)(type("Thing", (), body(dataclasses.field))),
            record(frozen=frozen)(type("Thing", (), body(records.field))))


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
        with pytest.raises(records.FrozenInstanceError):
            written("a").name = "b"
    else:
        assert written.__hash__ is None and generated.__hash__ is None
        with pytest.raises(TypeError):
            hash(written("a"))
    assert [f.name for f in records.fields(written)] == ["name", "items", "hidden", "loose"]
    assert records.replace(written("a"), name="b") == written("b")


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
    for cls, frozen_error, replace in ((generated, dataclasses.FrozenInstanceError, dataclasses.replace),
                                       (written, records.FrozenInstanceError, records.replace)):
        thing = cls("a", [1])
        for change in (lambda t: setattr(t, "name", "b"), lambda t: setattr(t, "hidden", 1),
                       lambda t: setattr(t, "new", 1), lambda t: delattr(t, "name"), lambda t: delattr(t, "new")):
            with pytest.raises(frozen_error):
                change(thing)
        assert (thing.name, thing.items, thing.hidden) == ("a", [1], 0)  # set by __init__, then fixed
        assert replace(thing, name="b").name == "b"

        class Plain(cls):  # a plain subclass may add attributes, not change fields
            pass

        sub = Plain("a")
        sub.extra = 1
        with pytest.raises(frozen_error):
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


def both(body: str, frozen: bool = False) -> tuple[type, type]:
    """The classes `body` declares (the last is the one returned), once by dataclass and once by record."""
    out = []
    for declare, module in ((dataclass, dataclasses), (record, records)):
        scope: dict = {"declare": declare, "field": module.field}
        exec(body.replace("@declare", f"@declare(frozen={frozen})"), scope)  # noqa: S102
        out.append(scope["Last"])
    return out[0], out[1]


INHERITED = """
@declare
class Base:
    a: int
    b: str = "b"
    made: list = field(default_factory=list)

@declare
class Last(Base):
    c: int = 3
    b: str = "other"  # a base's field given another default keeps its place
    late: dict = field(init=False, default_factory=dict)
    shown: tuple = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self.late["a"] = self.a
"""


@pytest.mark.parametrize("frozen", [False, True])
def test_record_init_defaults_factories_and_post_init_are_dataclass_s(frozen: bool) -> None:
    generated, written = both(INHERITED, frozen)
    for args, kwargs in [((1,), {}), ((1, "x", [2], 4), {"shown": (5,)}), ((), {"a": 7, "c": 0})]:
        g, w = generated(*args, **kwargs), written(*args, **kwargs)
        assert repr(w) == repr(g) and [getattr(w, f.name) for f in records.fields(w)] == \
            [getattr(g, f.name) for f in dataclasses.fields(g)]
        assert records.asdict(w) == dataclasses.asdict(g)
        assert repr(records.replace(w, c=9)) == repr(dataclasses.replace(g, c=9))
        assert records.replace(w, c=9).late == {"a": w.a}  # init=False: made anew
    assert [f.name for f in records.fields(written)] == [f.name for f in dataclasses.fields(generated)] == \
        ["a", "b", "made", "c", "late", "shown"]
    assert written(1).made is not written(1).made  # a factory's value is made per instance
    assert written.b == generated.b == "other" and not hasattr(written, "made") and not hasattr(generated, "made")
    for call in (lambda cls: cls(), lambda cls: cls(1, late={}), lambda cls: cls(1, nope=2),
                 lambda cls: cls(1, "b", [], 3, (), 6)):
        for cls in (generated, written):
            with pytest.raises(TypeError):
                call(cls)
    with pytest.raises(ValueError, match="init=False"):
        records.replace(written(1), late={})
    assert written.__match_args__ == generated.__match_args__ == ("a", "b", "made", "c", "shown")


def test_record_refuses_the_declarations_dataclass_refuses() -> None:
    for body, error in (("@declare\nclass Last:\n    a: int = 1\n    b: int\n", TypeError),
                        ("@declare\nclass Last:\n    a: list = []\n", ValueError),
                        ("@declare\nclass Last:\n    a: int = field(default=1, default_factory=int)\n", ValueError)):
        for declare, module in ((dataclass, dataclasses), (record, records)):
            with pytest.raises(error):
                exec(body, {"declare": declare, "field": module.field})  # noqa: S102
    with pytest.raises(TypeError, match="record"):
        records.fields(object())
    with pytest.raises(TypeError, match="record"):
        records.asdict({"a": 1})


def test_record_asdict_goes_into_lists_tuples_and_dicts_as_dataclass_s_does() -> None:
    body = """
@declare
class Inner:
    x: int

@declare
class Last:
    items: list
    pairs: tuple
    named: dict
"""
    scope_g: dict = {"declare": dataclass, "field": dataclasses.field}
    scope_w: dict = {"declare": record, "field": records.field}
    exec(body, scope_g)  # noqa: S102
    exec(body, scope_w)  # noqa: S102
    g = scope_g["Last"]([scope_g["Inner"](1)], (scope_g["Inner"](2), 3), {"k": scope_g["Inner"](4)})
    w = scope_w["Last"]([scope_w["Inner"](1)], (scope_w["Inner"](2), 3), {"k": scope_w["Inner"](4)})
    assert records.asdict(w) == dataclasses.asdict(g) == {"items": [{"x": 1}], "pairs": ({"x": 2}, 3),
                                                          "named": {"k": {"x": 4}}}


def test_record_declares_without_importing_dataclasses() -> None:
    """dataclasses imports inspect, ast, dis and tokenize: ~20 ms of every start, ~1.5 s of a run in a TCG guest."""
    import subprocess
    import sys

    code = "import sys, tunectl.record, tunectl.devices.model; print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_module_of_tunectl_imports_dataclasses_and_a_record_refuses_its_field() -> None:
    """A record takes a default of dataclasses.field() for the value itself: it is refused where it is declared,
    and tunectl's modules use tunectl.record's field, fields, replace and asdict."""
    import re
    from pathlib import Path

    package = Path(records.__file__).parent
    found = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
             if re.search(r"^\s*(import dataclasses|from dataclasses import)", p.read_text(), re.M)]
    assert found == []
    with pytest.raises(TypeError, match=r"Last.items: a record's field is tunectl.record.field"):
        exec("@declare\nclass Last:\n    items: list = field(default_factory=list)\n",  # noqa: S102
             {"declare": record, "field": dataclasses.field})
