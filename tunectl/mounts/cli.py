"""`tunectl mounts check|fix`: arguments, the call into `operations`, and the rendering."""

from __future__ import annotations

import argparse

from tunectl.system.roots import FSTAB, PROC

_KEPT = ("fstab: only the options field of a changed entry is rewritten. Beside it, FSTAB.tunectl.orig keeps the\n"
         "file as it was before tunectl first changed it (never overwritten) and FSTAB.tunectl.bak.N the file\n"
         "before each change. A fix stops, replacing nothing, when another writer changed the file meanwhile.\n"
         "fix and rollback write only in a directory root (or you) alone may write; one of another user's, or that\n"
         "others may write, is refused (exit 2).\n")
_LIVE = f"Live mounts are read from $TUNECTL_PROC_ROOT/self/mountinfo (default {PROC}).\n"
EXAMPLES = (
    "examples:\n"
    "  tunectl mounts check -p database                 # exit 1 if a live mount or fstab entry differs\n"
    f"  tunectl mounts check --fstab /mnt/newroot{FSTAB} --json\n"
    "  tunectl mounts fix -p database --check --diff    # show the fstab change, write nothing\n"
    "  tunectl mounts fix -p database --remount         # edit fstab, remount, confirm in mountinfo\n"
    "\n"
    "  tunectl mounts rollback                          # put back the fstab tunectl first changed\n"
    "\n" + _KEPT + _LIVE +
    "exit codes: check 0 in sync, 1 drift; fix 0 done, 3 a remount option did not take effect or the\n"
    "fstab could not be replaced; rollback 0 restored, 2 no original kept; 2 usage or profile error; 4 not permitted.")
# What an action's --help says after its own examples (the lines of EXAMPLES that run it, `add_action` picks them)
NOTES = {
    "check": _LIVE + "exit codes: 0 in sync, 1 drift or an error in the fstab; 2 usage or profile error; 4 not permitted.",
    "fix": _KEPT + _LIVE + "exit codes: 0 done, 1 an error in the fstab fix does not mend; 3 a remount option did not "
                           "take effect or the fstab could not be replaced; 2 usage or profile error; 4 not permitted.",
    "rollback": _KEPT + "exit codes: 0 restored (or already the original); 2 no original kept, or a usage error; 3 "
                        "the fstab could not be replaced; 4 not permitted.",
}


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EXAMPLES
    sub = p.add_subparsers(dest="mounts_command", metavar="ACTION")
    sub.required = True
    for verb, help_ in (("check", "compare live mounts and fstab entries with the profile's mounts: rules"),
                        ("fix", "rewrite the options of drifting fstab entries (losslessly); --remount applies them live"),
                        ("rollback", "restore the fstab from FSTAB.tunectl.orig (the file before tunectl first "
                                     "changed it); remounts nothing")):
        ap = add_action(sub, verb, help_)
        ap.epilog = f"{ap.epilog}\n\n{NOTES[verb]}"  # its own examples, then what holds for it
        if verb != "rollback":
            ap.add_argument("-p", "--profile", help="profile name or file (default: last applied, else 'default')")
        else:
            ap.add_argument("--check", action="store_true", help="say what would be restored, write nothing")
        ap.add_argument("--fstab", metavar="PATH", help=f"the fstab to read (default {FSTAB}, env TUNECTL_FSTAB)")
        if verb == "check":
            from tunectl.mounts.operations import CHECK_COLUMNS
            from tunectl.report import add_table_options

            add_table_options(ap, CHECK_COLUMNS)
        if verb == "fix":
            ap.add_argument("--remount", action="store_true",
                            help="also remount each drifting live mount and confirm the options in mountinfo; "
                                 "with --fstab FILE only the mounts FILE lists")
            ap.add_argument("--all-mounts", action="store_true",
                            help="with --fstab FILE --remount: also remount drifting live mounts FILE does not list")
            ap.add_argument("--check", action="store_true", help="write nothing, remount nothing; report what would change")
            ap.add_argument("--diff", action="store_true", help="print the fstab change as a unified diff")


def run(ctx, args, out) -> int:
    from tunectl.mounts import operations

    if args.mounts_command == "check":
        report = operations.check(ctx, args.profile, args.fstab)
        _notes_first(report, out)
        return out.show(report)
    if args.mounts_command == "rollback":
        return out.show(operations.rollback(ctx, args.fstab, args.check))
    result = operations.fix(ctx, args.profile, args.fstab, args.remount, args.check,
                            only_listed=bool(args.fstab) and not args.all_mounts)
    _notes_first(result.check_report, out)
    result.show_diff = args.diff  # how it is shown: the diff is printed with --diff (and with --check)
    return out.show(result)


def _notes_first(report, out) -> None:
    """What chose the profile, on stderr before anything else, as every command says it."""
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
