"""`tunectl udev render|install|remove|check|monitor`: arguments and dispatch."""

from __future__ import annotations

import argparse

EXAMPLES = ("examples:\n  tunectl udev render -p throughput-performance\n"
            "  tunectl udev install -p throughput-performance --trigger\n"
            "  tunectl udev check -p throughput-performance   # exit 1 if the installed rules differ\n"
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
        if verb != "render":
            up.add_argument("--rules-dir", metavar="DIR", default="/etc/udev/rules.d",
                            help="where the rules file lives (default /etc/udev/rules.d)")
        if verb == "install":
            up.add_argument("--trigger", action="store_true",
                            help="send change events to block disks and wait for udev to settle")


def run(ctx, args, out) -> int:
    from tunectl.udev import install

    actions = {"render": install.render, "install": install.install, "remove": install.remove, "check": install.check}
    return actions[args.udev_command](ctx, args, out)
