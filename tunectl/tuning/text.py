"""The text of tuning's tables for people: the column tables of status, plan, verify and apply, their rows, and
apply's --diff patch. (The JSON is each report's `to_json`.)"""

from __future__ import annotations

from tunectl.attributes import range_text
from tunectl.errors import ExitCode
from tunectl.report import Column, error_lines, show, shown, table, unified_diff
from tunectl.status import Marked, Status

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


def settings_rows(settings, verbose: int, with_status: bool = False, owner=None):

    rows = []
    for s in settings:
        status = getattr(s, "status", None)
        setting = getattr(s, "setting", s)
        if not verbose and status in (Status.IN_SYNC, Status.SKIP):
            continue
        note = getattr(s, "error", "") or setting.reason
        row = [setting.device, setting.attribute, before_after(setting), setting.source]
        if with_status:
            row.append(status)
        rows.append(row + [note] + ([owner_cell(owner(setting.device, setting.attribute))] if owner else []))
    return rows


def owner_cell(owner) -> str:
    return "-" if owner is None else owner.detail


def before_after(setting) -> str:
    """``8192 -> 8192 (in 128..)`` for a range; ``- -> 128.. (decided after the switch)`` when not yet known."""
    if setting.bounds is None:
        return f"{show(setting.before)} -> {show(setting.after)}"
    if setting.after is None:
        return f"{show(setting.before)} -> {range_text(setting.bounds)}"
    return f"{show(setting.before)} -> {show(setting.after)} (in {range_text(setting.bounds)})"


def print_skipped(skipped: list[tuple[str, str]], out) -> None:
    for device, reason in skipped:
        out.heading(f"skipped {device}: {reason}")  # on stderr when -o/-r/-P make stdout the table alone


HELD = "held by a running bench"


def summary(statuses: list[str]) -> str:
    counts: dict[str, int] = {}
    for st in statuses:
        counts[st] = counts.get(st, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "nothing to do"


def apply_diff(outcomes) -> str:
    """One pseudo-file per device, ``DEV/queue``: a line ``attribute: value`` per planned setting, before and
    after, as a unified diff (`patch -p1` applies it to such a dump)."""
    devices: dict[str, tuple[list[str], list[str]]] = {}
    for o in sorted(outcomes, key=lambda o: (o.setting.device, o.setting.attribute)):
        s = o.setting
        before = shown(show(s.before))
        after = before
        if o.status in (Status.CHANGED, Status.CHANGE):
            after = show(s.after) if s.bounds is None or s.after is not None else before_after(s).split(" -> ")[1]
        old, new = devices.setdefault(s.device, ([], []))
        old.append(f"{s.attribute}: {before}\n")
        new.append(f"{s.attribute}: {shown(after)}\n")
    return "".join(unified_diff("".join(old), "".join(new), f"a/{dev}/queue", f"b/{dev}/queue")
                   for dev, (old, new) in devices.items())


def print_apply(report, out) -> None:
    """apply's (and rollback's) text: notes, the settings table or the --diff patch, skips, the summary, what failed."""
    for note in report.notes:
        out.warn(f"tunectl: note: {note}")
    rows = settings_rows(report.outcomes, out.verbose, with_status=True)
    if report.show_diff:
        diff = apply_diff(report.outcomes)
        if diff:
            out.stdout.write(diff)  # the requested data: printed even with -q
        for device, reason in report.skipped:  # stdout stays a patch
            out.warn(f"tunectl: note: skipped {device}: {reason}")
    else:
        if rows:
            out.print(out.table(SETTING_COLUMNS, rows))
        print_skipped(report.skipped, out)
    verb = "would change" if report.check else "changed"
    n = sum(o.status in (Status.CHANGED, Status.CHANGE) for o in report.outcomes)
    out.say(f"{report.profile}: {verb} {n} setting(s); {summary([o.status for o in report.outcomes])}")
    if report.record_error:
        for line in error_lines(report.record_error, "free space or fix the state directory, then run the same "
                                "apply again: it changes nothing and saves the record"):
            out.warn(line)
    elif report.exit_code == ExitCode.NOT_PERMITTED:
        out.warn("tunectl: error: the kernel refused the writes (not permitted): nothing was changed or recorded")
        out.warn("hint: run as root")


def print_status(report, out) -> None:
    """status: the profile (and installed rules) line, a row per device with its drift; -v: who set each value."""
    drift_by_dev: dict[str, int] = {}
    for s in report.drift:
        drift_by_dev[s.device] = drift_by_dev.get(s.device, 0) + 1
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
    rules = report.rules
    if rules is not None:
        from tunectl.system.rulesfile import unread_by_udev

        unread = unread_by_udev(rules.path)
        out.heading(f"udev rules: {rules.path} (profile {rules.ref}"
                    + (", every device)" if rules.scope is None else f", {len(rules.scope)} device(s))")
                    + (f"; not read: {unread}" if unread else ""))
    print_scope(report, out)
    out.print(out.table(STATUS_COLUMNS, rows))
    if out.verbose:
        print_owners(report, out)


def shows_owners(out) -> bool:
    """Whether status's or verify's output shows who set a value: --json, -v (status's owner lines, verify's OWNER
    column), or -o (which may name OWNER). Their plain text shows none, so it need not find any."""
    return bool(out.json or out.verbose or out.columns is not None)


def print_owners(report, out) -> None:
    """Who set each value shown (-v): one line per device and attribute."""
    from tunectl.owners import current_value

    rows = []
    for d in report.devices:
        found = report.owners.get(d.name)
        for attr, owner in sorted(found.owners.items()) if found is not None else ():
            rows.append([d.name, attr, show(current_value(d, attr)), owner.kind, owner.detail])
    if rows:
        out.print("")
        # not out.table: -o names the status table's columns
        out.print(table(["DEVICE", "ATTRIBUTE", "VALUE", "OWNER", "WHY"], rows, width=out.width, keep=("DEVICE", "OWNER")))


def print_scope(report, out) -> None:
    """Say so when the last apply's scope narrows the devices looked at (DEV arguments say it themselves)."""
    if report.scope is not None and report.scope.origin == "last-apply":
        out.heading(report.scope.describe(report.profile))


def print_plan(report, out) -> None:
    """plan and verify: a row per setting (-v: in-sync and skipped ones too), skips, the summary; verify: the verdict."""
    verify = report.kind == "verify"
    drift = report.counted_drift
    rows = settings_rows(report.settings, out.verbose, with_status=True, owner=report.owner if verify else None)
    out.heading(f"profile: {report.profile}")
    print_scope(report, out)
    if rows:
        out.print(out.table(VERIFY_COLUMNS if verify else SETTING_COLUMNS, rows))
    print_skipped(report.skipped, out)
    # verify: a running bench's temporary values are counted as held, not as changes, as the verdict says
    held = set(report.held) if verify else set()
    out.heading(summary([HELD if s.device in held and s.is_drift else s.status for s in report.settings]))
    if verify:
        out.heading("in sync" if not drift and not report.relinked else
                    f"drift: {len(drift)} setting(s) differ, {len(report.relinked)} tuned loop device(s) changed identity")
