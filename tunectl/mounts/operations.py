"""The mount operations behind `mounts check` and `mounts fix`: gather facts through the edges,
judge them with the pure core, write fstab safely and remount.

Each returns a report (tunectl.report.Report): its JSON, its exit code and its text.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from tunectl.devices.resolve import Resolver, names_a_device
from tunectl.errors import ExitCode, NotPermitted, StateError, TunectlError, UsageError
from tunectl.mounts import fstab as fstab_model
from tunectl.mounts import options as opts
from tunectl.mounts.check import FsCheck, evaluate
from tunectl.mounts.fstab_file import MAX_FSTAB_BYTES
from tunectl.mounts.rules import Facts
from tunectl.record import field, record
from tunectl.report import Column, Report
from tunectl.status import Marked, Verdict
from tunectl.system import mountinfo
from tunectl.system.roots import FSTAB, under_dev
from tunectl.system.runner import CommandError, Completed

CHECK_COLUMNS = [  # mounts check's column table: -o, --columns and the cuts
    Column("TARGET", "the mountpoint", cut="middle"),
    Column("SOURCE", "what is mounted there (device, UUID=, LABEL=)", cut="middle"),
    Column("FSTYPE", "the filesystem type"),
    Column("DISKS", "the disks under the filesystem"),
    Column("WANTED", "the options the profile's mounts: rules want (-name: must be absent)"),
    Column("LIVE", "the options in effect now (mountinfo), or (not mounted)"),
    Column("FSTAB", "the fstab entry's options and its line, or (not in fstab)"),
    Column("DRIFT", "where each wanted option is missing or extra (live:, fstab:), or 'in sync'"),
]


def fstab_path(ctx, given: str | None) -> Path:
    return Path(given or ctx.roots.fstab)


@record
class CheckReport(Report):
    profile: str
    fstab_path: Path
    table: fstab_model.Fstab
    data: bytes
    filesystems: list[FsCheck]
    warnings: list[str] = field(default_factory=list)
    timer: dict | None = None
    notes: list[str] = field(default_factory=list)  # what chose the profile, said first (as every command says it)
    errors: list[str] = field(default_factory=list)  # fstab lines to mend (their file:line said); exit 1

    @property
    def in_sync(self) -> bool:
        return not self.errors and not any(fs.drift or fs.unresolved for fs in self.filesystems) and \
            (self.timer is None or self.timer["ok"])

    def to_json(self) -> dict:
        doc = {"in_sync": self.in_sync, "profile": self.profile, "fstab_path": str(self.fstab_path),
               "filesystems": [fs.to_json() for fs in self.filesystems], "errors": self.errors,
               "warnings": self.warnings}
        if self.timer is not None:
            doc["fstrim_timer"] = self.timer
        return doc

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.in_sync else ExitCode.DRIFT

    def print_text(self, out) -> None:
        """The profile's warnings, a row per filesystem (wanted, live, fstab, drift), the options skipped, the timer."""
        from tunectl.report import show, shown

        for e in self.errors:
            out.warn(f"tunectl: error: {e}")
        for w in self.warnings:
            out.warn(f"tunectl: warning: {w}")
        rows = []
        for fs in self.filesystems:
            drift = " ".join(f"{d['where']}:{'+' if d['change'] == 'add' else '-'}{d['option']}" for d in fs.drift)
            rows.append([fs.target, fs.source, fs.fstype, show(fs.disks) if fs.disks else "-",
                         show(fs.want.present + [f"-{n}" for n in fs.want.absent]) if fs.want.present or fs.want.absent else "-",
                         show(fs.live.options) if fs.live is not None else "(not mounted)",
                         show(fs.entry.options) + f" (line {fs.entry.lineno})" if fs.entry is not None else "(not in fstab)",
                         Marked(drift, Verdict.DRIFT) if drift else Marked("source not found", Verdict.UNAVAILABLE)
                         if fs.unresolved else Marked("in sync", Verdict.IN_SYNC)])
        out.heading(f"profile: {shown(self.profile)}   fstab: {shown(str(self.fstab_path))}")
        out.print(out.table(CHECK_COLUMNS, rows))
        skips = [(fs.target, s) for fs in self.filesystems for s in fs.want.skipped]
        for target, s in skips:
            out.say(f"skipped on {target}: {s.option}: {s.reason}")
        if self.timer is not None:
            out.print(f"fstrim.timer: {self.timer['state']}")


@record
class Remount:
    target: str
    options: str
    ok: bool | None  # None under --check: not run
    not_applied: list[str] = field(default_factory=list)
    error: str = ""

    def to_json(self) -> dict:
        return {"target": self.target, "options": self.options, "ok": self.ok, "not_applied": self.not_applied,
                "error": self.error}


@record
class FixReport(Report):
    check_report: CheckReport
    check: bool
    diff: str
    written: bool = False
    backup: str | None = None
    remounts: list[Remount] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    show_diff: bool = False  # the text prints the fstab diff (--diff; --check prints it too)

    @property
    def changed(self) -> bool:
        # A remount whose mount(8) succeeded changed something, even if one option did not take.
        return bool(self.diff) and (self.written or self.check) or any(r.ok is None or not r.error for r in self.remounts)

    @property
    def exit_code(self) -> ExitCode:
        # an error in the fstab (an entry with more than 6 fields) is one fix does not mend: exit 1, as check says,
        # whether or not the options were rewritten; a remount that did not take (3) says more
        if self.problems:
            return ExitCode.PARTIAL
        return ExitCode.DRIFT if self.check_report.errors else ExitCode.OK

    def to_json(self) -> dict:
        return {"changed": self.changed, "check": self.check, "fstab": str(self.check_report.fstab_path),
                "diff": self.diff, "backup": self.backup, "remounts": [r.to_json() for r in self.remounts],
                "problems": self.problems, "errors": self.check_report.errors, "warnings": self.check_report.warnings}

    def print_text(self, out) -> None:
        """The fstab's errors and the profile's warnings, the fstab diff (--diff, --check), what became of the fstab,
        each remount's result."""
        from tunectl.report import shown

        for e in self.check_report.errors:  # fix mends options, not extra fields: check's error, said as check does
            out.warn(f"tunectl: error: {e}")
        for w in self.check_report.warnings:
            out.warn(f"tunectl: warning: {w}")
        if self.diff and (self.show_diff or self.check):
            out.print(self.diff.rstrip("\n"))
        path = self.check_report.fstab_path
        if not self.diff:
            out.print(f"{shown(str(path))}: nothing to change")
        elif self.written:
            out.print(f"{shown(str(path))}: rewritten (backup {shown(str(self.backup))})")
        elif self.check:
            out.print(f"{shown(str(path))}: would be rewritten (--check: nothing written)")
        if self.remounts:
            out.print(out.table(["TARGET", "REMOUNT OPTIONS", "RESULT"],
                                [[r.target, r.options, _remount_result(r)] for r in self.remounts]))
        for p in self.problems:
            out.warn(f"tunectl: {p}")


def _remount_result(r) -> str:
    """A remount's RESULT cell, coloured by its verdict: not run under --check, ok, or the options that did not take."""
    if r.ok is None:
        return "not run (--check)"
    if r.ok:
        return Marked("ok", Verdict.IN_SYNC)
    return Marked("NOT APPLIED: " + (", ".join(r.not_applied) or r.error), Verdict.FAILED)


def _read_fstab(path: Path, named: bool) -> tuple[bytes, list[str]]:
    """The fstab's bytes and the warnings about it; `named`: the user named the file (--fstab, TUNECTL_FSTAB)."""
    from tunectl.mounts.fstab_file import resolve
    from tunectl.system import trust

    try:
        # opened through no link: a directory on the way swapped for another user's link since resolve() is refused
        data = trust.read_regular(resolve(path), MAX_FSTAB_BYTES, resolved=True, whole=True)
    except FileNotFoundError:
        if named:  # a typo'd path: a warning and exit 0 read as "in sync"
            raise UsageError(f"{path}: no such fstab file", hint=_another_fstab("an existing file", named),
                             where=str(path)) from None
        # The default /etc/fstab may be absent (a container, an initramfs, a minimal image mounting by units): the
        # live mounts are still worth checking, so its absence is said, not an error.
        return b"", [f"{path} does not exist; only live mounts are checked"]
    except trust.Untrusted as e:
        if e.found.startswith("changed while"):
            raise UsageError(f"{path}: {e.found}", hint=e.hint) from None
        raise UsageError(f"{path} is {e.found.removesuffix(trust.NOT_REGULAR)}, not an fstab file",
                         hint=_another_fstab("a regular file", named)) from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            raise NotPermitted(f"cannot read {path}: {e.strerror}", hint="run as root") from None
        raise TunectlError(f"cannot read {path}: {e.strerror}") from None
    except trust.TooLarge:
        raise UsageError(f"{path} is larger than {MAX_FSTAB_BYTES} bytes, not an fstab file",
                         hint=_another_fstab("an fstab file", named)) from None
    return data, []


def _another_fstab(what: str, named: bool) -> str:
    """The hint when the fstab cannot be read as one: name another. "give --fstab FILE" to someone who gave it (or
    TUNECTL_FSTAB) told them to do what they had done; they may also leave both out for the default."""
    if named:
        return f"name {what} with --fstab (or TUNECTL_FSTAB), or leave both out for {FSTAB}"
    return f"name {what} with --fstab FILE"


def _cannot_discard(ctx, names: list[str]) -> str | None:
    for name in names:
        text = ctx.sysfs.read_or(f"block/{name}/queue/discard_max_bytes")
        if text is None or text.strip() in ("", "0"):
            return f"{name} cannot discard (queue/discard_max_bytes is {text.strip() if text else 'missing'})"
    return None


def fstrim_timer_state(run: Callable[..., Completed]) -> str:
    """`systemctl is-enabled fstrim.timer` through `run`: enabled, disabled, ..., or 'no systemd'."""
    if not os.path.isdir("/run/systemd/system"):
        return "no systemd"
    try:
        done = run(["systemctl", "is-enabled", "fstrim.timer"], timeout=15, check=False)
    except CommandError:
        return "no systemd"
    return (done.stdout.strip() or done.stderr.strip() or "unknown").splitlines()[0]


def check(ctx, profile_ref: str | None, fstab_file: str | None = None) -> CheckReport:
    """Every fstab entry and every live mount fstab does not list, judged against the profile's mounts: rules."""
    from tunectl.tuning import intent

    active = intent.choose(ctx, profile_ref, "mounts check")
    profile = active.profile
    path = fstab_path(ctx, fstab_file)
    data, warnings = _read_fstab(path, named=fstab_file is not None or ctx.roots.fstab != FSTAB)
    table = fstab_model.parse(data)
    warnings += [f"{path}:{n}: libmount cannot parse this line ({why}); left as it is" for n, why in table.problems]
    mounts, problems = mountinfo.read_mounts(ctx.roots.proc)
    warnings += problems
    resolver = Resolver(ctx)
    warnings += _stacked_targets(path, table.entries)
    results, live_used = _check_entries(ctx, resolver, profile.mounts, path, table.entries, mounts, warnings)
    results += _check_unlisted_mounts(ctx, resolver, profile.mounts, mounts, live_used)
    timer = _fstrim_timer(ctx, results, warnings)
    return CheckReport(profile.name, path, table, data, results, warnings, timer=timer, notes=active.notes,
                       errors=_extra_fields(path, table.entries))


def _extra_fields(path: Path, entries: list) -> list[str]:
    """An error per fstab line with more than fstab(5)'s 6 fields. libmount reads the first 6 and drops the rest
    without a word (findmnt --verify counts no parse error), so what was meant there (a comment after the entry,
    an option after a space) silently does nothing."""
    return [f"{path}:{e.lineno}: {6 + len(e.extra)} fields, but fstab(5) has 6 (source, mountpoint, type, options, "
            f"dump, pass); mount ignores {' '.join(e.extra)!r}: put a comment on a line of its own starting with #, "
            "write a space inside a field as \\040, or remove the extra fields" for e in entries if e.extra]


def _stacked_targets(path: Path, entries: list) -> list[str]:
    """A warning per fstab line whose mountpoint an earlier line also names (the later is mounted on top)."""
    said, seen = [], {}
    for entry in entries:
        if entry.target in seen and entry.fstype != "swap":
            said.append(f"{path}:{entry.lineno}: {entry.target} is also the mountpoint of line {seen[entry.target]}; "
                        "the later line is mounted on top")
        seen[entry.target] = entry.lineno
    return said


def _facts_for(ctx, resolver: Resolver, source: str, target: str, fstype: str, live: mountinfo.Mount | None,
               bind: bool) -> tuple[Facts, str | None]:
    """What the rules match on for one filesystem (type, target, its device and the disks below), and why a disk
    below cannot discard (None: all can)."""
    if bind or fstype in opts.NON_BLOCK_FSTYPES:
        return Facts(fstype, target, block=False), None
    found = resolver.mount(live) if live is not None else resolver.source(source)
    if found.name is None:
        block = names_a_device(source)
        return Facts(fstype, target, block=block, absent=found.problem), None
    stack = resolver.stack_of(found.name)
    if stack is None:  # its device is gone, or outside this sysfs root: no device facts to match on
        return Facts(fstype, target), _cannot_discard(ctx, [resolver.whole(found.name)])
    disks = sorted(stack.disks, key=lambda d: d.name)
    chain = [d.name for d in disks]
    chain += [stack.top.name] if stack.top.name not in chain else []
    return Facts(fstype, target, stack.top, disks), _cannot_discard(ctx, chain)


def _check_entries(ctx, resolver: Resolver, rules: list, path: Path, entries: list, mounts: list,
                   warnings: list[str]) -> tuple[list[FsCheck], set[int]]:
    """Each fstab entry beside its live mount (the last line for a mountpoint is the one mounted); and the live
    mounts so matched."""
    last_for_target = {e.target: e.lineno for e in entries}
    live_used: set[int] = set()
    results: list[FsCheck] = []
    for entry in entries:
        live = None
        if entry.fstype != "swap" and last_for_target.get(entry.target) == entry.lineno:
            live = mountinfo.find(mounts, entry.target)
            if live is not None:
                live_used.add(live.mount_id)
        facts, no_discard = _facts_for(ctx, resolver, entry.source, entry.target, entry.fstype, live, entry.is_bind)
        if not facts.block and not any(r.get("match", {}).get("fstype") for r in rules):
            continue
        fs = evaluate(rules, facts, entry.source, entry, live, no_discard)
        if facts.block and facts.device is None and live is None and facts.absent:
            fs.unresolved = facts.absent
            warnings.append(f"{path}:{entry.lineno}: {entry.source} ({entry.target}): {facts.absent}; the "
                            "mount would fail (findmnt --verify flags it too)"
                            + ("" if "nofail" in entry.options else ", and a boot waits for it: add nofail or fix "
                                                                    "the source"))
        if facts.block or fs.rules:
            results.append(fs)
    return results, live_used


def _check_unlisted_mounts(ctx, resolver: Resolver, rules: list, mounts: list, live_used: set[int]) -> list[FsCheck]:
    """The visible live mounts no fstab entry stands for: a block device's, or another kind a rule names by type."""
    results: list[FsCheck] = []
    visible = {m.target: m for m in mounts}
    for m in mounts:
        if m.mount_id in live_used or visible.get(m.target) is not m:
            continue
        if m.is_bind or m.fstype in opts.NON_BLOCK_FSTYPES or m.devnum.startswith("0:") and under_dev(m.source) is None:
            facts = Facts(m.fstype, m.target, block=False)
            if not any(r.get("match", {}).get("fstype") for r in rules):
                continue
            fs = evaluate(rules, facts, m.source, None, m, None)
            if fs.rules:
                results.append(fs)
            continue
        facts, no_discard = _facts_for(ctx, resolver, m.source, m.target, m.fstype, m, False)
        if facts.device is None:
            continue  # a mount of a device outside this sysfs root
        results.append(evaluate(rules, facts, m.source, None, m, no_discard))
    return results


def _fstrim_timer(ctx, results: list[FsCheck], warnings: list[str]) -> dict | None:
    """fstrim.timer's state when a rule wants periodic discard (None: none does), with a warning when it is off."""
    if not any(fs.want.discard == "periodic" for fs in results if fs.rules):
        return None
    state = fstrim_timer_state(ctx.run)
    ok = state in ("enabled", "static", "alias", "indirect", "enabled-runtime", "no systemd")
    if state == "no systemd":
        warnings.append("discard: periodic wants fstrim.timer, but systemd is not running here; "
                        "schedule fstrim -a another way")
    elif not ok:
        warnings.append(f"discard: periodic wants fstrim.timer enabled, it is {state}; "
                        "run: systemctl enable --now fstrim.timer")
    return {"wanted": "enabled", "state": state, "ok": ok}


def unified_diff(path: Path, old: bytes, new: bytes) -> str:
    from tunectl.report import unified_diff as text_diff

    if old == new:
        return ""
    # for display: never unprintable
    return text_diff(old.decode("utf-8", "replace"), new.decode("utf-8", "replace"), str(path), f"{path} (tunectl)")


def _findmnt(data: bytes, run: Callable[..., Completed], shown: Path | str = "") -> list[dict]:
    """How libmount reads `data` (`shown`: the file it stands for, in messages). findmnt reads tunectl's own
    copy (a memfd, through this process's descriptor), never a name: in a directory another user owns the
    temp file or the fstab could be a link to a file root alone reads by the time findmnt opens it."""
    fd = os.memfd_create("tunectl-fstab", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        done = run(["findmnt", "--tab-file", f"/proc/{os.getpid()}/fd/{fd}", "-J", "-o",
                    "SOURCE,TARGET,FSTYPE,OPTIONS,FREQ,PASSNO"], timeout=30, check=False)
    finally:
        os.close(fd)
    if done.returncode not in (0, 1) or (done.returncode == 1 and done.stdout.strip()):
        raise TunectlError(f"findmnt cannot read {shown}: {done.stderr.strip()}")
    return json.loads(done.stdout).get("filesystems", []) if done.stdout.strip() else []


def libmount_agrees(old: Path, read: bytes, new: bytes, changed: dict[int, list[str]], table: fstab_model.Fstab,
                    run: Callable[..., Completed]) -> None:
    """libmount must read every untouched entry of `new` exactly as `read` (the fstab `old` as tunectl read it),
    and the changed ones with the new options; else raise and nothing is replaced."""
    before, after = _findmnt(read, run, old), _findmnt(new, run, f"the new {old}")
    entries = table.entries
    if not (len(before) == len(after) == len(entries)):
        raise TunectlError(f"libmount reads {len(before)} entries in {old} and {len(after)} in the new file "
                           f"(tunectl: {len(entries)}); not replacing {old}")
    for entry, a, b in zip(entries, before, after):
        if entry.lineno in changed:
            want = opts.as_set(changed[entry.lineno])
            if opts.as_set(opts.split(b.get("options"))) != want or {**a, "options": None} != {**b, "options": None}:
                raise TunectlError(f"libmount reads line {entry.lineno} of the new file as {b}, not as intended; "
                                   f"not replacing {old}")
        elif a != b:
            raise TunectlError(f"libmount reads untouched line {entry.lineno} differently after the edit "
                               f"({a} -> {b}); not replacing {old}")


def _write(path: Path, old: bytes, new: bytes, changed: dict[int, list[str]], table: fstab_model.Fstab,
           run: Callable[..., Completed]) -> str:
    from tunectl.mounts import fstab_file

    real = fstab_file.resolve(path)
    # the bytes judged, not the names: fstab_file.replace checks right before and after that the file still holds `old`
    return fstab_file.replace(real, old, new, verify=lambda tmp: libmount_agrees(real, old, new, changed, table, run))


def remount(ctx, fs: FsCheck) -> Remount:
    assert fs.live is not None
    options = ",".join(opts.remount_options(fs.live.options, fs.want))
    result = Remount(fs.target, options, True)
    try:
        # Source and target both given: mount(8) then reads no fstab entry into the remount.
        ctx.run(["mount", "-o", f"remount,{options}", fs.live.source, fs.live.target], timeout=60)
    except CommandError as e:
        result.ok, result.error = False, e.message
    mounts, _ = mountinfo.read_mounts(ctx.roots.proc)
    now = mountinfo.find(mounts, fs.target)
    if now is None:
        result.ok, result.error = False, result.error or f"{fs.target} is no longer mounted"
        result.not_applied = [o for _, o in fs.live_drift]
        return result
    result.not_applied = [("" if change == "add" else "-") + o for change, o in opts.drift(now.options, fs.want, True)]
    if result.not_applied:
        result.ok = False
    return result


@contextlib.contextmanager
def _locked(ctx, notes: list[str]) -> Iterator[None]:
    """tunectl's lock, so an Ansible run and a person never edit fstab at once; a user fixing a copy
    of an fstab without a usable state directory goes on unlocked, with a warning."""
    lock = ctx.state.locked()
    try:
        lock.__enter__()
    except StateError as e:
        notes.append(f"not holding the tunectl lock: {e.message}")
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def fix(ctx, profile_ref: str | None, fstab_file: str | None = None, do_remount: bool = False,
        check_only: bool = False, only_listed: bool = False) -> FixReport:
    """`mounts fix`; `only_listed` (a given --fstab without --all-mounts): remount only the mounts the fstab lists."""
    if check_only:
        return _fix(ctx, profile_ref, fstab_file, do_remount, True, only_listed)
    from tunectl.mounts import fstab_file as edge

    notes: list[str] = []
    with _locked(ctx, notes):
        # Read under the lock: another tunectl cannot change the file between this read and the replace.
        gone = edge.ready_to_write(fstab_path(ctx, fstab_file))
        result = _fix(ctx, profile_ref, fstab_file, do_remount, False, only_listed)
    result.check_report.warnings += notes + [f"removed {name}, left by a tunectl run that was killed" for name in gone]
    return result


@record
class RollbackReport(Report):
    """`mounts rollback`: what was said about the fstab (restored, or nothing to restore) and the backup kept."""

    message: str
    backup: str | None
    check: bool  # --check: nothing was written

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK  # what cannot be restored is an error (raised), not a verdict

    def to_json(self) -> dict:
        return {"message": self.message, "backup": self.backup, "check": self.check}

    def print_text(self, out) -> None:
        out.print(self.message)


def rollback(ctx, fstab_file: str | None = None, check_only: bool = False) -> RollbackReport:
    """`mounts rollback`: the fstab as it was before tunectl first changed it (nothing is remounted)."""
    from tunectl.mounts import fstab_file as edge

    path = fstab_path(ctx, fstab_file)
    if check_only:  # reads only: no lock to take (it may make the state directory), no temp file swept
        return RollbackReport(*edge.restore_original(path, True), True)
    notes: list[str] = []
    with _locked(ctx, notes):
        edge.ready_to_write(path)
        return RollbackReport(*edge.restore_original(path, False), False)


def _fix(ctx, profile_ref: str | None, fstab_file: str | None, do_remount: bool, check_only: bool,
         only_listed: bool = False) -> FixReport:
    if do_remount and not check_only and ctx.roots.fakes():
        fakes = ", ".join(f"{label} {path}" for label, path in ctx.roots.fakes())
        raise UsageError(f"--remount on a fake tree ({fakes}): its mount table is not this machine's, so no real "
                         "filesystem is remounted from it", hint="drop --remount, or run on the real machine",
                         code="fake-root-remount", where="--remount")
    report = check(ctx, profile_ref, fstab_file)
    changed = {fs.entry.lineno: fs.fixed_fstab_options() for fs in report.filesystems
               if fs.entry is not None and fs.fstab_drift}
    new = report.table.with_options(changed).render()
    result = FixReport(report, check_only, unified_diff(report.fstab_path, report.data, new))
    if changed and not check_only:
        try:
            result.backup = _write(report.fstab_path, report.data, new, changed, report.table, ctx.run)
            result.written = True
        except NotPermitted:
            raise
        except TunectlError as e:
            result.problems.append(e.message)
    if do_remount:
        unlisted = [fs.target for fs in report.filesystems if fs.live is not None and fs.live_drift and fs.entry is None]
        if only_listed and unlisted:
            report.warnings.append(f"not remounted, as {report.fstab_path} does not list them: {', '.join(unlisted)} "
                                   "(--all-mounts remounts them too)")
        for fs in report.filesystems:
            if fs.live is None or not fs.live_drift or only_listed and fs.entry is None:
                continue
            if check_only:
                result.remounts.append(Remount(fs.target, ",".join(opts.remount_options(fs.live.options, fs.want)),
                                               None, [("" if c == "add" else "-") + o for c, o in fs.live_drift]))
                continue
            done = remount(ctx, fs)
            result.remounts.append(done)
            if not done.ok:
                result.problems.append(f"remount of {done.target} with {done.options}: "
                                       + (done.error or f"did not take effect: {', '.join(done.not_applied)}"))
    return result
