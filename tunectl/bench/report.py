"""The report of one bench run: the stack swept, every run, the summaries and the recommendation."""

from __future__ import annotations

from tunectl.attributes import range_text
from tunectl.bench.results import Placement, Recommendation, Summary, recommend, summarise
from tunectl.bench.runner import Sweep
from tunectl.bench.stack import Target
from tunectl.errors import ExitCode, TunectlError
from tunectl.record import field, record
from tunectl.report import Report, shown
from tunectl.status import Status
from tunectl.units import counted


@record
class BenchReport(Report):
    stack: Target
    sweep: Sweep
    seed: int | None
    schedulers: list
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP ended the sweep: no recommendation, no table (what ran is in JSON)
    stop_signal: int | None = None  # SIGTERM or SIGHUP ended it (exit 128 + its number: 143, 129); None: Ctrl-C (130)
    active: dict | None = None  # what the record of intent's profile sets on these devices (`active_wants`)
    summaries: list[Summary] = field(init=False)
    recommendation: Recommendation | None = field(init=False)
    export_failed: bool = False  # an export asked for (--csv) could not be written

    def __post_init__(self) -> None:
        self.summaries = summarise(self.sweep.runs)
        placement = Placement(self.stack.top.name, self.stack.top.cls, self.stack.stacked,
                              tuple(d.name for d in self.stack.scheduled))
        self.recommendation = None if self.interrupted else recommend(self.summaries, placement, self.stack.kept_cache)

    @property
    def exit_code(self) -> int:
        if self.interrupted:  # as a shell reports a process a signal ended: 128 + SIGTERM, SIGHUP or SIGINT
            return 128 + self.stop_signal if self.stop_signal else ExitCode.INTERRUPTED
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

    def print_text(self, out) -> None:
        """A row per point and device, the chart, the recommendation, what the applied profile sets, what was restored.

        Interrupted: nothing on stdout (the lines on stderr said why it stopped and what was restored)."""
        if self.interrupted:
            return
        from tunectl.bench import chart
        from tunectl.report import table

        rows = []
        for s in self.summaries:
            first = [s.scheduler or "-", s.read_ahead_kb, f"{s.mb_s:.1f}", f"{s.spread_pct:.0f}%"]
            if s.random_iops is not None:
                first.append(f"{s.random_iops:.0f}")
            for i, d in enumerate(s.stats):
                lead = first if i == 0 else [""] * len(first)
                rows.append(lead + [d.device, f"{d.reads / s.runs:.0f}", f"{d.merged_share * 100:.0f}%",
                                    f"{d.avg_request_kib:.0f}", f"{d.read_await_ms:.2f}",
                                    f"{d.time_in_queue_ms / s.runs:.0f}"])
        headers = ["SCHEDULER", "RA KiB", "MB/s", "SPREAD"] + (["RAND IOPS"] if self.sweep.random else []) + \
            ["DEVICE", "READS", "MERGED", "AVG KiB", "AWAIT ms", "QUEUE ms"]
        out.print(table(headers, rows))
        out.print("READS: read requests completed per run; MERGED: share of reads merged into another; "
                  "AVG KiB: request size; QUEUE ms: time in queue per run (weighted)")
        out.print()
        out.print(chart.render(self.summaries))
        rec = self.recommendation
        if rec:
            out.print()
            if rec.fragment is None:
                out.print(f"recommendation: none: {rec.reason}")
            else:
                out.print("recommendation (paste into a profile):")
                out.print(rec.fragment.rstrip())
            if rec.caution:
                out.warn(f"tunectl bench: caution: {rec.caution}")
        active = self.active
        if active is not None:
            sets = ", ".join(f"{w['device']} {w['attribute']}={w['value']}" for w in active["settings"]) or "nothing here"
            out.print(f"applied profile {shown(active['profile'])} ({shown(active['ref'])}) sets: {shown(sets)}; "
                      "`tunectl apply` keeps "
                      "these until the recommendation goes into that profile")
        out.print()
        if self.sweep.restore_failures:
            report_restore(self.sweep, out, "done")
        else:
            out.print(restored_text(self.sweep))


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


def restored_text(sweep: Sweep) -> str:
    """What the sweep put back, per device (the knobs counted): the last line of every bench."""
    by_device: dict[str, list[str]] = {}
    knobs: dict[str, int] = {}
    for o in sweep.restored:
        s = o.setting
        if s.attribute.startswith("iosched/"):
            knobs[s.device] = knobs.get(s.device, 0) + 1
        else:
            by_device.setdefault(s.device, []).append(f"{s.attribute}={s.after}")
    what = "; ".join(f"{dev} {' '.join(attrs)}"
                     + (f" and {counted(knobs[dev], f'{_scheduler_of(attrs)} knob')}" if dev in knobs else "")
                     for dev, attrs in by_device.items())
    return f"restored every original setting: {what or 'nothing had changed'}"


def _scheduler_of(attrs: list[str]) -> str:
    return next((a.split("=", 1)[1] for a in attrs if a.startswith("scheduler=")), "scheduler")


def report_restore(sweep: Sweep, out, why: str) -> None:
    """On stderr: why the sweep ended and what it restored, or each setting it could not."""
    if not sweep.changed:
        out.warn(f"tunectl bench: {why}; no setting had been changed")
        return
    failures = sweep.restore_failures
    if not sweep.restored and not failures:
        out.warn(f"tunectl bench: {why}; restoring did not run")
        return
    if failures:
        for o in failures:
            s = o.setting
            out.warn(f"tunectl bench: could not restore {s.device} {s.attribute}={s.after}: {o.error}")
        return
    out.warn(f"tunectl bench: {why}; {restored_text(sweep)}")
