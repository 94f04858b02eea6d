"""`tunectl doctor`: arguments, the call into `owners.doctor`, and the rendering."""

from __future__ import annotations

import argparse

from tunectl.tuning.cli import DEV_HELP

EPILOG = """\
Looks for every other writer of the attributes the profile sets: udev rules (every
rules directory udev reads, in udev's order: /etc, /run, /usr/lib, /lib; a file in
/etc hides a same-named one below it), tuned's active profile, /etc/sysfs.conf and
/etc/sysfs.d, systemd-tmpfiles 'w' lines on /sys/block, and elevator= on the kernel
command line. For each one it says whether it undoes tunectl at boot (tmpfiles,
sysfsutils and tuned run after udev's coldplug) or at hot-plug (a udev rule ordered
after tunectl's 65-tunectl.rules, and tuned), and how to resolve it.

exit status: 0 when no other writer undoes tunectl, 1 when one does.

examples:
  tunectl doctor                  # the applied profile on the devices it was applied to
  tunectl doctor -p desktop sda
  tunectl doctor --json | jq '.writers[] | select(.undoes)'"""


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EPILOG
    p.add_argument("-p", "--profile", help="profile name or file (default: the last applied; with nothing applied, "
                                           "'default')")
    p.add_argument("devices", nargs="*", metavar="DEV",
                   help=f"{DEV_HELP} (default: the devices the last apply was limited to; else all)")
    p.add_argument("--all", action="store_true", help="every device, also when the last apply was limited to some")


def run(ctx, args, out) -> int:
    from tunectl.owners.doctor import diagnose
    from tunectl.tuning import intent

    active = intent.choose(ctx, args.profile, "doctor")
    for note in active.notes:
        out.warn(f"tunectl: note: {note}")
    rules = active.intent.rules if active.intent is not None else None
    report = diagnose(ctx, active.profile, args.devices, scoped=active.from_record and not args.all,
                      rules_path=rules.path if rules is not None else None)
    return out.show(report)
