"""`tunectl status|plan|apply|verify|rollback`: arguments, the call into `operations`, and the rendering."""

from __future__ import annotations

import argparse

from tunectl.errors import ExitCode, TunectlError
from tunectl.status import Status

EXAMPLES = {
    "status": "examples:\n  tunectl status\n  tunectl status --json | jq '.devices[].class'",
    "plan": "examples:\n  tunectl plan -p throughput-performance\n  tunectl plan -p ./my.yaml /dev/sda --json",
    "apply": "examples:\n  tunectl apply -p latency-performance\n  tunectl apply -p default --check --diff\n"
             "  tunectl apply -p default --json --detailed-exitcode   # for Ansible",
    "verify": "examples:\n  tunectl verify            # the last applied profile, on the devices that apply was limited to\n"
              "  tunectl verify --all      # every device\n  tunectl verify -p desktop sda",
    "rollback": "examples:\n  tunectl rollback          # every device tunectl changed\n  tunectl rollback sdb --check",
}


STATUS_COLUMNS = ["DEVICE", "CLASS", "SCHEDULER", "READ-AHEAD", "IDENTITY", "DRIFT", "KNOBS"]
SETTING_COLUMNS = ["DEVICE", "ATTRIBUTE", "BEFORE -> AFTER", "SOURCE", "STATUS", "NOTE"]
FIT = {"middle": ("IDENTITY",), "keep": ("DEVICE", "STATUS", "DRIFT")}


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.report import add_table_options

    p.epilog = EXAMPLES.get(name)
    if name == "status":
        add_table_options(p, STATUS_COLUMNS, hidden=("KNOBS",))
    elif name in ("plan", "verify"):
        add_table_options(p, SETTING_COLUMNS)
    if name == "status":
        p.add_argument("-p", "--profile", help="compare with this profile instead of the last applied one")
        p.add_argument("--all", action="store_true",
                       help="every device, also when the last apply was limited to some (default: those)")
        return
    if name in ("plan", "verify"):
        p.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
        if name == "verify":
            p.add_argument("devices", nargs="*", metavar="DEV",
                           help="kernel name or /dev path (default: the devices the last apply was limited to, else all)")
            p.add_argument("--all", action="store_true", help="every device, also when the last apply was limited to some")
        else:
            p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all)")
        return
    if name == "apply":
        p.add_argument("-p", "--profile", help="profile name or file (default: 'default')")
        p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all)")
        p.add_argument("--check", action="store_true", help="write nothing; report and exit as if it had")
        p.add_argument("--diff", action="store_true",
                       help="show the changes as a unified diff: a pseudo-file DEV/queue per device, "
                            "a line 'attribute: value' per planned setting")
        p.add_argument("--detailed-exitcode", action="store_true",
                       help="exit 0 if nothing changed, 2 if something changed, 1 on any error")
        p.add_argument("--stack", action="store_true",
                       help="also apply to the disks below each named stacked device; what a udev event runs, so "
                            "it journals no originals and keeps the scope of the last apply")
        return
    p.add_argument("devices", nargs="*", metavar="DEV", help="kernel name or /dev path (default: all journalled)")
    p.add_argument("--check", action="store_true", help="show what would be restored, write nothing")


def run(ctx, args, out) -> int:
    handlers = {"status": _cmd_status, "plan": _cmd_plan, "apply": _cmd_apply, "rollback": _cmd_rollback,
                "verify": lambda ctx, args, out: _cmd_plan(ctx, args, out, verify=True)}
    return handlers[args.command](ctx, args, out)


def _warn_profile(report, out) -> None:
    for w in report.warnings:
        out.warn(str(w))
    for w in getattr(report, "device_warnings", ()):
        out.warn(str(w))


def _cmd_status(ctx, args, out) -> int:
    from tunectl.report import show
    from tunectl.tuning import operations as tuning

    report = tuning.status(ctx, args.profile, scoped=not args.all)
    _warn_profile(report, out)
    drift_by_dev: dict[str, int] = {}
    for s in report.drift:
        drift_by_dev[s.device] = drift_by_dev.get(s.device, 0) + 1
    if out.json:
        out.emit(report.to_json())
        return report.exit_code
    rows = []
    for d in report.devices:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(d.iosched.items()))
        drift = f"{drift_by_dev[d.name]} setting(s)" if d.name in drift_by_dev else "in sync"
        rows.append([d.name, d.cls + (f"/{d.dm_type}" if d.dm_type else ""), show(d.scheduler),
                     show(d.queue.get("read_ahead_kb")), d.identity, drift, knobs])
    out.print(f"profile: {report.profile}")
    _print_scope(report, out)
    out.print(out.table(STATUS_COLUMNS, rows, hide=() if out.verbose else ("KNOBS",), **FIT))
    return report.exit_code


def _print_scope(report, out) -> None:
    """Say so when the last apply's scope narrows the devices looked at (DEV arguments say it themselves)."""
    if report.scope is not None and report.scope.origin == "last-apply":
        out.say(report.scope.describe(report.profile))


def _settings_rows(settings, verbose: int, with_status: bool = False):

    rows = []
    for s in settings:
        status = getattr(s, "status", None)
        setting = getattr(s, "setting", s)
        if not verbose and status in (Status.IN_SYNC, Status.SKIP):
            continue
        note = getattr(s, "error", "") or setting.reason
        row = [setting.device, setting.attribute, _before_after(setting), setting.source]
        if with_status:
            row.append(status)
        rows.append(row + [note])
    return rows


def _before_after(setting) -> str:
    """``8192 -> 8192 (in 128..)`` for a range; ``- -> 128.. (decided after the switch)`` when not yet known."""
    from tunectl.attributes import range_text
    from tunectl.report import show

    if setting.bounds is None:
        return f"{show(setting.before)} -> {show(setting.after)}"
    if setting.after is None:
        return f"{show(setting.before)} -> {range_text(setting.bounds)}"
    return f"{show(setting.before)} -> {show(setting.after)} (in {range_text(setting.bounds)})"


def _summary(statuses: list[str]) -> str:
    counts: dict[str, int] = {}
    for st in statuses:
        counts[st] = counts.get(st, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "nothing to do"


def _cmd_plan(ctx, args, out, verify: bool = False) -> int:
    from tunectl.tuning import operations as tuning

    ref = tuning.active_profile_ref(ctx, args.profile) if verify else args.profile
    report = tuning.plan(ctx, ref, args.devices, scoped=verify and not args.all, verify=verify)
    _warn_profile(report, out)
    drift = report.drift
    if out.json:
        out.emit(report.to_json())
        return report.exit_code
    rows = _settings_rows(report.settings, out.verbose, with_status=True)
    out.print(f"profile: {report.profile}")
    _print_scope(report, out)
    if rows:
        out.print(out.table(SETTING_COLUMNS, rows, **FIT))
    out.say(_summary([s.status for s in report.settings]))
    if verify:
        out.print("in sync" if not drift else f"drift: {len(drift)} setting(s) differ")
    return report.exit_code


def _cmd_apply(ctx, args, out) -> int:
    from tunectl.tuning import operations as tuning

    try:
        report = tuning.apply(ctx, args.profile, args.devices, check=args.check, stack=args.stack)
    except TunectlError as e:
        if args.detailed_exitcode:  # its callers read 2 as "changed": every error is 1, a bad profile or state (5) too
            e.exit_code = ExitCode.DRIFT
        raise
    code = _render_apply(report, args, out)
    if args.detailed_exitcode:
        return 1 if code != ExitCode.OK else (2 if report.changed else 0)
    return code


def _render_apply(report, args, out) -> int:

    _warn_profile(report, out)
    if out.json:
        out.emit(report.to_json())
        return report.exit_code
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
    rows = _settings_rows(report.outcomes, out.verbose, with_status=True)
    if getattr(args, "diff", False):
        diff = _diff(report.outcomes)
        if diff:
            out.stdout.write(diff)  # the requested data: printed even with -q
    elif rows:
        out.print(out.table(SETTING_COLUMNS, rows, **FIT))
    verb = "would change" if report.check else "changed"
    n = sum(o.status in (Status.CHANGED, Status.CHANGE) for o in report.outcomes)
    out.say(f"{report.profile}: {verb} {n} setting(s); {_summary([o.status for o in report.outcomes])}")
    return report.exit_code


def _diff(outcomes) -> str:
    """One pseudo-file per device, ``DEV/queue``: a line ``attribute: value`` per planned setting, before and
    after, as a unified diff (`patch -p1` applies it to such a dump)."""
    from tunectl.report import escape_field, show, unified_diff

    devices: dict[str, tuple[list[str], list[str]]] = {}
    for o in sorted(outcomes, key=lambda o: (o.setting.device, o.setting.attribute)):
        s = o.setting
        before = escape_field(show(s.before))
        after = before
        if o.status in (Status.CHANGED, Status.CHANGE):
            after = show(s.after) if s.bounds is None or s.after is not None else _before_after(s).split(" -> ")[1]
        old, new = devices.setdefault(s.device, ([], []))
        old.append(f"{s.attribute}: {before}\n")
        new.append(f"{s.attribute}: {escape_field(after)}\n")
    return "".join(unified_diff("".join(old), "".join(new), f"a/{dev}/queue", f"b/{dev}/queue")
                   for dev, (old, new) in devices.items())


def _cmd_rollback(ctx, args, out) -> int:
    from tunectl.tuning import operations as tuning

    return _render_apply(tuning.rollback(ctx, args.devices, check=args.check), args, out)
