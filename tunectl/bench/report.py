"""The report of one bench run: the stack swept, every run, the summaries and the recommendation."""

from __future__ import annotations

from dataclasses import dataclass, field

from tunectl.attributes import range_text
from tunectl.bench.results import Placement, Recommendation, Summary, recommend, summarise
from tunectl.bench.runner import Sweep
from tunectl.bench.stack import Target
from tunectl.errors import ExitCode, TunectlError
from tunectl.status import Status


@dataclass
class BenchReport:
    stack: Target
    sweep: Sweep
    seed: int | None
    schedulers: list
    interrupted: bool = False
    active: dict | None = None  # what the record of intent's profile sets on these devices (`active_wants`)
    summaries: list[Summary] = field(init=False)
    recommendation: Recommendation | None = field(init=False)
    export_failed: bool = False  # an export asked for (--csv) could not be written

    def __post_init__(self) -> None:
        self.summaries = summarise(self.sweep.runs)
        placement = Placement(self.stack.top.name, self.stack.top.cls, self.stack.stacked,
                              tuple(d.name for d in self.stack.scheduled))
        self.recommendation = None if self.interrupted else recommend(self.summaries, placement)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PARTIAL if self.sweep.restore_failures or self.export_failed else ExitCode.OK

    def to_json(self) -> dict:
        stack, sweep, rec = self.stack, self.sweep, self.recommendation
        return {"target": stack.target, "kind": stack.kind, "read_path": stack.read_path,
                "device": stack.top.name, "class": stack.top.cls, "below": [d.name for d in stack.below],
                "scheduled": [d.name for d in stack.scheduled], "schedulers": self.schedulers, "seed": self.seed,
                "interrupted": self.interrupted, "points": [s.to_json() for s in self.summaries],
                "runs": [r.to_json() for r in sweep.runs],
                "recommendation": rec.to_json() if rec else None, "active_profile": self.active,
                "restored": [o.to_json() for o in sweep.restored],
                "restore_failed": [o.to_json() for o in sweep.restore_failures]}


def active_wants(ctx, stack: Target) -> dict | None:
    """What the recorded profile (the record of intent) sets on the swept devices: read_ahead_kb and scheduler.

    None when nothing is applied, or when the record cannot be used now (its profile file changed): bench
    then only measures. Read before the sweep, which holds temporary values.
    """
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    if intent.current(ctx) is None:
        return None
    try:
        active = intent.choose(ctx, None, "bench")
        report = tuning.plan(ctx, None, [d.name for d in stack.devices], profile=active.profile)
    except TunectlError:
        return None
    wants = [{"device": s.device, "attribute": s.attribute, "value": s.after if s.after is not None else range_text(s.bounds)}
             for s in report.settings if s.attribute in ("read_ahead_kb", "scheduler") and s.status != Status.SKIP]
    return {"profile": active.profile.name, "ref": active.ref, "settings": wants}
