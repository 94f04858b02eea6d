"""udev rules from a profile: `render` (pure: same profile, same bytes) and the class mapping.

The rules reproduce `tunectl.tuning.plan` inside udev, in three stages per event:

1. facts: the class (in `classify()` order), dm subtype, bus, whether the
   device has an I/O scheduler at all;
2. layers: each class block and each `devices` entry that matches sets
   ``TUNECTL_*`` properties; a later layer overwrites an earlier one, exactly
   as `plan.Wanted.layer` does, and a scheduler preference list is resolved
   against what the device offers when its layer is reached;
3. writes, in `attributes.write_order` like `apply`: the scheduler (only when
   it is not already active), nr_requests, the knobs of the scheduler active
   afterwards, the other queue attributes, read_ahead_kb last
   (`tunectl.udev.writes`).

This module writes the header, the facts and the layers and puts the file
together; the match keys of a `devices` entry come from `tunectl.udev.match`.

Nothing from a profile reaches a rule unchecked, but the checks are the
profile's (`tunectl.profile.checks`, so `profile validate` reports them at
file:line:col): scheduler names, knobs and queue attributes from the allow-list
in `tunectl.attributes`, numbers in range, and match globs limited to a
grammar on which udev's fnmatch(3) and Python's `fnmatchcase` agree
(`checks.glob_problem`). This module trusts a validated Profile; `lint` checks
what it writes. The only substitution in the output is ``$kernel`` in the one
RUN a `below:` block needs.

udev 252 behaviours the rules are built around (checked on a real udevd):
a match on an ATTR that does not exist fails for ``!=`` as well as ``==``, so
absent attributes are tested with TEST first; an ENV that is unset reads as
"";  properties do not survive from one event to the next; a sysfs value read
after udev wrote it in the same event is the stale cached one; writing the
already-active scheduler still freezes the queue (~15 ms).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from tunectl.attributes import SCHEDULERS, is_range
from tunectl.devices.classes import BUS_BY_PATH, CLASS_TABLE, CLASSES, DM_TYPES, DM_UUID_PREFIXES, OPT_IN_CLASSES
from tunectl.digests import sha256
from tunectl.errors import ExitCode, UsageError
from tunectl.profile.checks import glob_problem
from tunectl.profile.resolve import Profile
from tunectl.record import field, record
from tunectl.system.rulesfile import RULES_FILE
from tunectl.udev.match import (
    RuleWriter,
    describe_match,
    env_name,
    match_rules,
    quote,
)
from tunectl.udev.scope import capture_rules, captured, scope_rules
from tunectl.udev.writes import Range, write_stage

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

FORMAT_VERSION = 1
END = "tunectl_end"

_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@:-]*$")


class RenderError(UsageError):
    """A profile value that cannot be put into a udev rule safely or exactly."""

    exit_code = ExitCode.USAGE
    code = "render"


@record(frozen=True)
class Rendered:
    text: str
    digest: str
    notes: list[str] = field(default_factory=list)
    runs_tunectl: bool = False
    # the attributes whose originals the rules keep for below: alone (no layer writes them): on a disk under no stack
    # a change of one is not the rules' (tuning.changes.adopt_rules_originals)
    below_only: tuple[str, ...] = ()


# --- the canonical form of a validated profile ----------------------------------------------------------------


def _settings(settings: dict) -> dict:
    """The tunable part of a class/devices/below block, in a form independent of key order."""
    out: dict = {}
    if "scheduler" in settings:
        out["scheduler"] = list(dict.fromkeys(settings["scheduler"]))
    knobs = settings.get("iosched") or {}
    out["iosched"] = {knob: _value(knobs[knob]) for knob in sorted(knobs)}
    queue = {}
    if "read_ahead_kb" in settings:
        queue["read_ahead_kb"] = _value(settings["read_ahead_kb"])
    q = settings.get("queue") or {}
    queue.update((attr, _value(q[attr])) for attr in sorted(q))
    out["queue"] = queue
    if settings.get("below"):
        out["below"] = True  # its contents are applied by the tunectl run
    return out


def _value(value: Any) -> Any:
    """A number or choice as it is; a range {min, max} as a (hashable) Range."""
    return Range(value.get("min"), value.get("max")) if is_range(value) else value


def _match(match: dict) -> dict:
    out: dict = {}
    for key, want in match.items():
        if key in ("class", "dm_type"):
            allowed = CLASSES if key == "class" else DM_TYPES
            out[key] = [c for c in allowed if c in want]
        elif key == "bus":
            out[key] = sorted(set(want))
        elif key == "size":
            out[key] = dict(sorted(want.items()))
        else:
            out[key] = [want] if key in ("kernel", "model", "vendor", "serial", "wwn") else want
    return out


def _check_modules(modules: Mapping[str, str], notes: list[str]) -> dict[str, str]:
    """Module files that can be put into a TEST; one that cannot is left out, with a note."""
    out = {}
    for scheduler, path in sorted(modules.items()):
        if scheduler not in SCHEDULERS or scheduler == "none":
            raise RenderError(f"modules: {scheduler!r} is not a scheduler that can be a module")
        if isinstance(path, str) and _PATH_RE.match(path) and "/../" not in path:
            out[scheduler] = path
        else:
            notes.append(f"{scheduler} is a module at {path!r}, a path udev cannot test safely: the rules choose it "
                         "only once it is loaded")
    return out


def _scope_glob(glob: str, where: str) -> str:
    problem = glob_problem(glob) if isinstance(glob, str) else "expected a glob"
    if problem:
        raise RenderError(f"{where}: {problem}")
    return glob


def _check_path(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    if not isinstance(path, str) or not _PATH_RE.match(path):
        raise RenderError(f"{what} {path!r} must be an absolute path of letters, digits and ._/+@:- only",
                          hint="udev splits RUN on blanks and substitutes % and $; move the file to a plain path")
    return path


# --- rendering ----------------------------------------------------------------------------------------------


def _sched_glob(name: str) -> str:
    # The offered list, e.g. "none [mq-deadline] kyber bfq": no scheduler name is part of another.
    return f"*{name}*"


def _canonical(profile: Profile) -> dict:
    """The inputs that decide the rules, in a form independent of dict order (the digest covers this).

    `profile` is validated (tunectl.profile.checks refuses everything a rule could not hold); this only orders.
    """
    classes = {}
    for cls in CLASSES:
        if cls in profile.classes:
            classes[cls] = _settings(profile.classes[cls] or {})
            if classes[cls].get("below"):
                classes[cls]["below"] = _canonical_below(profile.classes[cls]["below"])
    devices = []
    for entry in profile.devices:
        item = _settings(entry)
        if item.get("below"):
            item["below"] = _canonical_below(entry["below"])
        item["match"] = _match(entry["match"])
        devices.append(item)
    return {"classes": classes, "devices": devices}


def _canonical_below(below: dict) -> dict:
    settings = _settings(below)
    settings.pop("below", None)
    return settings


def digest_of(canonical: dict) -> str:
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + sha256(blob).hexdigest()


def _named_classes(canonical: dict) -> set[str]:
    """Classes the profile can reach; a devices entry without a class match may tune loop and zram too (as plan does)."""
    named = set(canonical["classes"])
    for entry in canonical["devices"]:
        named.update(entry["match"].get("class", OPT_IN_CLASSES))
    return named


def _layer_rules(w: RuleWriter, settings: dict, used: dict[str, set], modules: dict[str, str]) -> None:
    """The assignments of one layer, for a device already known to match it."""
    assigns = []
    prefs = settings.get("scheduler")
    if prefs:
        # This layer's list replaces an earlier layer's choice; nothing offered -> no switch, as in plan.
        assigns += [f'ENV{{{env_name("scheduler")}}}=""', f'ENV{{{env_name("scheduler_wanted")}}}={quote(" ".join(prefs))}']
    for knob, value in settings["iosched"].items():
        assigns.append(f"ENV{{{env_name('iosched_' + knob)}}}={quote(value)}")
        used.setdefault(f"iosched/{knob}", set()).add(value)
    for attr, value in settings["queue"].items():
        assigns.append(f"ENV{{{env_name('queue_' + attr)}}}={quote(value)}")
        used.setdefault(attr, set()).add(value)
    if settings.get("below"):
        assigns.append(f'ENV{{{env_name("below")}}}="1"')
    if assigns:
        w.rule(*assigns)
    if prefs:
        if len(prefs) > 1:
            w.comment(f"preference {', '.join(prefs)}: the last rule that fires wins, so the first one offered is chosen")
        for name in reversed(prefs):
            w.rule(f"ATTR{{queue/scheduler}}=={quote(_sched_glob(name))}", f'ENV{{{env_name("scheduler")}}}={quote(name)}')
            if name in modules:
                # Not listed until loaded, but the write below loads it: offered while its module file exists.
                w.rule(f'ENV{{{env_name("has_scheduler")}}}=="1"', f"TEST=={quote(modules[name])}",
                       f'ENV{{{env_name("scheduler")}}}={quote(name)}')
            used.setdefault("scheduler", set()).add(name)


def render_rules(profile: Profile, tunectl_path: str | None, profile_path: str | None = None,
                 only_kernels: tuple[str, ...] | list[str] = (), only_loop_backing: str | None = None,
                 modules: Mapping[str, str] | None = None, identities: list[str] | None = None,
                 capture: bool = False) -> Rendered:
    """The rules file for `profile`, its digest and the notes a user should read.

    `tunectl_path` and `profile_path` (default: the profile's own file) are
    needed only when a `below:` block makes a stacked device's event run
    tunectl. `only_kernels` / `only_loop_backing` restrict the rules to some
    devices (tests, staged roll-outs); a profile never sets them. `identities`
    (the record of intent's scope): the rules match only those devices;
    `capture`: they keep each original in udev's database (`tunectl.udev.scope`).

    `modules` maps a scheduler the target kernel has as a loadable module to its
    module file (``attributes.modular_schedulers``; `udev install` reads it from
    the running kernel's module tree). Such a scheduler is not in
    ``queue/scheduler`` until loaded, and writing its name loads it, so apply
    counts it as offered; the rules do the same while that exact file exists
    (``TEST==``, a stat per event, no process). The file's path holds the kernel
    release: after booting another kernel the test fails and the rules fall back
    to what the device lists, never writing a name that kernel cannot load, and
    `udev check` reports the rules as stale. Writing the name unconditionally
    instead would break preference lists ([bfq, mq-deadline] on a kernel without
    bfq: the write fails and udev cannot see that within the event to fall back).
    """
    scope = [_scope_glob(k, "only_kernels") for k in only_kernels]
    backing = _scope_glob(only_loop_backing, "only_loop_backing") if only_loop_backing else None
    if backing and not backing.startswith("/"):
        raise RenderError(f"only_loop_backing {backing!r} must be an absolute path glob")
    notes: list[str] = []
    canonical, modules, run_cmd = _rule_inputs(profile, tunectl_path, profile_path, modules, identities, capture, notes)
    digest = digest_of(canonical)
    w = RuleWriter()
    _header_rules(w, profile.name, digest, modules)
    _guard_rules(w, scope, backing, canonical.get("scope"), notes)
    _fact_rules(w, canonical)
    used = _profile_rules(w, canonical, modules, notes)
    below = _below_attributes(canonical)
    if capture:
        # What a below: block sets is written by tunectl's RUN on the device under a stack, perhaps a stack made after
        # install: nothing journals that original, so the rules keep it too (on every device they reach: which one
        # will be under a stack is not known before the stack exists).
        capture_rules(w, {**below, **used})
    write_stage(w, used)
    if run_cmd:
        _below_rules(w, run_cmd)
    w.blank()
    w.rule(f'LABEL="{END}"')
    return Rendered("\n".join(w.lines) + "\n", digest, notes, bool(run_cmd),
                    tuple(sorted(set(captured(below)) - set(captured(used)))))


def _below_attributes(canonical: dict) -> dict[str, set]:
    """The attributes the below: blocks of the profile set, named as `_layer_rules` names them in `used`."""
    attrs: dict[str, set] = {}
    for block in [*canonical["classes"].values(), *canonical["devices"]]:
        below = block.get("below")
        if not isinstance(below, dict):
            continue
        if below.get("scheduler"):
            attrs["scheduler"] = set()
        attrs.update((f"iosched/{knob}", set()) for knob in below["iosched"])
        attrs.update((attr, set()) for attr in below["queue"])
    return attrs


def below_attributes(profile: Profile) -> list[str]:
    """What the profile's below: blocks set, with what the kernel changes with them (a scheduler switch resets
    nr_requests): the attributes whose originals `udev install` keeps for the RUN of a stack made later."""
    return captured(_below_attributes(_canonical(profile)))


def _rule_inputs(profile: Profile, tunectl_path: str | None, profile_path: str | None,
                 modules: Mapping[str, str] | None, identities: list[str] | None, capture: bool,
                 notes: list[str]) -> tuple[dict, dict[str, str], str]:
    """The profile in the canonical form the digest covers (with the modules, scope and capture that shape the
    rules), the modules the rules may load, and the command a stacked device's event runs ("" when none)."""
    canonical = _canonical(profile)
    # Only the modules the rules can choose: a kernel change elsewhere leaves the rules (and digest) alone.
    blocks = [*canonical["classes"].values(), *canonical["devices"]]
    wanted = {name for block in blocks for name in block.get("scheduler", ())}
    modules = _check_modules({k: v for k, v in (modules or {}).items() if k in wanted}, notes)
    if modules:
        canonical["modules"] = dict(sorted(modules.items()))  # an input of the rules: the digest covers it
    runs = bool(any(s.get("below") for s in canonical["classes"].values()) or any(e.get("below") for e in canonical["devices"]))
    run_cmd = ""
    if runs:
        tunectl_path = _check_path(tunectl_path, "tunectl executable")
        profile_path = _check_path(profile_path if profile_path is not None else (profile.files[0] if profile.files else None),
                                   "profile file")
        if not tunectl_path or not profile_path:
            raise RenderError("the profile has below: settings, which a stacked device's udev event applies by running "
                              "tunectl; the tunectl executable or the profile file path is unknown",
                              hint="install tunectl on PATH or set TUNECTL_EXECUTABLE=/path/to/tunectl")
        run_cmd = f"{tunectl_path} apply -p {profile_path} --stack $kernel -q"
        notes.append("below: settings are applied by running tunectl on the stacked device's event "
                     f"({run_cmd}), and so does the event of a device under a stack")
    if identities is not None:
        canonical["scope"] = sorted(set(identities))  # an input of the rules: the digest covers it
    if capture:
        canonical["capture"] = True
    return canonical, modules, run_cmd


def _header_rules(w: RuleWriter, name: str, digest: str, modules: Mapping[str, str]) -> None:
    """What the file is, where it comes from, and its stages."""
    w.comment(f"{RULES_FILE}: block-device tuning for tunectl profile {name!r}, generated by `tunectl udev render`.")
    w.comment(f"digest {digest}, rules format {FORMAT_VERSION}.")
    w.comment(f"Do not edit: change the profile, then run `tunectl udev install -p {name}`.")
    w.comment("Stages: facts (class, bus), profile layers setting TUNECTL_* properties (later layers win, as in")
    w.comment("`tunectl apply`), then the writes in apply's order: scheduler, nr_requests, knobs, queue, read-ahead.")
    if modules:
        w.comment("Schedulers built as modules of the kernel these rules were rendered for, offered while the module")
        w.comment("file exists (writing the name loads it): " + ", ".join(f"{k} {v}" for k, v in sorted(modules.items())))


def _guard_rules(w: RuleWriter, scope: list[str], backing: str | None, identities: list[str] | None,
                 notes: list[str]) -> None:
    """Block devices with a queue only (whole disks); then the caller's scope: kernel names, a loop backing, identities."""
    w.blank()
    w.rule('SUBSYSTEM!="block"', f'GOTO="{END}"')
    w.rule('ACTION!="add|change"', f'GOTO="{END}"')
    w.comment("whole disks only: partitions share the disk's queue/ (and ATTRS{} would reach the parent disk)")
    w.rule('ENV{DEVTYPE}!="disk"', f'GOTO="{END}"')
    w.rule('TEST!="queue"', f'GOTO="{END}"')
    if scope or backing:
        w.comment("scope set by the caller, not by the profile: only these devices")
        if scope:
            w.rule(f"KERNEL!={quote('|'.join(scope))}", f'GOTO="{END}"')
        if backing:
            w.rule('KERNEL!="loop*"', f'GOTO="{END}"')
            w.rule('TEST!="loop/backing_file"', f'GOTO="{END}"')
            w.rule(f"ATTR{{loop/backing_file}}!={quote(backing)}", f'GOTO="{END}"')
    if identities is not None:
        scope_rules(w, identities, END, notes)


def _fact_rules(w: RuleWriter, canonical: dict) -> None:
    """The facts the profile layers match on: class (as classify() decides it), dm type, bus, a scheduler at all."""
    named = _named_classes(canonical)
    w.blank()
    w.comment("class, in the order of tunectl's classify(): the first match wins")
    for cls in CLASS_TABLE:
        if cls.udev_match is None:
            w.rule(f'ENV{{{env_name("class")}}}={quote(cls.name)}')
        else:
            w.rule(cls.udev_match, f'ENV{{{env_name("class")}}}={quote(cls.name)}', 'GOTO="tunectl_class_done"')
    w.rule('LABEL="tunectl_class_done"')
    skipped = [c for c in OPT_IN_CLASSES if c not in named]
    if skipped:
        w.comment(f"{' and '.join(skipped)} devices are tuned only when the profile names their class")
        w.rule(f'ENV{{{env_name("class")}}}=={quote("|".join(skipped))}', f'GOTO="{END}"')
    if "loop" in named:
        w.comment("an unattached loop device has nothing to tune")
        w.rule(f'ENV{{{env_name("class")}}}=="loop"', 'TEST!="loop/backing_file"', f'GOTO="{END}"')
    w.comment("dm: only once the table is live (change event, or coldplug of a device activated before),")
    w.comment("and never while device-mapper asks other rules to keep out (suspended, no table yet)")
    w.rule(f'ENV{{{env_name("class")}}}=="dm"', 'ACTION=="add"', 'ENV{DM_UDEV_PRIMARY_SOURCE_FLAG}!="1"', f'GOTO="{END}"')
    w.rule(f'ENV{{{env_name("class")}}}=="dm"', 'ENV{DM_UDEV_DISABLE_OTHER_RULES_FLAG}=="1"', f'GOTO="{END}"')
    if any("dm_type" in e["match"] for e in canonical["devices"]):
        for prefix, kind in DM_UUID_PREFIXES:
            w.rule(f'ENV{{{env_name("class")}}}=="dm"', f'ENV{{DM_UUID}}=="{prefix}*"',
                   f'ENV{{{env_name("dm_type")}}}={quote(kind)}')
    w.comment("md: not before the array runs (md sets its own read-ahead when it starts)")
    w.rule(f'ENV{{{env_name("class")}}}=="md"', 'ATTR{md/array_state}=="|clear|inactive"', f'GOTO="{END}"')
    if any("bus" in e["match"] for e in canonical["devices"]):
        w.comment("bus when udev has no ID_BUS: from the device path, as tunectl's discovery does")
        w.rule('ENV{ID_BUS}=="?*"', 'GOTO="tunectl_bus_done"')
        for fragment, bus in BUS_BY_PATH:
            w.rule(f'DEVPATH=="*{fragment}*"', f'ENV{{{env_name("bus")}}}={quote(bus)}', 'GOTO="tunectl_bus_done"')
        w.rule('LABEL="tunectl_bus_done"')
    w.comment("bio-based devices (dm, md, zram) show \"none\" or no scheduler file: no scheduler, no knobs")
    w.rule('ATTR{queue/scheduler}!="none|[[]none[]]"', f'ENV{{{env_name("has_scheduler")}}}="1"')


def _profile_rules(w: RuleWriter, canonical: dict, modules: Mapping[str, str], notes: list[str]) -> dict[str, set]:
    """The profile's layers, classes then devices[] (later layers win), each setting TUNECTL_* properties;
    returns the attributes each sets, for the write stage."""
    used: dict[str, set] = {}
    for cls in CLASSES:
        if cls not in canonical["classes"]:
            continue
        settings = canonical["classes"][cls]
        w.blank()
        w.comment(f"classes.{cls}")
        if not (settings.get("scheduler") or settings["iosched"] or settings["queue"] or settings.get("below")):
            w.comment("nothing to set")
            continue
        end = f"tunectl_class_{cls}_end"
        w.rule(f'ENV{{{env_name("class")}}}!={quote(cls)}', f'GOTO="{end}"')
        _layer_rules(w, settings, used, modules)
        w.rule(f'LABEL="{end}"')
    for i, entry in enumerate(canonical["devices"]):
        w.blank()
        w.comment(f"devices[{i}]: {describe_match(entry['match'])}")
        end = f"tunectl_dev{i}_end"
        if not (entry.get("scheduler") or entry["iosched"] or entry["queue"] or entry.get("below")):
            w.comment("nothing to set")
            continue
        body, entry_notes = RuleWriter(), []
        if not match_rules(body, entry["match"], end, f"tunectl_dev{i}", entry_notes, f"devices[{i}].match"):
            w.comment("skipped: its size range holds no whole 512-byte sector count, so it matches no device")
            notes.append(f"devices[{i}] matches no device (empty size range); no rule was written for it")
            continue
        notes.extend(entry_notes)
        w.lines.extend(body.lines)
        _layer_rules(w, entry, used, modules)
        w.rule(f'LABEL="{end}"')
    return used


def _below_rules(w: RuleWriter, run_cmd: str) -> None:
    """below: the event of a stacked device, or of a device under one, runs `run_cmd` (tunectl apply --stack)."""
    w.blank()
    w.comment("below: udev cannot write another device's attributes, so the event of a stacked device (one with")
    w.comment("slaves/) runs tunectl for that one stack: the device and the disks under it. It costs a process start")
    w.comment("per event of such a device; plain settings above never start a process.")
    w.rule(f'ENV{{{env_name("below")}}}=="1"', 'TEST=="slaves/*/dev"', f"RUN+={quote(run_cmd)}")
    under = env_name("under")
    w.comment("A device under a stack (holders/, or a partition table whose partitions may have holders: udev's")
    w.comment("TEST takes one * only) gets below: values that only the stack above it knows: its own event (parted,")
    w.comment("a rescan, `tunectl align`) runs tunectl for it too, or the writes above would undo what apply set.")
    w.rule('TEST=="holders/*/dev"', f'ENV{{{under}}}="1"')
    w.rule('ENV{ID_PART_TABLE_TYPE}=="?*"', f'ENV{{{under}}}="1"')
    w.rule(f'ENV{{{env_name("below")}}}=="1"', 'TEST=="slaves/*/dev"', f'ENV{{{under}}}=""')
    w.rule(f'ENV{{{under}}}=="1"', f"RUN+={quote(run_cmd)}")


def render(profile: Profile, tunectl_path: str | None, **kw: Any) -> str:
    """`render_rules(...).text`: the bytes `tunectl udev render` prints and `install` writes."""
    return render_rules(profile, tunectl_path, **kw).text
