"""`record`: how tunectl declares a record — a dataclass whose ==, repr (and hash, when frozen) are written
once here instead of generated for each class.

Python 3.11's dataclasses compile every generated method with its own exec() when the module loads
(~0.1–0.3 ms each); every command declares some 25–40 records on its way, and their generated
`__repr__`, `__eq__`, `__hash__` (and a frozen one's `__setattr__`, `__delattr__`) cost ~5-8 ms of
each start. The methods below do what the generated ones do, reading the fields when called: the same
text, the same comparisons (same class, the fields with `compare=True`), the same hash (the fields
`hash`/`compare` select), `__hash__` None for a mutable record, FrozenInstanceError on assigning or
deleting a field of a frozen one (see `_freeze`). `__init__`, `field()`, `fields()`, `replace()` and
`asdict()` stay the dataclass's own.

    @record
    class Setting: ...

    @record(frozen=True)
    class Journal: ...
"""

from __future__ import annotations

import reprlib
from dataclasses import FrozenInstanceError, dataclass, fields

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    # Read by type checkers only, never imported at run time, so the 3.9 floor holds (novermin: it is 3.11's).
    from typing import Any, TypeVar, dataclass_transform  # novermin

    T = TypeVar("T")
else:
    def dataclass_transform(**_options: object) -> object:
        return lambda decorator: decorator


@reprlib.recursive_repr()
def _repr(self: object) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)  # type: ignore[arg-type]
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: object, other: object) -> bool:
    if other.__class__ is self.__class__:
        return _compared(self) == _compared(other)
    return NotImplemented


def _compared(obj: Any) -> tuple:
    return tuple(getattr(obj, f.name) for f in fields(obj) if f.compare)


def _hash(self: object) -> int:
    return hash(tuple(getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                      if (f.compare if f.hash is None else f.hash)))


def _freeze(cls: type) -> None:
    """A frozen record's __setattr__ and __delattr__, as dataclass's refuse: any field, and any name on the
    record's own class (a plain subclass may add attributes). One difference makes __init__ work: it is
    generated as a mutable record's (`self.name = value`), so a field not set yet may be set, once; every
    field is set by __init__ (a record has no `field(init=False)` without a default), so afterwards none can be."""
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    names = frozenset(f.name for f in fields(cls))

    def __setattr__(self: object, name: str, value: object) -> None:
        if (type(self) is cls or name in names) and not (name in names and name not in self.__dict__):
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[misc]

    def __delattr__(self: object, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[misc]

    for method in (__setattr__, __delattr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)


def _declare(cls: type[T], frozen: bool) -> type[T]:
    own = cls.__dict__
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    # As dataclass decides: hashable by its fields when frozen, unhashable when mutable, unless the class
    # itself defines __hash__ (a class defining only __eq__ has __hash__ None from Python, not by choice).
    if own.get("__hash__") is None and ("__hash__" not in own or "__eq__" in own):
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment,method-assign]
    if "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment,method-assign]
    declared = dataclass(cls, repr=False, eq=False)  # frozen below: dataclass would exec two more methods
    if frozen:
        _freeze(declared)
    return declared


@dataclass_transform()
def record(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """Declare a record: `@record` or `@record(frozen=True)`, as `@dataclass` without its per-class methods."""
    if cls is None:
        return lambda c: _declare(c, frozen)
    return _declare(cls, frozen)
