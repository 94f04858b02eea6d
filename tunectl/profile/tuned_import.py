"""Convert a tuned profile (tuned.conf and its includes) into a tunectl profile.

tuned_reader finds, parses and merges the tuned.conf files; this module converts the
result (which unit's settings reach which devices; tuned_values types each value) and
renders it as YAML. No sysfs, no subprocess: the only files read are tuned's.
Only the block-device part of tuned carries over ([disk] units and [sysfs] lines
under /sys/block/*/queue); everything else is listed in `unconverted` with a reason.
"""

from __future__ import annotations

import copy
import errno
import fnmatch
import os
import re
from collections.abc import Sequence
from functools import reduce

import yaml

from tunectl.attributes import IOSCHED, QUEUE
from tunectl.errors import ExitCode, UsageError
from tunectl.profile import tuned_values as values
from tunectl.profile.tuned_reader import (
    CONDITIONS,
    HOST,
    SCRIPTS,
    Files,
    Loader,
    Unit,
    expand,
    locate,
    merge,
    parse_ini,
    unresolved,
)
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.system.roots import SYS, under_dev

DEFAULT_SEARCH_DIRS = ("/etc/tuned", "/usr/lib/tuned")

# tuned's disk plugin only tunes non-removable disks whose parent device sits on the
# scsi, virtio, xen or nvme bus: eMMC (its parent is on the mmc bus), dm, md and loop
# devices are never touched by [disk].
DISK_PLUGIN_CLASSES = ("rotational", "ssd", "nvme", "virtio")
# A [sysfs] glob over /sys/block/* reaches every block device that has the file.
SCHEDULED_CLASSES = ("rotational", "ssd", "nvme", "virtio", "mmc")
QUEUE_CLASSES = SCHEDULED_CLASSES + ("dm", "md")
_CLASS_ORDER = QUEUE_CLASSES

_SYSFS_QUEUE = re.compile(re.escape(SYS) + r"/(?:block|class/block)/([^/]+)/queue/(?:(iosched)/)?([^/]+)")
_GLOB_CHARS = re.compile(r"[*?\[]")


@record
class TunedImport(Report):
    name: str
    profile: dict
    unconverted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # tuned.conf files, in merge order
    # "path: why" of each file found but not read (a [variables] include): its settings are missing from `profile`;
    # said in `notes` too. Not in to_json: doctor lists them as files it did not read.
    unread: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "profile": self.profile, "unconverted": self.unconverted, "notes": self.notes}

    @property
    def exit_code(self) -> int:
        return ExitCode.OK  # what could not be converted is said in the profile's comments, not an error

    def print_text(self, out) -> None:
        """The tunectl profile as YAML (with what was left out in its comments): the requested data, even with -q."""
        out.stdout.write(render_yaml(self))


class _Converter(values.Findings):
    def __init__(self, unconverted: list[str], notes: list[str], files: Files) -> None:
        super().__init__(unconverted, notes)
        self.files = files
        self.classes: dict[str, dict] = {}
        self.devices: dict[str, dict] = {}
        self.claimed: list[str] = []  # disk globs already owned by a disk-plugin unit
        self.claimed_all = ""  # label of the unit that took every disk
        self.unread: list[str] = []  # "path: why" of each file that exists but could not be read (`TunedImport`)

    # -- variables --------------------------------------------------------------

    def variables(self, unit: Unit | None) -> dict[str, str]:
        variables: dict[str, str] = {}
        if unit is None:
            return variables
        for key, value in unit.options.items():
            if key == "include":
                self._variable_file(os.path.normpath(value), variables)
                continue
            if not re.fullmatch(r"\w+", key):
                self.note(f"[variables] {key}: not a valid variable name, ignored as tuned does")
                continue
            variables[key] = expand(value, variables)
            if "${f:" in value:
                self.unconverted.append(f"[variables] {key}={value}: {unresolved(value)}")
        return variables

    def _variable_file(self, path: str, variables: dict[str, str]) -> None:
        # tuned logs and carries on when a variables file is missing or broken.
        from tunectl.system.trust import Untrusted

        try:
            parser = parse_ini("[variables]\n" + self.files.read(path), path)
        except (OSError, UnicodeDecodeError, UsageError, Untrusted) as e:
            why = (e.found if isinstance(e, Untrusted) else e.message if isinstance(e, UsageError)
                   else "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else e.strerror or str(e))
            self.note(f"[variables] include={path}: cannot be read ({why}); its variables stay undefined")
            if not (isinstance(e, OSError) and e.errno == errno.ENOENT):  # missing: tuned finds nothing there either
                self.unread.append(f"{path}: {why}")
            return
        for key, value in parser.items("variables", raw=True):
            variables[key] = expand(value or "", variables)
            if "${f:" in (value or ""):
                self.unconverted.append(f"[variables] {key}={value} (from {path}): {unresolved(value or '')}")

    # -- units ------------------------------------------------------------------

    def unit(self, unit: Unit, variables: dict[str, str]) -> None:
        label = f"[{unit.name}]"
        if not unit.enabled:
            self.note(f"{label} enabled=false: unit disabled, skipped as tuned does")
            return
        options = {k: expand(v, variables) for k, v in unit.options.items()}
        if unit.type not in ("disk", "sysfs"):
            if not options:
                self.unconverted.append(f"{label}: enables tuned's {unit.type} plugin defaults: not a block-device setting")
            for key, value in options.items():
                self.unconverted.append(f"{label} {key}={value}: not a block-device setting")
            return
        for key in SCRIPTS:
            if key in unit.extra:
                self.unconverted.append(f"{label} {key}={unit.extra[key]}: tunectl runs no scripts")
        conditions = [f"{k}={unit.extra[k]}" for k in CONDITIONS if k in unit.extra]
        if conditions:
            why = f"tuned applies this unit only when {' and '.join(conditions)}; tunectl has no such condition"
            self._skip(label, options, why)
            return
        if unit.type == "disk":
            self._disk(label, expand(unit.devices, variables), options)
        else:
            self._sysfs(label, options)

    def _skip(self, label: str, options: dict[str, str], why: str) -> None:
        self.unconverted += [f"{label} {k}={v}: {why}" for k, v in options.items()] or [f"{label}: {why}"]

    def _claim(self, label: str, positive: list[str], negative: list[str]) -> list[str] | None:
        """The globs of a disk unit that still get devices; None when it gets none at all.

        tuned hands each disk to exactly one instance of the disk plugin: units in
        priority order, each taking the free disks its devices= matches.
        """
        if self.claimed_all:
            return None
        everything = not positive or "*" in positive
        free = ["*"] if everything else []
        for glob in [] if everything else positive:
            owner = next((p for p in self.claimed if fnmatch.fnmatchcase(glob, p)), None)
            if owner:
                self.unconverted.append(f"{label} devices entry {glob}: its disks already went to the unit with devices {owner}")
            else:
                free.append(glob)
        if everything and self.claimed:
            self.note(
                f"{label}: tuned leaves disks matching {', '.join(self.claimed)} to the earlier unit; in tunectl"
                " these class settings reach them too, where their devices entry does not set the same attribute"
            )
        if not negative:  # a unit with exclusions leaves disks to later units: not modelled
            if everything:
                self.claimed_all = label
            self.claimed += [g for g in free if g != "*"]
        return free

    def _disk(self, label: str, devices: str, options: dict[str, str]) -> None:
        rules = [r for r in re.split(r"\s|,\s*", devices) if r.strip()]
        positive = [r for r in rules if not r.startswith("!")]
        negative = [r for r in rules if r.startswith("!")]
        claimed_all_by = self.claimed_all
        free = self._claim(label, positive, negative)
        if free is None:
            why = f"tuned gives every disk to {claimed_all_by} (devices=*), which comes first; this unit tunes nothing"
            self._skip(label, options, why)
            return
        if not options:
            self.unconverted.append(
                f"{label}: no static settings; tuned's dynamic disk tuning (apm/spindown by load,"
                " when dynamic_tuning=1 in tuned-main.conf) is not carried over"
            )
            return
        settings: dict = {}
        for key, value in options.items():
            item = f"{label} {key}={value}"
            problem = unresolved(value)
            if problem:
                self.unconverted.append(f"{item}: {problem}")
            elif key == "elevator":
                _put(settings, "scheduler", values.scheduler(self, item, value))
            elif key == "readahead":
                _put(settings, "read_ahead_kb", values.read_ahead(self, item, value))
            elif key == "readahead_multiply":
                self.unconverted.append(f"{item}: multiplies whatever read-ahead a device has at run time; no static equivalent")
            elif key in ("apm", "spindown"):
                self.unconverted.append(f"{item}: hdparm power management, not a block-queue setting")
            elif key == "scheduler_quantum":
                self.unconverted.append(f"{item}: a CFQ knob; CFQ does not exist on blk-mq kernels")
            elif key in ("dynamic", "priority"):
                pass  # tuned daemon behaviour only
            else:
                self.unconverted.append(f"{item}: not a tunectl setting")
        if not settings or not free:
            return
        if negative:
            self.note(
                f"{label} devices={devices}: exclusions {' '.join(negative)} cannot be expressed"
                " (tunectl matches have no negation); the excluded devices get these settings too"
            )
        if "*" in free:
            self.note(
                f"{label}: tuned's disk plugin skips removable disks and eMMC; applied to classes"
                f" {', '.join(DISK_PLUGIN_CLASSES)} (which also cover removable disks)"
            )
            self._apply(None, settings, DISK_PLUGIN_CLASSES)
            return
        for rule in free:
            kernel = under_dev(rule) or rule
            if "/" in kernel:
                self.unconverted.append(f"{label} devices entry {rule}: only kernel-name globs can be matched")
            else:
                self._apply(kernel, settings, ())

    def _sysfs(self, label: str, options: dict[str, str]) -> None:
        for key, raw in options.items():
            value = raw.strip()
            item = f"{label} {key}={value}"
            m = _SYSFS_QUEUE.fullmatch(os.path.normpath(key))
            problem = unresolved(value)
            if problem:
                self.unconverted.append(f"{item}: {problem}")
                continue
            if not m:
                self.unconverted.append(f"{item}: not a block-device queue setting")
                continue
            device, iosched, attr = m.groups()
            if _GLOB_CHARS.search(attr):
                self.unconverted.append(f"{item}: a glob in the attribute name cannot be converted")
                continue
            settings: dict = {}
            if iosched:
                _put(settings, "iosched", values.knob(self, item, attr, value), attr)
            elif attr == "scheduler":
                _put(settings, "scheduler", values.scheduler(self, item, value))
            elif attr == "read_ahead_kb":
                _put(settings, "read_ahead_kb", values.read_ahead_kb(self, item, value))
            elif attr in QUEUE:
                _put(settings, "queue", values.typed(self, item, QUEUE[attr], value), attr)
            else:
                self.unconverted.append(f"{item}: queue/{attr} is not in tunectl's queue attribute allow-list")
            if settings:
                scheduled = iosched or attr == "scheduler"
                self._apply(None if device == "*" else device, settings, SCHEDULED_CLASSES if scheduled else QUEUE_CLASSES)

    # -- targets ----------------------------------------------------------------

    def _apply(self, kernel: str | None, settings: dict, classes: Sequence[str]) -> None:
        if kernel is None:
            targets = [self.classes.setdefault(c, {}) for c in classes]
        else:
            targets = [self.devices.setdefault(kernel, {"match": {"kernel": kernel}})]
        for target in targets:
            for key, value in settings.items():
                if isinstance(value, dict):
                    target.setdefault(key, {}).update(value)
                else:
                    target[key] = copy.deepcopy(value)

    def _check_knobs(self, where: str, settings: dict) -> None:
        knobs = settings.get("iosched")
        if not knobs:
            return
        chosen = settings.get("scheduler")
        for knob in list(knobs):
            owners = [s for s, names in IOSCHED.items() if knob in names]
            if chosen is None:
                self.note(
                    f"{where}: iosched {knob} only exists under {', '.join(owners)}; tuned wrote it to whatever"
                    " scheduler was active, so pin a scheduler for it to apply"
                )
            elif not set(owners) & set([chosen] if isinstance(chosen, str) else chosen):
                del knobs[knob]
                self.unconverted.append(f"{where}: iosched {knob} belongs to {', '.join(owners)}, not to scheduler {chosen}")
        if not knobs:
            del settings["iosched"]

    def result(self) -> tuple[dict, list]:
        classes = {c: self.classes[c] for c in _CLASS_ORDER if c in self.classes}
        for name, settings in classes.items():
            self._check_knobs(f"classes.{name}", settings)
        for kernel, entry in self.devices.items():
            self._check_knobs(f"devices[kernel={kernel}]", entry)
        classes = {c: s for c, s in classes.items() if s}
        devices = [e for e in self.devices.values() if len(e) > 1]
        return classes, devices


def _put(settings: dict, key: str, value: object, attr: str = "") -> None:
    """settings[key] = value, or settings[key] = {attr: value} for a queue attribute or knob; None is nothing."""
    if value is not None:
        settings[key] = {attr: value} if attr else value


def _priority(unit: Unit) -> int:
    try:
        return int(unit.options.get("priority", 0))
    except ValueError:
        return 0


def import_tuned(ref: str, search_dirs: Sequence[str] = DEFAULT_SEARCH_DIRS, files: Files = HOST) -> TunedImport:
    """Read tuned profile `ref` (name, tuned.conf path or profile directory) as a tunectl profile; `files`: where
    its paths are read (this machine's, or a configuration tree's: `TreeFiles`)."""
    name, path = locate(ref, search_dirs, files)
    unconverted: list[str] = []
    notes: list[str] = []
    # Includes are names looked up in search_dirs, then next to the imported profile.
    dirs = list(search_dirs)
    sibling_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    if sibling_dir not in dirs:
        dirs.append(sibling_dir)
    loader = Loader(dirs, unconverted, files)
    loader.load(name, path, [])
    merged = reduce(merge, copy.deepcopy(loader.loaded))

    converter = _Converter(unconverted, notes, files)
    variables = converter.variables(merged.units.pop("variables", None))
    for key, value in merged.main.items():
        if key not in ("summary", "description"):
            unconverted.append(f"[main] {key}={value}: tuned profile option, not a block-device setting")
    # tuned creates plugin instances sorted by priority (stable: profile order otherwise).
    for unit in sorted(merged.units.values(), key=_priority):
        converter.unit(unit, variables)
    classes, devices = converter.result()

    summary = merged.main.get("summary") or merged.main.get("description") or f"tuned profile {name}"
    profile: dict = {"name": name, "description": f"{summary} (imported from tuned)"}
    if classes:
        profile["classes"] = classes
    if devices:
        profile["devices"] = devices
    if not classes and not devices:
        notes.append("no block-device settings found: this profile changes nothing")
    return TunedImport(name, profile, unconverted, notes, [p.path for p in loader.loaded], converter.unread)


def _comment(lines: Sequence[str], indent: str = "") -> list[str]:
    return [f"#{indent}{part}".rstrip() for line in lines for part in str(line).splitlines() or [""]]


COMMENT_CHARS = 200  # of one line copied from the tuned profile into a comment of the one made


def _one_comment(item: str, indent: str = "") -> str:
    """What was not carried over, copied from the tuned files (anyone's text: a value can be megabytes or hold
    newlines), as one comment line: control characters escaped (`report.shown`), at most COMMENT_CHARS of it,
    the rest cut and said so (--json keeps it whole)."""
    from tunectl.report import shown

    text = shown(item)
    if len(text) > COMMENT_CHARS:
        text = f"{text[:COMMENT_CHARS]}... ({len(text) - COMMENT_CHARS} more characters cut; --json has them)"
    return f"#{indent}{text}".rstrip()


def render_yaml(result: TunedImport) -> str:
    """The profile as YAML, with where it came from and what was left behind as comments."""
    head = [f"tunectl profile imported from tuned profile '{result.name}'."]
    if result.sources:
        head.append("Read, in merge order (later files win):")
        head += [f"  {s}" for s in result.sources]
    out = _comment(head, " ")
    if result.notes:
        out += ["#", "# Notes:"] + _comment([f"- {n}" for n in result.notes], "   ")
    for key, value in result.profile.items():  # block style at the top, flow style for leaves
        flow = None if isinstance(value, (dict, list)) else False
        text = yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=flow, allow_unicode=True, width=4096)
        out.append(text.rstrip("\n"))
    if result.unconverted:
        out += ["", f"# Not carried over ({len(result.unconverted)}):"]
        out += [_one_comment(f"- {u}", "   ") for u in result.unconverted]
    return "\n".join(out) + "\n"
