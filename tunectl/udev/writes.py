"""The writes of the rules, in apply's write order: the third stage of `tunectl.udev.render`.

By the time these rules run, the layers have set ``TUNECTL_*`` properties; for
each value any layer can set, one rule writes it when the property holds it, in
`attributes.write_order` like `apply`: the scheduler (only when it is not
already active), nr_requests, the knobs of the scheduler active afterwards, the
other queue attributes, read_ahead_kb last. A range min..max is written only
when the value read is outside it, to the nearest bound.
"""

from __future__ import annotations

from tunectl.attributes import IOSCHED, LIMIT_ATTRS, QUEUE, SCHEDULERS, range_text, schedulers_with_knob, write_order
from tunectl.udev.match import RuleWriter, env_name, int_globs, quote

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any


class Range(tuple):
    """A setting's range in the rules: (min, max), either None; its ENV text is attributes.range_text's."""

    def __new__(cls, lo: int | None, hi: int | None) -> Range:
        return super().__new__(cls, (lo, hi))

    def __str__(self) -> str:
        return range_text({k: v for k, v in zip(("min", "max"), self) if v is not None})


def _in_range(value: Any, lo: int | None, hi: int | None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (lo is None or value >= lo) and (hi is None or value <= hi)


def _active_glob(name: str) -> str:
    return f"*[[]{name}[]]*"


def write_stage(w: RuleWriter, used: dict[str, set]) -> None:
    """The writes of the values the layers used (`used`: attribute -> values), in apply's write order."""
    schedulers = [s for s in SCHEDULERS if s in used.get("scheduler", ())]
    others = sorted((a for a in used if a != "scheduler"), key=write_order)
    knobs = [a for a in others if a.startswith("iosched/")]
    if not (schedulers or others):
        return
    w.blank()
    w.comment("writes, in tunectl's write order (attributes.write_order): the scheduler, nr_requests (a switch resets")
    w.comment("it), the knobs, other queue attributes, read_ahead_kb last (writing a queue limit recomputes it)")
    if schedulers or knobs:
        w.rule(f'ENV{{{env_name("has_scheduler")}}}!="1"', 'GOTO="tunectl_scheduler_done"')
    if knobs:
        owners = [s for s in SCHEDULERS if any(s in schedulers_with_knob(k.split("/", 1)[1]) for k in knobs)]
        w.comment("knobs belong to the scheduler active after the switch: the chosen one, else the current one")
        for s in owners:
            if s in schedulers:
                w.rule(f'ENV{{{env_name("scheduler")}}}=={quote(s)}', f'ENV{{{env_name("iosched_target")}}}={quote(s)}')
            w.rule(f'ENV{{{env_name("scheduler")}}}!="?*"', f"ATTR{{queue/scheduler}}=={quote(_active_glob(s))}",
                   f'ENV{{{env_name("iosched_target")}}}={quote(s)}')
    if schedulers:
        w.comment("the scheduler first (its knobs exist only once it is active); skipped when already active,")
        w.comment("because even a same-name write freezes the queue")
        for s in schedulers:
            w.rule(f'ENV{{{env_name("scheduler")}}}=={quote(s)}', f"ATTR{{queue/scheduler}}!={quote(_active_glob(s))}",
                   f"ATTR{{queue/scheduler}}={quote(s)}")
        w.comment("no preference offered: nothing written; recorded for `udevadm info` (tunectl verify reports it)")
        w.rule(f'ENV{{{env_name("scheduler_wanted")}}}=="?*"', f'ENV{{{env_name("scheduler")}}}!="?*"',
               f'ENV{{{env_name("scheduler_unavailable")}}}="1"')
    if schedulers or knobs:
        w.rule('LABEL="tunectl_scheduler_done"')
    for attr in others:
        if attr.startswith("iosched/"):
            knob = attr.split("/", 1)[1]
            for s in schedulers_with_knob(knob):
                spec = IOSCHED[s][knob]
                for value in sorted(used[attr], key=_value_order):
                    when = [f'ENV{{{env_name("iosched_target")}}}=={quote(s)}',
                            f"ENV{{{env_name('iosched_' + knob)}}}=={quote(value)}"]
                    if isinstance(value, Range):
                        _range_rules(w, when, f"queue/{attr}", value, spec.minimum)
                    elif _in_range(value, spec.minimum, spec.maximum):
                        w.rule(*when, f"ATTR{{queue/{attr}}}={quote(value)}")
            continue
        if attr in LIMIT_ATTRS:
            w.comment(f"{attr} is a queue limit: writing it, even unchanged, makes the kernel recompute read_ahead_kb")
        if attr == "nr_requests":
            w.comment("nr_requests only on a request queue (mq/): 6.1 lists it on dm and md too but refuses writes")
        for value in sorted(used[attr], key=_value_order):
            when = [f"ENV{{{env_name('queue_' + attr)}}}=={quote(value)}"] + (['TEST=="mq"'] if attr == "nr_requests" else [])
            if isinstance(value, Range):
                _range_rules(w, when, f"queue/{attr}", value, QUEUE[attr].minimum)
                continue
            guard = [f"ATTR{{queue/{attr}}}!={quote(value)}"] if attr in LIMIT_ATTRS else []
            w.rule(*when, *guard, f"ATTR{{queue/{attr}}}={quote(value)}")


def _range_rules(w: RuleWriter, when: list[str], path: str, bounds: Range, lowest: int | None) -> None:
    """Raise a value below the floor, lower one above the cap: exactly apply's nearest bound.

    Both rules compare the value as read before either wrote (udev caches it), so at most one fires.
    """
    lo, hi = bounds
    if not any(line.startswith("# a range min..max") for line in w.lines):
        w.comment("a range min..max is written only when the value is outside it, to the nearest bound; udev compares")
        w.comment("text, not numbers, so each bound is a list of digit globs (a value read once, before the event's writes)")
    if lo is not None:
        w.rule(*when, f"ATTR{{{path}}}!={quote('|'.join(int_globs(lo, None)))}", f"ATTR{{{path}}}={quote(lo)}")
    if hi is not None:
        w.rule(*when, f"ATTR{{{path}}}!={quote('|'.join(int_globs(lowest, hi)))}", f"ATTR{{{path}}}={quote(hi)}")


def _value_order(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, int) and not isinstance(value, Range) else (1, 0, str(value))
