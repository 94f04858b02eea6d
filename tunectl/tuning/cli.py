"""`tunectl status|plan|apply|verify|rollback`: arguments, the call into `operations`, and the rendering."""

from __future__ import annotations

import argparse

from tunectl.errors import ExitCode, TunectlError
from tunectl.report import Column
from tunectl.status import Marked, Status

EXAMPLES = {
    "status": "examples:\n  tunectl status\n  tunectl status --json | jq '.devices[].class'",
    "plan": "examples:\n  tunectl plan -p throughput-performance\n  tunectl plan -p ./my.yaml /dev/sda --json",
    "apply": "examples:\n  tunectl apply -p latency-performance\n  tunectl apply -p default --check --diff\n"
             "  tunectl apply -p default --json --detailed-exitcode   # for Ansible",
    "verify": "examples:\n  tunectl verify            # the last applied profile, on the devices that apply was limited to\n"
              "  tunectl verify --all      # every device\n  tunectl verify -p desktop sda",
    "rollback": "examples:\n  tunectl rollback          # every device tunectl changed\n  tunectl rollback sdb --check\n"
                "  tunectl rollback --print > restore.sh   # review, then run: sh restore.sh\n"
                "  tunectl rollback --remove-rules   # while udev rules are installed",
}


# The column tables (lsblk's idea): -o picks from them, --columns lists them with their help, the table cuts by them.
# At 80 columns a plan cuts where a value came from and its note before any value.
STATUS_COLUMNS = [
    Column("DEVICE", "the kernel name (sda, nvme0n1, dm-0)", cut="never"),
    Column("CLASS", "the device class the profile's classes: match (/dm subtype for device-mapper)"),
    Column("SCHEDULER", "the active I/O scheduler"),
    Column("READ-AHEAD", "queue/read_ahead_kb, in KiB"),
    Column("IDENTITY", "what identifies the device across boots (WWN, serial, UUID, loop backing file)", cut="middle"),
    Column("DRIFT", "settings that differ from the profile, 'in sync', or 'skip' (the profile sets nothing here)",
           cut="never"),
    Column("KNOBS", "the active scheduler's tunables (queue/iosched/*)", hidden=True),
]
SETTING_COLUMNS = [
    Column("DEVICE", "the kernel name of the device set", cut="never"),
    Column("ATTRIBUTE", "the sysfs attribute under queue/ (scheduler, read_ahead_kb, iosched/...)"),
    Column("BEFORE -> AFTER", "the value now, and the value the profile wants (a range: kept when inside)"),
    Column("SOURCE", "the profile layer the value comes from (classes.X, devices[N], below:)", cut="first"),
    Column("STATUS", "ok, change, changed, skip, unavailable, failed or not-permitted", cut="never"),
    Column("NOTE", "why: a skip's or a failure's reason, a kernel's rounding", cut="first"),
]
# who set the value now there (tunectl.owners); shown with -v
VERIFY_COLUMNS = [*SETTING_COLUMNS, Column("OWNER", "who set the value now there (tunectl, a udev rule, tuned, "
                                                    "the kernel's default)", hidden=True)]


DEV_HELP = ("a device: kernel name (sda), /dev path or link, UUID=, LABEL=, PARTUUID=, PARTLABEL=, a partition "
            "(its disk), or a mountpoint or any path (the disks under its filesystem)")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.report import add_table_options

    p.epilog = EXAMPLES.get(name)
    if name == "status":
        add_table_options(p, STATUS_COLUMNS)
    elif name == "plan":
        add_table_options(p, SETTING_COLUMNS)
    elif name == "verify":
        add_table_options(p, VERIFY_COLUMNS)
    if name == "rollback":
        p.add_argument("devices", nargs="*", metavar="DEV", help=f"{DEV_HELP} (default: all journalled)")
        p.add_argument("--check", action="store_true", help="show what would be restored, write nothing")
        p.add_argument("--print", action="store_true", dest="print_script",
                       help="print the shell lines that would restore the originals (echo VALUE > /sys/...), in "
                            "the order rollback writes them, for review or to run elsewhere; writes nothing")
        p.add_argument("--remove-rules", action="store_true",
                       help="remove the installed udev rules first (a rollback is refused while they are installed)")
        return
    p.add_argument("-p", "--profile", help="profile name or file (default: the last applied, see `status`; "
                                           "with nothing applied, 'default')")
    p.add_argument("devices", nargs="*", metavar="DEV",
                   help=f"{DEV_HELP} (default: without -p, the devices the last apply was limited to; "
                        "else all)")
    p.add_argument("--all", action="store_true", help="every device, also when the last apply was limited to some")
    if name == "apply":
        p.add_argument("--check", action="store_true", help="write nothing; report and exit as if it had")
        p.add_argument("--diff", action="store_true",
                       help="show the changes as a unified diff: a pseudo-file DEV/queue per device, "
                            "a line 'attribute: value' per planned setting")
        p.add_argument("--detailed-exitcode", action="store_true",
                       help="exit 0 if nothing changed, 2 if something changed, 1 on any error")
        p.add_argument("--stack", action="store_true",
                       help="also apply to the disks below each named stacked device; what a udev event runs, so "
                            "it journals no originals and keeps the record (profile, scope) of the last apply")


def run(ctx, args, out) -> int:
    handlers = {"status": _cmd_status, "plan": _cmd_plan, "apply": _cmd_apply, "rollback": _cmd_rollback,
                "verify": lambda ctx, args, out: _cmd_plan(ctx, args, out, verify=True)}
    return handlers[args.command](ctx, args, out)


def _warn_profile(report, out) -> None:
    for w in report.warnings:
        out.warn(str(w))
    for w in getattr(report, "device_warnings", ()):
        out.warn(str(w))


def _notes_first(active, out) -> None:
    """What chose the profile (nothing applied yet: the default), on stderr before any other line: stdout
    stays the table or document that scripts read."""
    for note in active.notes:
        out.warn(f"tunectl: note: {note}")


def _running_bench(ctx) -> list[str]:
    """The devices a running `tunectl bench` holds temporary values on (its hold record in the state directory)."""
    from tunectl.system.hold import held

    hold = held(ctx.state.dir) if ctx.state.dir.exists() else None
    return list(hold.devices) if hold is not None else []


def _say_adopted(names: list[str], out) -> None:
    if names:
        out.warn(f"tunectl: note: journalled the originals the udev rules kept for {', '.join(names)} "
                 "(tuned by the rules before tunectl saw them)")


def _owners_of():
    """The owners check, loaded by the commands that show who set a value (status, verify), not by plan or apply."""
    from tunectl.owners import find_owners

    return find_owners


def _cmd_status(ctx, args, out) -> int:
    from tunectl.report import show
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    active = intent.choose(ctx, args.profile, "status")
    _notes_first(active, out)
    report = tuning.status(ctx, active.profile, _owners_of(), args.devices, scoped=not args.all)
    _warn_profile(report, out)
    _say_adopted(tuning.adopt_seen(ctx, report.devices), out)
    drift_by_dev: dict[str, int] = {}
    for s in report.drift:
        drift_by_dev[s.device] = drift_by_dev.get(s.device, 0) + 1
    if out.json:
        rules = active.intent.rules if active.intent is not None else None
        out.emit(dict(report.to_json(), applied=active.intent is not None, notes=active.notes,
                      rules=rules.to_json() if rules is not None else None))
        return report.exit_code
    rows = []
    tuned = {s.device for s in report.settings}
    for d in report.devices:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(d.iosched.items()))
        # a device the profile sets nothing on is skipped, as plan says, not "in sync"
        drift = Marked(f"{drift_by_dev[d.name]} setting(s)", Status.DRIFT) if d.name in drift_by_dev else \
            Marked("in sync", Status.IN_SYNC) if d.name in tuned else Marked("skip", Status.SKIP)
        rows.append([d.name, d.cls + (f"/{d.dm_type}" if d.dm_type else ""), show(d.scheduler),
                     show(d.queue.get("read_ahead_kb")), d.identity, drift, knobs])
    out.heading(f"profile: {report.profile}")
    rules = active.intent.rules if active.intent is not None else None
    if rules is not None:
        out.heading(f"udev rules: {rules.path} (profile {rules.ref}"
                    + (", every device)" if rules.scope is None else f", {len(rules.scope)} device(s))"))
    _print_scope(report, out)
    out.print(out.table(STATUS_COLUMNS, rows))
    if out.verbose:
        _print_owners(report, out)
    return report.exit_code


def _print_owners(report, out) -> None:
    """Who set each value shown (-v): one line per device and attribute."""
    from tunectl.owners import current_value
    from tunectl.report import show, table

    rows = []
    for d in report.devices:
        found = report.owners.get(d.name)
        for attr, owner in sorted(found.owners.items()) if found is not None else ():
            rows.append([d.name, attr, show(current_value(d, attr)), owner.kind, owner.detail])
    if rows:
        out.print("")
        # not out.table: -o names the status table's columns
        out.print(table(["DEVICE", "ATTRIBUTE", "VALUE", "OWNER", "WHY"], rows, width=out.width, keep=("DEVICE", "OWNER")))


def _print_scope(report, out) -> None:
    """Say so when the last apply's scope narrows the devices looked at (DEV arguments say it themselves)."""
    if report.scope is not None and report.scope.origin == "last-apply":
        out.heading(report.scope.describe(report.profile))


def _settings_rows(settings, verbose: int, with_status: bool = False, owner=None):

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
        rows.append(row + [note] + ([_owner_cell(owner(setting.device, setting.attribute))] if owner else []))
    return rows


def _owner_cell(owner) -> str:
    return "-" if owner is None else owner.detail


def _before_after(setting) -> str:
    """``8192 -> 8192 (in 128..)`` for a range; ``- -> 128.. (decided after the switch)`` when not yet known."""
    from tunectl.attributes import range_text
    from tunectl.report import show

    if setting.bounds is None:
        return f"{show(setting.before)} -> {show(setting.after)}"
    if setting.after is None:
        return f"{show(setting.before)} -> {range_text(setting.bounds)}"
    return f"{show(setting.before)} -> {show(setting.after)} (in {range_text(setting.bounds)})"


def _print_skipped(skipped: list[tuple[str, str]], out) -> None:
    for device, reason in skipped:
        out.heading(f"skipped {device}: {reason}")  # on stderr when -o/-r/-P make stdout the table alone


def _summary(statuses: list[str]) -> str:
    counts: dict[str, int] = {}
    for st in statuses:
        counts[st] = counts.get(st, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "nothing to do"


def _cmd_plan(ctx, args, out, verify: bool = False) -> int:
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    if verify and not args.profile and intent.current(ctx) is None:
        if out.json:
            out.emit({"profile": None, "in_sync": True, "applied": False, "scope": None, "settings": [],
                      "skipped": [], "device_warnings": []})
        else:
            out.print(f"nothing applied: no profile is recorded in {ctx.state.dir} (none applied yet, or all rolled "
                      "back); `tunectl verify -p PROFILE` compares with one")
        return ExitCode.OK
    active = intent.choose(ctx, args.profile, "verify" if verify else "plan")
    _notes_first(active, out)
    scoped = (verify or active.from_record) and not args.all
    report = tuning.plan(ctx, None, args.devices, profile=active.profile, scoped=scoped, verify=verify,
                         owners_of=_owners_of() if verify else None)
    _warn_profile(report, out)
    _say_adopted(tuning.adopt_seen(ctx, report.devices), out)
    benched = _running_bench(ctx) if verify else []
    drift = [s for s in report.drift if s.device not in benched]
    code = ExitCode.DRIFT if verify and (drift or report.relinked) else ExitCode.OK
    if benched:
        out.warn(f"tunectl: note: a bench is running on {', '.join(benched)}: its temporary values there are not "
                 "drift; verify again when it ends")
    if out.json:
        out.emit(dict(report.to_json(), in_sync=not drift and not report.relinked, notes=active.notes))
        return code
    rows = _settings_rows(report.settings, out.verbose, with_status=True, owner=report.owner if verify else None)
    out.heading(f"profile: {report.profile}")
    _print_scope(report, out)
    if rows:
        out.print(out.table(VERIFY_COLUMNS if verify else SETTING_COLUMNS, rows))
    _print_skipped(report.skipped, out)
    out.heading(_summary([s.status for s in report.settings]))
    if verify:
        out.heading("in sync" if not drift and not report.relinked else
                    f"drift: {len(drift)} setting(s) differ, {len(report.relinked)} tuned loop device(s) changed identity")
    return code


def _cmd_apply(ctx, args, out) -> int:
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    try:
        active = intent.choose(ctx, args.profile, "apply")
        _notes_first(active, out)
        report = tuning.apply(ctx, active, args.devices, check=args.check, stack=args.stack,
                              scoped=active.from_record and not args.all)
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
        for device, reason in report.skipped:  # stdout stays a patch
            out.warn(f"tunectl: note: skipped {device}: {reason}")
    else:
        if rows:
            out.print(out.table(SETTING_COLUMNS, rows))
        _print_skipped(report.skipped, out)
    verb = "would change" if report.check else "changed"
    n = sum(o.status in (Status.CHANGED, Status.CHANGE) for o in report.outcomes)
    out.say(f"{report.profile}: {verb} {n} setting(s); {_summary([o.status for o in report.outcomes])}")
    if report.record_error:
        from tunectl.report import error_lines

        for line in error_lines(report.record_error, "free space or fix the state directory, then run the same "
                                "apply again: it changes nothing and saves the record"):
            out.warn(line)
    elif report.exit_code == ExitCode.NOT_PERMITTED:
        out.warn("tunectl: error: the kernel refused the writes (not permitted): nothing was changed or recorded\n"
                 "hint: run as root")
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

    printing = args.print_script and not out.json
    report = tuning.rollback(ctx, args.devices, check=args.check or args.print_script, remove_rules=args.remove_rules)
    if printing:
        for note in report.notes:
            out.warn(f"tunectl: note: {note}")
        out.stdout.write(restore_script(report.outcomes, str(ctx.roots.sys if ctx.roots else ctx.sysfs.root)))
        return report.exit_code
    return _render_apply(report, args, out)


def restore_script(outcomes, sys_root: str) -> str:
    """`echo VALUE > /sys/block/DEV/queue/ATTR` per value rollback would write, in its order (read-ahead last)."""
    import os
    import shlex

    from tunectl.report import show

    lines = ["#!/bin/sh", "# tunectl rollback --print: restores the journalled originals; review before running",
             "set -e"]
    for o in outcomes:
        s = o.setting
        if o.status != Status.CHANGE:
            continue
        path = os.path.join(sys_root, "block", s.device, "queue", s.attribute)
        lines.append(f"echo {shlex.quote(show(s.after))} > {shlex.quote(path)}")
    if len(lines) == 3:
        lines.append("# nothing to restore")
    return "\n".join(lines) + "\n"
