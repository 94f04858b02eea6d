"""`record`: how tunectl declares a record — what `@dataclass` declares, without importing dataclasses.

dataclasses imports inspect (and with it ast, dis, tokenize, linecache): ~20 ms of every start natively, ~1.5 s
of each run in the VM tier's TCG guests; and it compiles every generated method of every class with its own exec()
when the module loads (~0.1–0.3 ms each, some 25–40 records a command). Here the methods are written once and read
the fields when called: the same repr, the same == (same class, the fields with `compare=True`), the same hash
(the fields `hash`/`compare` select), `__hash__` None for a mutable record, FrozenInstanceError on assigning or
deleting a field of a frozen one (see `_freeze`). Only `__init__` is generated, as dataclass generates it (the
same parameters, defaults, factories, `__post_init__`), and only when the class is first instantiated: most of the
records a command imports it never makes. `field()`, `fields()`, `replace()` and `asdict()` are dataclasses' own,
for records.

    @record
    class Setting: ...

    @record(frozen=True)
    class Journal: ...
"""

from __future__ import annotations

import reprlib

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    # Read by type checkers only, never imported at run time, so the 3.9 floor holds (novermin: it is 3.11's).
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform  # novermin

    T = TypeVar("T")
else:
    def dataclass_transform(**_options: object) -> object:
        return lambda decorator: decorator


class FrozenInstanceError(AttributeError):
    """An assignment to, or deletion of, a field of a frozen record (dataclasses.FrozenInstanceError's twin)."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # no default, no factory


class Field:
    """One field of a record, as dataclasses.Field: its name, default or factory, and what it takes part in."""

    __slots__ = ("name", "default", "default_factory", "init", "repr", "compare", "hash")

    def __init__(self, default: Any, default_factory: Any, init: bool, repr: bool, compare: bool,
                 hash: bool | None) -> None:
        self.name = ""
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.compare, self.hash = init, repr, compare, hash

    def __repr__(self) -> str:
        return (f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r}, "
                f"init={self.init}, repr={self.repr}, compare={self.compare}, hash={self.hash})")


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING, init: bool = True,
          repr: bool = True, compare: bool = True, hash: bool | None = None) -> Any:
    """A field's default (or the factory of a new one each time) and whether __init__, repr, == and hash use it."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, init, repr, compare, hash)


def fields(class_or_instance: Any) -> tuple[Field, ...]:
    """The fields of a record (class or instance), in declaration order, its bases' first."""
    try:
        return class_or_instance.__record_fields__
    except AttributeError:
        raise TypeError("must be called with a record type or instance") from None


def replace(obj: T, /, **changes: Any) -> T:
    """A new record of obj's class: obj's fields, but `changes` (never a field `init=False`: it is made anew)."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """A record as a dict of its fields, records within it (in lists, tuples and dicts too) as dicts of theirs.
    Other values are taken as they are, not deep-copied as dataclasses.asdict copies them: every record's leaves
    here are str, int, float, bool or None."""
    if not hasattr(type(obj), "__record_fields__"):
        raise TypeError("asdict() should be called on record instances")
    return _asdict(obj)


def _asdict(obj: Any) -> Any:
    if hasattr(type(obj), "__record_fields__"):
        return {f.name: _asdict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple: made from its values
        return type(obj)(*[_asdict(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(_asdict(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_asdict(k), _asdict(v)) for k, v in obj.items())
    return obj


@reprlib.recursive_repr()
def _repr(self: object) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: object, other: object) -> bool:
    if other.__class__ is self.__class__:
        return _compared(self) == _compared(other)
    return NotImplemented


def _compared(obj: Any) -> tuple:
    return tuple(getattr(obj, f.name) for f in fields(obj) if f.compare)


def _hash(self: object) -> int:
    return hash(tuple(getattr(self, f.name) for f in fields(self) if (f.compare if f.hash is None else f.hash)))


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


def _collect(cls: type) -> tuple[Field, ...]:
    """The fields of `cls`: its bases' (a record's), then its own annotations' in order, as dataclass finds them;
    a default stays a class attribute, a field() with a factory leaves none."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in getattr(base, "__record_fields__", ()):
            found[f.name] = f
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if isinstance(annotation, str) and annotation.startswith(("ClassVar", "typing.ClassVar")):
            continue  # a class's attribute, not a field (dataclass's rule, on the annotation's text)
        default = cls.__dict__.get(name, MISSING)
        if type(default).__module__ == "dataclasses":  # dataclasses.field(): a record would take it for the default
            raise TypeError(f"{cls.__qualname__}.{name}: a record's field is tunectl.record.field, not dataclasses'")
        if isinstance(default, Field):
            f = default
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            f = Field(default, MISSING, True, True, True, None)
        if f.default is not MISSING and type(f.default).__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        f.name = name
        found[name] = f
    defaulted = None
    for f in found.values():
        if f.init:
            if f.default is not MISSING or f.default_factory is not MISSING:
                defaulted = f.name
            elif defaulted is not None:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
    return tuple(found.values())


def _make_init(cls: type) -> Callable[..., None]:
    """dataclass's __init__ for `cls`: a parameter for each init field, in order, with its default (a factory's
    value made per call); a field `init=False` set from its default or factory; then __post_init__, if any."""
    names: dict[str, Any] = {"_MISSING": MISSING}
    params, body = [], []
    this = "__record_self__" if any(f.name == "self" for f in fields(cls)) else "self"
    for f in fields(cls):
        if f.default is not MISSING:
            names[f"_default_{f.name}"] = f.default
            value = f"_default_{f.name}"
        elif f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            value = f"_factory_{f.name}()"
        else:
            value = ""
        if not f.init:
            if value:
                body.append(f"{this}.{f.name} = {value}")
            continue
        if f.default_factory is not MISSING:
            params.append(f"{f.name}=_MISSING")
            body.append(f"{this}.{f.name} = {value} if {f.name} is _MISSING else {f.name}")
        else:
            params.append(f"{f.name}={value}" if value else f.name)
            body.append(f"{this}.{f.name} = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append(f"{this}.__post_init__()")
    source = f"def __init__({', '.join([this, *params])}):\n" + "".join(f"    {line}\n" for line in body or ["pass"])
    exec(source, names)  # noqa: S102 (dataclass's own way: the text is made of field names alone)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _first_init(cls: type) -> Callable[..., None]:
    """An __init__ that makes cls's real one at the first instance, puts it on the class, and runs it."""
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        made = _make_init(cls)
        cls.__init__ = made  # type: ignore[misc]
        made(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _declare(cls: type[T], frozen: bool) -> type[T]:
    own = cls.__dict__
    cls.__record_fields__ = _collect(cls)  # type: ignore[attr-defined]
    if "__init__" not in own:
        cls.__init__ = _first_init(cls)  # type: ignore[misc]
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    # As dataclass decides: hashable by its fields when frozen, unhashable when mutable, unless the class
    # itself defines __hash__ (a class defining only __eq__ has __hash__ None from Python, not by choice).
    if own.get("__hash__") is None and ("__hash__" not in own or "__eq__" in own):
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment,method-assign]
    if "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment,method-assign]
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(f.name for f in cls.__record_fields__ if f.init)  # type: ignore[attr-defined]
    if frozen:
        _freeze(cls)
    return cls


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """Declare a record: `@record` or `@record(frozen=True)`, as `@dataclass`."""
    if cls is None:
        return lambda c: _declare(c, frozen)
    return _declare(cls, frozen)
