"""`tunectl status|plan|apply|verify|rollback`: arguments, the call into `operations`, and the rendering."""

from __future__ import annotations

import argparse
import os

from tunectl.errors import ExitCode, TunectlError
from tunectl.status import Status
from tunectl.tuning import text

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


DEV_HELP = ("a device: kernel name (sda), MAJ:MIN (8:0), /sys/block/sda, a /dev path or any link root owns to a "
            "device node (/dev/mapper/NAME, /dev/VG/LV, /dev/disk/by-id/...), UUID=, LABEL=, PARTUUID=, PARTLABEL=, "
            "a partition (its disk), or a mountpoint or any path (the disks under its filesystem)")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    from tunectl.report import add_table_options

    p.epilog = EXAMPLES.get(name)
    if name == "status":
        add_table_options(p, text.STATUS_COLUMNS)
    elif name == "plan":
        add_table_options(p, text.SETTING_COLUMNS)
    elif name == "verify":
        add_table_options(p, text.VERIFY_COLUMNS)
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
                                           "with nothing applied, 'default'); as root, a file must be root's and "
                                           "not group/world-writable")
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
    from tunectl.system.state import HOLD  # loaded by then (the journal's store): `--help` does not load it

    if not os.path.lexists(ctx.state.dir / HOLD):
        return []  # no bench runs (nor left a record): the record's reader is not even loaded
    from tunectl.system.hold import held

    hold = held(ctx.state.dir)
    return list(hold.devices) if hold is not None else []


def _say_adopted(names: list[str], out) -> None:
    if names:
        out.warn(f"tunectl: note: journalled the originals the udev rules kept for {', '.join(names)} "
                 "(tuned by the rules before tunectl saw them)")


def _owners_of(out):
    """The owners check, for status and verify when their output shows who set a value (`text.shows_owners`);
    loaded then only, never by plan or apply. Else `_journal_only`: no owner is found, none is shown."""
    if not text.shows_owners(out):
        return _journal_only
    from tunectl.owners import find_owners

    return find_owners


def _relinked_of():
    """verify's check for relinked loop devices: it reads the journal, which plan does not load."""
    from tunectl.tuning import changes

    return changes.relinked


def _adopt_seen(ctx, devices) -> list[str]:
    """plan, verify, status: journal what installed udev rules kept (`changes.adopt_seen`); with no rules recorded,
    nothing to adopt, and the journal is not loaded."""
    from tunectl.tuning import intent

    record = intent.current(ctx)
    if record is None or record.rules is None:
        return []
    from tunectl.tuning import changes

    return changes.adopt_seen(ctx, devices)


def _journal_only(ctx, devices, settings=(), attributes=None, rules_path=None) -> dict:
    """No owners, but the journal read as finding them reads it: a journal that cannot be read fails status and
    verify whatever they show, as before their plain text stopped looking for owners."""
    from tunectl.tuning import journal

    if devices and ctx.state.exists():
        journal.load(ctx.state)
    return {}


def _cmd_status(ctx, args, out) -> int:
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    active = intent.choose(ctx, args.profile, "status")
    _notes_first(active, out)
    report = tuning.status(ctx, active.profile, _owners_of(out), args.devices, scoped=not args.all)
    _warn_profile(report, out)
    _say_adopted(_adopt_seen(ctx, report.devices), out)
    report.notes, report.applied = active.notes, active.intent is not None
    report.rules = active.intent.rules if active.intent is not None else None
    return out.show(report)


def _cmd_plan(ctx, args, out, verify: bool = False) -> int:
    from tunectl.tuning import intent
    from tunectl.tuning import operations as tuning

    if verify and not args.profile and intent.current(ctx) is None:
        return out.show(tuning.NothingAppliedReport(str(ctx.state.dir)))
    active = intent.choose(ctx, args.profile, "verify" if verify else "plan")
    _notes_first(active, out)
    scoped = (verify or active.from_record) and not args.all
    report = tuning.plan(ctx, None, args.devices, profile=active.profile, scoped=scoped, verify=verify,
                         owners_of=_owners_of(out) if verify else None, relinked_of=_relinked_of() if verify else None)
    _warn_profile(report, out)
    _say_adopted(_adopt_seen(ctx, report.devices), out)
    report.notes = active.notes
    report.held = benched = _running_bench(ctx) if verify else []
    if benched:
        out.warn(f"tunectl: note: a bench is running on {', '.join(benched)}: its temporary values there are not "
                 "drift; verify again when it ends")
    return out.show(report)


def _cmd_apply(ctx, args, out) -> int:
    from tunectl.tuning import changes as tuning
    from tunectl.tuning import intent

    try:
        active = intent.choose(ctx, args.profile, "apply")
        _notes_first(active, out)
        report = tuning.apply(ctx, active, args.devices, check=args.check, stack=args.stack,
                              scoped=active.from_record and not args.all)
    except TunectlError as e:
        if args.detailed_exitcode:  # its callers read 2 as "changed": every error is 1, a bad profile or state (5) too
            e.exit_code = ExitCode.DRIFT
        raise
    if not args.detailed_exitcode:
        return _show_apply(report, args, out)
    try:
        code = _show_apply(report, args, out)
    except BrokenPipeError:  # the reader went away part way (`| head`): the verdict stands, in this option's terms
        if out.verdict is not None:
            out.verdict = _detailed(out.verdict, report)
        raise
    return _detailed(code, report)


def _detailed(code: int, report) -> int:
    """--detailed-exitcode's verdict: 1 for any failure, 2 for a change, 0 for none."""
    return 1 if code != ExitCode.OK else (2 if report.changed else 0)


def _show_apply(report, args, out) -> int:
    """apply's and rollback's result: the profile's warnings first (stderr), then the report (tunectl.tuning.text)."""
    _warn_profile(report, out)
    report.show_diff = bool(getattr(args, "diff", False))  # --diff: the changes as a patch
    return out.show(report)


def _cmd_rollback(ctx, args, out) -> int:
    from tunectl.tuning import rollback as tuning

    printing = args.print_script and not out.json  # --print-script: a shell script instead of the report's text
    report = tuning.rollback(ctx, args.devices, check=args.check or args.print_script, remove_rules=args.remove_rules)
    if printing:
        for note in report.notes:
            out.warn(f"tunectl: note: {note}")
        out.stdout.write(restore_script(report.outcomes, str(ctx.roots.sys if ctx.roots else ctx.sysfs.root)))
        return report.exit_code
    return _show_apply(report, args, out)


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
