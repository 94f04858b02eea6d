"""`tunectl udev render|install|remove|check|monitor`: arguments, dispatch, and the monitor's output."""

from __future__ import annotations

import argparse

EXAMPLES = ("examples:\n  tunectl udev render -p throughput-performance\n"
            "  tunectl udev install -p throughput-performance --trigger\n"
            "  tunectl udev check -p throughput-performance   # exit 1 if the installed rules differ\n"
            "  tunectl udev remove                            # the rules file the last install wrote\n"
            "  tunectl udev monitor --json                    # one line per hot-plug event")


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EXAMPLES
    usub = p.add_subparsers(dest="udev_command", metavar="ACTION")
    usub.required = True
    for verb, help_ in (("render", "print the rules for a profile (same profile, same bytes)"),
                        ("install", "write the rules file atomically and reload udev"),
                        ("remove", "delete the rules file and reload udev"),
                        ("check", "exit 1 unless the installed rules match what the profile renders")):
        up = add_action(usub, verb, help_)
        if verb != "remove":
            up.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
        if verb != "remove":
            up.add_argument("--all", action="store_true",
                            help="rules for every device (default: the devices the last apply was limited to)")
        if verb != "render":
            up.add_argument("--rules-dir", metavar="DIR",
                            help="where the rules file lives (default: where the last `udev install` put it, "
                                 "as recorded in the state directory, else /etc/udev/rules.d); udev reads only its own "
                                 "rules directories: status and doctor say a file elsewhere is not read")
        if verb == "render":
            up.add_argument("--as-installed", action="store_true",
                            help="with -p: what `udev install -p` writes (the recorded scope, originals kept for the "
                                 "journal), not the profile's rules alone")
        if verb == "install":
            up.add_argument("--trigger", action="store_true",
                            help="send change events to the devices the rules are scoped to (every block disk with "
                                 "--all) and wait for udev to settle")
            up.add_argument("--allow-untrusted-profile", action="store_true",
                            help="install even when the profile's directory, or the tunectl a RUN starts, is not "
                                 "root's alone (udev runs them as root); a profile file another user can change "
                                 "is refused all the same")
    mp = add_action(usub, "monitor", "follow block add/change events and verify each device once udev ran its rules; "
                                     "one line per event (--json: one object per line); Ctrl-C ends it")
    mp.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
    mp.add_argument("--count", type=int, metavar="N", help="stop after N reported events (default: run until Ctrl-C)")


def run(ctx, args, out) -> int:
    from tunectl.udev import install

    if args.udev_command == "monitor":
        return monitor(ctx, args, out)

    def warn(rendered) -> None:
        for note in rendered.active.notes:
            out.warn(f"tunectl: note: {note}")
        for w in rendered.profile.warnings:
            out.warn(str(w))
        if not out.quiet:
            for note in rendered.rendered.notes:
                out.warn(f"tunectl: note: {note}")

    if args.udev_command == "render":
        # `render -p P` is the profile's rules alone; without -p, or --as-installed, what `udev install` writes.
        pure = bool(args.profile) and not args.as_installed
        report = install.render(ctx, args.profile, args.all, pure=pure)
        if not out.quiet:
            out.warn(f"tunectl: note: {_which_rules(report, pure, args.all)}")
        warn(report)
    elif args.udev_command == "install":
        report = install.install(ctx, args.profile, args.rules_dir, args.trigger, warn, args.all,
                                 args.allow_untrusted_profile)
        _warn_other_writers(ctx, report, out)
    elif args.udev_command == "remove":
        report = install.remove(ctx, args.rules_dir)
        if report.adopted:
            out.warn(f"tunectl: note: journalled the originals the udev rules kept for {', '.join(report.adopted)} "
                     "(tuned by the rules before tunectl saw them): `tunectl rollback` restores them")
    else:
        report = install.check(ctx, args.profile, args.rules_dir, warn, args.all)
    return out.show(report)


def _warn_other_writers(ctx, report, out) -> None:
    """After an install: every other writer that would undo the rules on the devices they match (what `tunectl
    doctor` reports), on stderr; from the plan the install journalled from."""
    from tunectl.owners.doctor import diagnose

    found = diagnose(ctx, report.render.profile, rules_path=str(report.path), plan=report.plan)
    for c in found.undone:
        out.warn(f"tunectl: warning: {c.device} {c.attribute}: {c.writer.describe()}, which undoes tunectl's rules at "
                 f"{' and '.join(c.undoes_at)}; {c.resolution()} (`tunectl doctor` lists every other writer)")


def _which_rules(report, pure: bool, everything: bool) -> str:
    """render's first line: which rules these are, and how to see the others (render, review, install)."""
    name = report.profile.name
    if not pure:
        where = "every device" if report.scope is None else f"the {len(report.scope)} device(s) of the last apply's scope"
        return f"the rules `tunectl udev install{' --all' if everything else ''}` writes: profile {name}, {where}"
    record = report.active.intent
    scope = None if everything or record is None else record.scope
    where = "for every device" if scope is None else f"for the {len(scope)} device(s) of the last apply's scope"
    return (f"profile {name}'s own rules for every device; `tunectl udev install -p {name}` writes them {where}, "
            f"keeping each original for the journal: `tunectl udev render -p {name} --as-installed` shows that file")


def monitor(ctx, args, out, events=None) -> int:
    """Print one line per event until Ctrl-C (exit 0) or --count events; `events` replaces udev in tests."""
    import itertools
    import sys

    from tunectl.errors import ExitCode, UsageError
    from tunectl.system.roots import SYS
    from tunectl.tuning import operations
    from tunectl.udev.monitor import follow, udev_events

    if args.count is not None and args.count < 1:
        raise UsageError(f"--count must be at least 1, got {args.count}")
    from tunectl.tuning import intent

    active = intent.choose(ctx, args.profile, "udev monitor")
    profile = active.profile
    for note in active.notes:
        out.warn(f"tunectl: note: {note}")
    for w in profile.warnings:
        out.warn(str(w))
    if events is None and not ctx.real:
        raise UsageError(f"udev monitor follows this machine's udev events; --sysfs-root {ctx.sysfs.root} is not {SYS}",
                         hint="drop --sysfs-root (and TUNECTL_SYSFS_ROOT) to monitor the real devices")

    def check(name: str):
        report = operations.plan(ctx, None, [name], profile=profile)
        return report.profile, report.settings

    source = udev_events() if events is None else events
    if events is None:
        next(source, None)  # subscribes before the line below: no event after it is missed (yields nothing)
    if not out.quiet:
        out.warn(f"tunectl: following udev block events, profile {profile.name}; Ctrl-C ends")
        out.stderr.flush()
    reports = follow(source, check, profile.name)
    try:
        # islice takes at most sys.maxsize: a --count past it (a typo'd 10**30) is "until Ctrl-C" in all but name
        for report in itertools.islice(reports, None if args.count is None else min(args.count, sys.maxsize)):
            out.show(report, one_line=True)  # each event's own exit code (1 on drift) is not the monitor's
            out.stdout.flush()
    except KeyboardInterrupt:
        pass  # the way to stop a monitor: not an error
    return ExitCode.OK
