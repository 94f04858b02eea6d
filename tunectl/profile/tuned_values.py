"""One tuned value as a tunectl value: a scheduler list, a read-ahead with tuned's sector suffix and
'<'/'>' modifier, a queue attribute or iosched knob checked against tunectl's attribute table.

tuned_import decides where a value goes (which unit, which classes or devices); this module decides
what it becomes. Each function takes the item (`[unit] key=value`) its messages name and the Findings
that collect what cannot be carried over and what changed on the way; None means nothing carries over.
"""

from __future__ import annotations

from tunectl.attributes import IOSCHED, LEGACY_SCHEDULERS, QUEUE, SCHEDULERS, Attribute
from tunectl.record import field, record


@record
class Findings:
    unconverted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def scheduler(found: Findings, item: str, value: str) -> str | list[str] | None:
    """tuned's elevator= or queue/scheduler: a comma list, first available wins; legacy names mapped."""
    names: list[str] = []
    for name in (n.strip() for n in value.split(",")):
        if name in LEGACY_SCHEDULERS:
            found.note(f"{item}: legacy scheduler {name} mapped to {LEGACY_SCHEDULERS[name]}")
            name = LEGACY_SCHEDULERS[name]
        if name in SCHEDULERS:
            if name not in names:
                names.append(name)
        elif name:
            found.unconverted.append(f"{item}: unknown scheduler '{name}' (tunectl knows {', '.join(SCHEDULERS)})")
    if not names:
        return None
    return names[0] if len(names) == 1 else names


def read_ahead(found: Findings, item: str, value: str) -> int | dict[str, int] | None:
    """tuned's disk readahead=: KiB, or '<n> s' for 512-byte sectors, with an optional '<' or '>'."""
    text = value.strip()
    modifier = text[0] if text[:1] in ("<", ">") else ""
    parts = text[len(modifier) :].split(None, 1)
    try:
        number = int(parts[0])
    except (IndexError, ValueError):
        found.unconverted.append(f"{item}: not a read-ahead tuned understands (a number of KiB, or '<n> s' for sectors)")
        return None
    kib = number
    if len(parts) > 1 and parts[1].startswith("s"):
        kib = number // 2  # 512-byte sectors; tuned truncates the same way
        found.note(f"{item}: {number} sectors of 512 bytes = {kib} KiB")
    elif len(parts) > 1:
        found.note(f"{item}: tuned ignores the suffix '{parts[1]}' and reads the number as KiB")
    clamped = read_ahead_kb(found, item, str(kib))
    if not modifier or clamped is None:
        return clamped
    # tuned's '>' raises and never lowers, '<' lowers and never raises: a floor and a cap (SPEC.md §3).
    bound = "min" if modifier == ">" else "max"
    verb, other = ("raises read-ahead to", "higher") if modifier == ">" else ("lowers read-ahead to", "lower")
    found.note(f"{item}: tuned only {verb} {kib} KiB and keeps a {other} value it finds: "
               f"read_ahead_kb: {{{bound}: {clamped}}} does the same")
    return {bound: clamped}


def read_ahead_kb(found: Findings, item: str, value: str) -> int | None:
    """queue/read_ahead_kb: an integer of KiB, clamped into the kernel's range."""
    attr = QUEUE["read_ahead_kb"]
    try:
        kib = int(value)
    except ValueError:
        found.unconverted.append(f"{item}: read_ahead_kb must be an integer number of KiB")
        return None
    clamped = min(max(kib, attr.minimum or 0), attr.maximum or kib)
    if clamped != kib:
        found.note(f"{item}: {kib} KiB is outside 0-{attr.maximum}; clamped to {clamped}")
    return clamped


def knob(found: Findings, item: str, name: str, value: str) -> int | str | None:
    """queue/iosched/<name>: typed as the first scheduler that has such a knob."""
    owners = [s for s, knobs in IOSCHED.items() if name in knobs]
    if not owners:
        found.unconverted.append(f"{item}: iosched knob {name} is not one tunectl knows for {', '.join(SCHEDULERS)}")
        return None
    return typed(found, item, IOSCHED[owners[0]][name], value)


def typed(found: Findings, item: str, attr: Attribute, value: str) -> int | str | None:
    """`value` as `attr` takes it (one of its choices, or an integer in its range)."""
    if not attr.is_int:
        if value in (attr.choices or ()):
            return value
        found.unconverted.append(f"{item}: {attr.name} must be one of {', '.join(attr.choices or ())}")
        return None
    try:
        number = int(value)
    except ValueError:
        found.unconverted.append(f"{item}: {attr.name} must be an integer")
        return None
    if (attr.minimum is not None and number < attr.minimum) or (attr.maximum is not None and number > attr.maximum):
        found.unconverted.append(f"{item}: {attr.name} must be within {attr.minimum}-{attr.maximum}")
        return None
    return number
