"""`record`: how tunectl declares a record — a dataclass whose ==, repr (and hash, when frozen) are written
once here instead of generated for each class.

Python 3.11's dataclasses compile every generated method with its own exec() when the module loads
(~0.1–0.3 ms each); every command declares some 25–40 records on its way, and their generated
`__repr__`, `__eq__` and `__hash__` alone cost ~5 ms of each start. The methods below do what the
generated ones do, reading the fields when called: the same text, the same comparisons (same class,
the fields with `compare=True`), the same hash (the fields `hash`/`compare` select), `__hash__` None
for a mutable record. `__init__`, frozenness, `field()`, `fields()`, `replace()` and `asdict()` stay
the dataclass's own.

    @record
    class Setting: ...

    @record(frozen=True)
    class Journal: ...
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, fields

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any, TypeVar, dataclass_transform

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
    return dataclass(cls, repr=False, eq=False, frozen=frozen)


@dataclass_transform()
def record(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """Declare a record: `@record` or `@record(frozen=True)`, as `@dataclass` without its per-class methods."""
    if cls is None:
        return lambda c: _declare(c, frozen)
    return _declare(cls, frozen)
