"""`tunectl udev render|install|remove|check`: the rules file on disk, around the pure `tunectl.udev.render`.

Each operation returns a report (`to_json()`, `exit_code`); printing is the
CLI's. Files are read and replaced through `tunectl.system.trust`; udevadm runs
through `tunectl.system.udevadm` with the Context's runner. Exit codes: 0 done /
in sync, 1 `check` found a difference, 2 usage or profile error, 3 installed but
udev could not be reloaded or triggered, 4 not permitted.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from tunectl.attributes import SCHEDULER_MODULE_NAMES, modular_schedulers
from tunectl.errors import ExitCode, NotPermitted, UsageError
from tunectl.profile.library import find_profile
from tunectl.profile.resolve import Profile
from tunectl.record import field, record, replace
from tunectl.report import Report
from tunectl.status import Status
from tunectl.system import rulesfile, trust
from tunectl.system.roots import setting
from tunectl.system.rulesfile import RulesError
from tunectl.system.runner import CommandError, which
from tunectl.system.udevadm import Udevadm
from tunectl.tuning import changes, intent
from tunectl.tuning import operations as tuning
from tunectl.udev.lint import lint
from tunectl.udev.render import RULES_FILE, Rendered, below_attributes, render_rules
from tunectl.udev.scope import orig_name

_DIGEST_RE = re.compile(r"^# digest (sha256:[0-9a-f]{64})", re.MULTILINE)
SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


DEFAULT_RULES_DIR = "/etc/udev/rules.d"


def rules_dir_of(ctx, rules_dir: str | None) -> str:
    """--rules-dir, else the directory the record of intent says the rules were installed in, else udev's /etc."""
    if rules_dir:
        return rules_dir
    record = intent.current(ctx)
    return str(Path(record.rules.path).parent) if record is not None and record.rules is not None else DEFAULT_RULES_DIR


def _euid() -> int:
    return os.geteuid()


def _require_root(action: str) -> None:
    if _euid() != 0:
        raise NotPermitted(f"udev {action} must run as root: it writes the rules directory and reloads systemd-udevd",
                           hint=f"sudo tunectl udev {action} ...; `tunectl udev render` works as any user")


def tunectl_executable(env) -> str | None:
    """The tunectl a udev RUN should start: $TUNECTL_EXECUTABLE, else `tunectl` on PATH or in the sbin/bin dirs."""
    explicit = setting(env, "TUNECTL_EXECUTABLE")
    if explicit:
        return explicit
    path = ":".join([p for p in env.get("PATH", "").split(":") if p] + list(SEARCH_DIRS))
    found = which("tunectl", path)
    return os.path.abspath(found) if found else None


def load_for_rules(ctx, ref: str | None) -> tuple[Profile, intent.Choice]:
    """The profile (-p, else the record of intent's), loaded from an absolute path (a udev RUN has no working
    directory)."""
    active = intent.choose(ctx, ref, "udev install")
    path = find_profile(active.ref, ctx.search_path)
    # through the validation cache, as `choose` read it: checked again, it cost jsonschema's import every time
    return intent.load_profile_for(ctx, os.path.abspath(path) if path is not None else active.ref), active


@record
class RenderReport(Report):
    profile: Profile
    rendered: Rendered
    active: intent.Choice
    scope: list[str] | None = None  # the identities the rules match; None: every device

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def to_json(self) -> dict:
        return {"profile": self.profile.name, "file": RULES_FILE, "digest": self.rendered.digest,
                "runs_tunectl": self.rendered.runs_tunectl, "scope": self.scope, "notes": self.rendered.notes,
                "rules": self.rendered.text}

    def print_text(self, out) -> None:
        """The rules file itself."""
        out.stdout.write(self.rendered.text)  # the requested data: printed even with -q


def render(ctx, ref: str | None, everything: bool = False, pure: bool = False) -> RenderReport:
    """The rules `udev install` writes: limited to the record of intent's scope (unless `everything`), and keeping
    each original in udev's database for the journal. `pure` (`udev render -p P`): the profile's rules alone."""
    profile, active = load_for_rules(ctx, ref)
    # The running kernel's modular schedulers are an input of the rules, read here at the edge.
    modules = modular_schedulers(ctx.modules.loadable(SCHEDULER_MODULE_NAMES))
    scope = None if everything or pure or active.intent is None or active.intent.scope is None \
        else list(active.intent.scope)
    return RenderReport(profile, render_rules(profile, tunectl_executable(ctx.env), modules=modules,
                                              identities=scope, capture=not pure), active, scope)


@record
class InstallReport(Report):
    render: RenderReport
    path: Path
    changed: bool
    reloaded: bool = False
    triggered: bool = False
    problems: list[str] = field(default_factory=list)
    incomplete: bool = False  # udev was not reloaded, or the change events asked for were not sent
    journalled: int = 0  # settings the rules will change whose originals were journalled first
    triggered_devices: list[str] | None = None  # the devices change events went to; None: every block disk
    # The plan the originals were journalled from, limited to the devices the rules match (not in the document):
    # the warnings about other writers read it too (`doctor.diagnose(plan=)`), not a plan of their own
    plan: tuning.PlanReport | None = None

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PARTIAL if self.incomplete else ExitCode.OK

    def to_json(self) -> dict:
        rendered = self.render.rendered
        return {"ok": self.exit_code == ExitCode.OK, "path": str(self.path), "profile": self.render.profile.name,
                "digest": rendered.digest, "scope": self.render.scope, "journalled": self.journalled,
                "changed": self.changed, "reloaded": self.reloaded,
                "triggered": self.triggered, "notes": rendered.notes, "problems": self.problems}

    def print_text(self, out) -> None:
        """The problems, then what was installed where, what was journalled first, reloaded and triggered."""
        for p in self.problems:
            out.warn(f"tunectl: warning: {p}")
        verb = "installed" if self.changed else "unchanged"
        scope = self.render.scope
        where = "every device" if scope is None else f"{len(scope)} device(s) of the last apply's scope"
        out.say(f"{verb}: {self.path} (profile {self.render.profile.name}, {where}, {self.render.rendered.digest})")
        if self.journalled:
            out.say(f"originals journalled first: {self.journalled} setting(s) the rules will change")
        if self.reloaded:
            out.print("udev rules reloaded")
        if self.triggered:
            sent = self.triggered_devices
            out.say("change events sent to every block disk; udev settled" if sent is None else
                    f"change events sent to the devices in scope ({', '.join(sent) or 'none present'}); udev settled")


@record
class RemoveReport(Report):
    path: Path
    removed: bool
    reloaded: bool = False
    problems: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)  # devices whose originals the rules kept were journalled

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PARTIAL if self.problems else ExitCode.OK

    def to_json(self) -> dict:
        return {"ok": self.exit_code == ExitCode.OK, "path": str(self.path), "removed": self.removed,
                "reloaded": self.reloaded, "problems": self.problems}

    def print_text(self, out) -> None:
        """The problems, then whether the file was removed and what stays until a rollback."""
        for p in self.problems:
            out.warn(f"tunectl: warning: {p}")
        out.say(f"removed: {self.path}" if self.removed else f"not installed: {self.path}")
        if self.removed:
            out.say("values the rules wrote stay until a rollback: `tunectl rollback` restores what was journalled "
                    "(before `udev install`, and the originals the rules kept in udev's database, journalled by this "
                    "removal at the latest); a value whose original neither kept, such as one written by rules "
                    "installed before they kept originals, keeps the rules' value (see tunectl(8), ROLLBACK)")


@record
class RulesCheckReport(Report):
    render: RenderReport
    path: Path
    installed: str | None
    diff: list[str]

    @property
    def in_sync(self) -> bool:
        return self.installed == self.render.rendered.text

    @property
    def installed_digest(self) -> str | None:
        m = _DIGEST_RE.search(self.installed or "")
        return m.group(1) if m else None

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.in_sync else ExitCode.DRIFT

    def to_json(self) -> dict:
        return {"in_sync": self.in_sync, "installed": self.installed is not None, "path": str(self.path),
                "profile": self.render.profile.name, "digest": self.render.rendered.digest,
                "installed_digest": self.installed_digest, "diff": self.diff}

    def print_text(self, out) -> None:
        """In sync, not installed, or differs (with the diff: 60 lines, all with -v)."""
        name, digest = self.render.profile.name, self.render.rendered.digest
        if self.in_sync:
            out.say(f"in sync: {self.path} is what profile {name} renders ({digest})")
        elif self.installed is None:
            out.say(f"not installed: {self.path}; `tunectl udev install -p {name}` writes it")
        else:
            out.say(f"differs: {self.path} ({self.installed_digest or 'no tunectl digest'}) is not what profile "
                      f"{name} renders ({digest})")
            limit = None if out.verbose else 60
            for line in self.diff[:limit]:
                out.print(line)
            if limit is not None and len(self.diff) > limit:
                out.print(f"... {len(self.diff) - limit} more diff lines (-v shows all)")


def _run_reaches(path: str) -> str:
    """Where a RUN naming `path` leads, judged on the way as udev's exec would go: every directory passed (those
    of a link's target too) root's alone, and only root's links followed (trust.walk). The RUN names `path`, not
    its target: a root link in a directory another user can change is that user's to replace. Raises Untrusted
    (naming the directory or link) or OSError."""
    return trust.walk(os.path.abspath(path), judge=lambda st: trust.problem(st, final=False)).path


def _untrusted(path: str) -> str | None:
    """What makes `path`, as a RUN names it, not root's alone, or None."""
    try:
        fd, _ = trust.open_regular(_run_reaches(path), trusted=True, resolved=True)
        os.close(fd)
    except trust.Untrusted as e:
        return e.message
    except OSError as e:
        return f"{path}: {e.strerror}"
    return None


def _interpreter(path: str) -> str | None:
    """The interpreter a script's #! line names (a console script's python), or None."""
    try:
        head = trust.read_regular(_run_reaches(path), 256, resolved=True)
    except (OSError, trust.Untrusted):
        return None
    words = head.split(b"\n", 1)[0][2:].split() if head.startswith(b"#!") else []
    return os.fsdecode(words[0]) if words and words[0].startswith(b"/") else None


def _untrusted_files(profile: Profile, executable: str | None) -> list[str]:
    """What udev would run as root on every hot-plug and anyone but root can change: the profile's files and,
    when the rules RUN tunectl, the executable and its #! interpreter (each with what was found)."""
    found = [f"profile file {why}" for why in map(_untrusted, profile.files) if why]
    if executable and os.path.lexists(executable):
        for path in filter(None, (executable, _interpreter(executable))):
            why = _untrusted(path)
            if why:
                found.append(f"tunectl executable {why}")
    return found


def install(ctx, ref: str | None, rules_dir: str | None, trigger: bool, warn=None, everything: bool = False,
            allow_untrusted_profile: bool = False) -> InstallReport:
    """Journal the originals the rules will change, write the rules (when they differ) and record them in the record
    of intent, reload udevd, and with `trigger` send change events.

    `warn(report)`: called with the render before anything is written (profile warnings come first).
    A profile file (or, when the rules RUN tunectl, the executable or its interpreter) anyone but root
    can write is refused unless `allow_untrusted_profile`.
    """
    _require_root("install")
    rules_dir = rules_dir_of(ctx, rules_dir)
    rendered = render(ctx, ref, everything)
    if warn is not None:
        warn(rendered)
    executable = tunectl_executable(ctx.env) if rendered.rendered.runs_tunectl else None
    if executable and not os.path.lexists(executable):
        raise UsageError(f"tunectl executable {executable}: does not exist; udev would run as root whatever is "
                         "created there later", hint="install tunectl first (TUNECTL_EXECUTABLE must name an "
                         "existing file root owns)", code="untrusted-executable", where="TUNECTL_EXECUTABLE")
    untrusted = _untrusted_files(rendered.profile, executable)
    if untrusted and not allow_untrusted_profile:
        raise UsageError(f"{untrusted[0]}: udev would run it as root on every hot-plug",
                         hint="use a copy root owns (a profile in /etc/tunectl/profiles; tunectl in /usr/sbin, "
                              "or TUNECTL_EXECUTABLE naming one), or pass --allow-untrusted-profile")
    problems = lint(rendered.rendered.text)
    if problems:
        raise RulesError("the rendered rules fail tunectl's lint, so they were not installed (a bug in tunectl): "
                         + "; ".join(str(p) for p in problems))
    udevadm = Udevadm(ctx.run)
    failure = udevadm.verify(rendered.rendered.text, RULES_FILE)
    if failure:
        raise RulesError(f"udevadm verify rejects the rendered rules, so they were not installed: {failure}")
    if not os.path.lexists(rules_dir):
        raise UsageError(f"rules directory {rules_dir} does not exist",
                         hint="udev reads /etc/udev/rules.d and /run/udev/rules.d; create the directory first")
    target = (Path(rules_dir) / RULES_FILE).absolute()
    data = rendered.rendered.text.encode()
    with ctx.state.locked():
        # Originals first: once the rules are live, any event may write the devices they match.
        journalled, in_scope, kept, plan = journal_for_rules(ctx, rendered.profile, rendered.active.ref,
                                                             rendered.scope)
        # Then the record, before the file: a run killed between the two must leave rules the record names, or
        # `rollback --remove-rules` restores the values and leaves rules that write them again at the next event
        # (a record naming a file not there is harmless: rollback and status look for the file itself).
        unrecorded = _record_rules(ctx, rendered, target, kept)
        try:
            changed = rulesfile.write(target, data)
        except BaseException:
            if unrecorded is not None and not _holds(target, rendered.rendered.text):
                # the rules were not written: the record as it was (nothing else changed it: the lock is held)
                # says again what is installed. A failure of that too leaves a record naming rules not there:
                # harmless, as above; the first error is the one to report.
                with contextlib.suppress(Exception):
                    intent.save(ctx.state, unrecorded)
            raise
    report = InstallReport(rendered, target, changed, journalled=journalled, plan=plan)
    report.problems.extend(f"{u}; installed anyway (--allow-untrusted-profile)" for u in untrusted)
    if udevadm.running():
        try:
            udevadm.reload()
            report.reloaded = True
            if trigger:
                # Scoped rules: change events to the devices in scope alone; nobody else's disk is touched.
                udevadm.trigger(stacked_again=rendered.rendered.runs_tunectl, names=in_scope)
                report.triggered = True
                report.triggered_devices = in_scope
        except CommandError as e:
            report.problems.append(e.message)
            report.incomplete = True
    else:
        report.problems.append("systemd-udevd is not running: the rules take effect when it starts"
                               + ("; no change events were sent" if trigger else ""))
        report.incomplete = trigger
    return report


def _holds(target: Path, text: str) -> bool:
    """Whether the rules file at `target` holds `text` now (a write that failed after its rename did write it)."""
    try:
        return rulesfile.read(target) == text
    except Exception:  # unreadable, refused, not text: not the rules this run wrote
        return False


def _record_rules(ctx, rendered: RenderReport, target: Path,
                  kept: dict[str, dict[str, str]]) -> intent.Intent | None:
    """The record of intent says which rules are installed: file, profile (and its hash), scope, and the originals
    kept for below: (`kept`; those a re-install finds kept already stay as they were). Under the lock. The record
    as it was when this changed it (its rules to put back should the file not be written), else None."""
    profile = rendered.profile
    record = intent.load(ctx.state) or intent.of(profile, rendered.active.ref)
    before = record.rules.kept if record.rules is not None else {}
    rules = intent.Rules(str(target), rendered.active.ref, profile.name,
                         intent.of(profile, profile.name).profile_sha256, rendered.rendered.digest,
                         tuple(rendered.scope) if rendered.scope is not None else None,
                         # a device absent at this re-install (unplugged just now) keeps what the first install kept
                         {**before, **{identity: {**values, **before.get(identity, {})}
                                       for identity, values in kept.items()}},
                         tuple(orig_name(attr) for attr in rendered.rendered.below_only))
    if record.rules == rules:
        return None
    intent.save(ctx.state, replace(record, rules=rules))
    return record


def journal_for_rules(ctx, profile: Profile, ref: str, scope: list[str] | None
                      ) -> tuple[int, list[str] | None, dict[str, dict[str, str]], tuning.PlanReport]:
    """Journal the originals of every setting the rules will change (on the devices of `scope`); how many, the
    kernel names of the devices in `scope` (None: every device), what `_kept_for_below` keeps, and the plan with
    the settings of `scope`'s devices alone.

    Called under the state lock, before the rules file exists.
    """
    report = tuning.plan(ctx, None, None, profile)
    settings = [s for s in report.settings if scope is None or s.identity in scope]
    changes.journal_originals(ctx, intent.load(ctx.state), report.devices, settings,
                              replace(changes.changed_by(ref), via="udev rules"))
    names = None if scope is None else sorted(d.name for d in report.devices if d.identity in scope)
    kept = _kept_for_below(ctx, profile, [d for d in report.devices if scope is None or d.identity in scope])
    return sum(s.status == Status.CHANGE for s in settings), names, kept, replace(report, settings=settings)


def _kept_for_below(ctx, profile: Profile, devices: list) -> dict[str, dict[str, str]]:
    """Identity -> the udev property names and values now of what the profile's below: blocks set, per device.

    The RUN of a stack made after install writes them on the disk below, which the rules keep originals of only on
    that disk's first event after install (none without --trigger or a hot-plug). The record of intent keeps them
    instead; they are adopted like udev's database (`tunectl.tuning.adopt`: only a value the device no longer shows).
    """
    attrs = below_attributes(profile)
    kept = {}
    for dev in devices:
        values = {orig_name(attr): text.strip() for attr in attrs
                  if (text := ctx.sysfs.read_or(f"block/{dev.name}/queue/{attr}")) and text.strip()}
        if values:
            kept[dev.identity] = values
    return kept


def remove(ctx, rules_dir: str | None) -> RemoveReport:
    """Delete the rules file (where the record says it was installed, unless `rules_dir`), reload udev, and take
    the rules out of the record of intent."""
    _require_root("remove")
    rules_dir = rules_dir_of(ctx, rules_dir)
    target = (Path(rules_dir) / RULES_FILE).absolute()
    record = intent.current(ctx)
    rules = record.rules if record is not None else None
    # What the rules kept in udev's database is adopted only while the record says they are installed: journal it
    # now, or the rollback after this removal would leave every value the rules (or their RUN) wrote unrestored.
    adopted = changes.adopt_seen(ctx, tuning.discover_devices(ctx)) if rules is not None else []
    present = target.exists()
    problems = rulesfile.remove(target, ctx.run)
    removed = present and not target.exists()
    if record is not None and rules is not None and Path(rules.path) == target:
        with ctx.state.locked():
            intent.save(ctx.state, replace(record, rules=None))
    return RemoveReport(target, removed, reloaded=removed and not problems, problems=problems, adopted=adopted)


def check(ctx, ref: str | None, rules_dir: str | None, warn=None, everything: bool = False) -> RulesCheckReport:
    """The installed rules against what `udev install` would write; `warn` as for install."""
    rendered = render(ctx, ref, everything)
    if warn is not None:
        warn(rendered)
    target = Path(rules_dir_of(ctx, rules_dir)) / RULES_FILE
    try:
        installed = rulesfile.read(target)
    except OSError as e:
        raise rulesfile.denied(e, f"read {target}") from None
    text = rendered.rendered.text
    import difflib  # only for `udev check`'s diff: loading it costs every udev command

    diff = [] if installed == text or installed is None else list(difflib.unified_diff(
        installed.splitlines(), text.splitlines(), str(target), f"tunectl udev render -p {rendered.profile.name}",
        lineterm="", n=1))
    return RulesCheckReport(rendered, target, installed, diff)
