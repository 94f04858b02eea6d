"""Named constants (the exit codes, the verdict words) as `enum` gives them, without importing enum.

`tunectl.errors` and `tunectl.status` are imported by every command, a boot-time replay among them: enum (and,
through it, functools) is two more modules and a class machinery to run before its first read, under a boot's
emulated or busy CPU (#30's boot pair). A class made by `Named` keeps what tunectl uses of an enum: each
UPPER_CASE constant of its body becomes a member, an instance of the class (an int or a str subclass, so it
compares, hashes, sorts and serialises as its value), with `name` and `value`; the class iterates its members in
the order written, `len` counts them, and calling it with a value gives that member (ValueError for any other).
A member is its own copy, and pickles by value.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


class Named(type):
    """The metaclass: `class ExitCode(Member, int, metaclass=Named)` with `OK = 0` in its body."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict):  # noqa: ANN204, N804
        constants = {k: v for k, v in namespace.items() if k.isupper() and not k.startswith("_")}
        cls = super().__new__(mcs, name, bases, {k: v for k, v in namespace.items() if k not in constants})
        members: dict = {}
        value_type = next(b for b in cls.__mro__ if b in (int, str))
        for key, value in constants.items():
            member = value_type.__new__(cls, value)
            member.name, member.value = key, value
            type.__setattr__(cls, key, member)
            members[value] = member
        type.__setattr__(cls, "_members", members)
        return cls

    def __call__(cls, value: object):  # noqa: ANN204
        try:
            return cls._members[value]
        except (KeyError, TypeError):  # TypeError: an unhashable value is no member either
            raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

    def __iter__(cls) -> Iterator:
        return iter(cls._members.values())

    def __len__(cls) -> int:
        return len(cls._members)


class Member:
    """What a member says of itself, as an enum member does; a base before its value's type (int or str)."""

    name: str
    value: object

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __copy__(self) -> Member:
        return self

    def __deepcopy__(self, memo: dict) -> Member:
        return self

    def __reduce_ex__(self, protocol: object) -> tuple:
        return type(self), (self.value,)
