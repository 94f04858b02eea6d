"""The other writers of block queue attributes, read from their own files' text (pure: no file is opened here).

Each parser takes a file's path (for messages) and text and returns `Assignment`s:
one place that writes one queue attribute, with the devices it targets as a
`Target`. `udev_order` and `dropin_order` decide which files a service reads and
in what order, from directory listings, with the override-by-name rule that udev
and systemd-tmpfiles share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from tunectl.record import field, record
from tunectl.system import rulesfile
from tunectl.udev.lines import logical_lines

# Where each writer runs: at boot, at hot-plug (a udev add/change event), or both.
BOOT, HOTPLUG, BOTH = "boot", "hotplug", "boot+hotplug"

UDEV_RULES_DIRS = rulesfile.UDEV_RULES_DIRS
# tmpfiles.d(5): the same override-by-name rule.
TMPFILES_DIRS = ("/etc/tmpfiles.d", "/run/tmpfiles.d", "/usr/local/lib/tmpfiles.d", "/usr/lib/tmpfiles.d",
                 "/lib/tmpfiles.d")
SYSFS_CONF = "/etc/sysfs.conf"  # sysfsutils, plus /etc/sysfs.d/*.conf
SYSFS_D = "/etc/sysfs.d"
TUNED_ACTIVE = "/etc/tuned/active_profile"
TUNED_DIRS = ("/etc/tuned", "/etc/tuned/profiles", "/usr/lib/tuned", "/usr/lib/tuned/profiles")


@record
class Target:
    """The devices an assignment reaches: kernel-name globs (empty: any), and conditions not evaluated here.

    `needs` holds udev match keys as `(key, op, value)` (``("ATTR{queue/rotational}", "==", "0")``);
    `Target.holds` evaluates those it can from a device's facts and reports the others.
    """

    kernels: tuple[str, ...] = ()
    needs: tuple[tuple[str, str, str], ...] = ()

    def holds(self, facts: Mapping[str, str]) -> bool | None:
        """True/False when the device is (not) reached; None when a condition cannot be evaluated (may be)."""
        name = facts.get("KERNEL", "")
        if self.kernels and not any(fnmatchcase(name, g) for g in self.kernels):
            return False
        unknown = False
        for key, op, value in self.needs:
            if key not in facts:
                unknown = True
                continue
            hit = any(fnmatchcase(facts[key], alt) for alt in value.split("|"))
            if hit != (op == "=="):
                return False
        return None if unknown else True

    def text(self) -> str:
        parts = [f"KERNEL=={'|'.join(self.kernels)}"] if self.kernels else []
        return ", ".join(parts + [f"{k}{op}{v!r}" for k, op, v in self.needs]) or "every device"


@record
class Assignment:
    """One line of a file that writes `queue/<attribute>` (attribute as tunectl names it)."""

    kind: str  # udev-rule | tunectl-rules | sysfs.conf | tmpfiles | tuned | cmdline
    attribute: str  # "scheduler", "read_ahead_kb", "iosched/read_expire", "rotational"
    value: str
    path: str
    line: int
    target: Target = field(default_factory=Target)
    runs: str = BOTH  # BOOT | HOTPLUG | BOTH
    note: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


# --- udev -------------------------------------------------------------------------------------------------

# A pattern compiled at first use (re keeps it): most runs never need it.
_UDEV_KEY = r'\s*([A-Z_]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?'
# RUN+="/bin/sh -c 'echo mq-deadline > /sys/block/%k/queue/scheduler'" and the like.
_ECHO = r"echo\s+(?:-n\s+)?['\"]?([\w.-]+)['\"]?\s*>+\s*/sys(?:/class)?/block/([^/\s'\"]+)/queue/([\w/]+)"


def queue_attribute(sysfs_rel: str) -> str | None:
    """``queue/scheduler`` -> ``scheduler``; ``bdi/read_ahead_kb`` -> ``read_ahead_kb``; other paths None."""
    rel = sysfs_rel.strip().lstrip("/")
    if rel == "bdi/read_ahead_kb":
        return "read_ahead_kb"
    if rel.startswith("queue/") and len(rel) > len("queue/"):
        return rel[len("queue/"):]
    return None


def parse_udev_rules(path: str, text: str, kind: str = "udev-rule") -> list[Assignment]:
    """Every assignment of a queue attribute in a rules file: ``ATTR{queue/X}="v"`` and ``echo v > /sys/block/..``
    in a RUN. Match keys on the same line become the target; a rule for remove events, partitions or another
    subsystem writes nothing to a disk's queue and is left out."""
    out: list[Assignment] = []
    if not _may_write(text.replace("\\\n", "")):
        return out  # most rules files write no queue attribute (the text as udev joins its lines: no line does)
    for number, line in logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or not _may_write(stripped):
            continue  # most rules write no queue attribute: their keys are not even split
        keys, pos, key = [], 0, re.compile(_UDEV_KEY)
        while pos < len(stripped):
            m = key.match(stripped, pos)
            if not m:
                break
            keys.append(m.groups())
            pos = m.end()
        kernels: tuple[str, ...] = ()
        needs, writes, reachable = [], [], True
        for key, attr, op, value in keys:
            if op in ("==", "!="):
                if key == "KERNEL" and op == "==":
                    kernels = tuple(value.split("|"))
                elif key == "SUBSYSTEM":
                    reachable = reachable and _alt_hits("block", value, op)
                elif key == "ACTION":
                    reachable = reachable and (_alt_hits("add", value, op) or _alt_hits("change", value, op))
                elif key == "DEVTYPE" or (key == "ENV" and attr == "DEVTYPE"):
                    reachable = reachable and _alt_hits("disk", value, op)
                else:
                    needs.append((f"{key}{{{attr}}}" if attr is not None else key, op, value))
            elif key == "ATTR" and op in ("=", ":=") and attr is not None:
                name = queue_attribute(attr)
                if name:
                    writes.append((name, value, ""))
            elif key == "RUN":
                for value_m in re.finditer(_ECHO, value):
                    written, device, name = value_m.groups()
                    if device not in ("%k", "$kernel", "$name", "%n"):
                        kernels = (device,)
                    writes.append((name, written, "a RUN program writes it"))
        if not reachable:
            continue
        target = Target(kernels, tuple(needs))
        out.extend(Assignment(kind, name, value, path, number, target, BOTH, note) for name, value, note in writes)
    return out


def _may_write(text: str) -> bool:
    """False when `text` names no queue attribute (``queue/X`` or ``bdi/read_ahead_kb``), so it writes none."""
    return "queue/" in text or "bdi/read_ahead_kb" in text


def _alt_hits(have: str, pattern: str, op: str) -> bool:
    hit = any(fnmatchcase(have, alt) for alt in pattern.split("|"))
    return hit if op == "==" else not hit


@record
class RulesFile:
    """One file a service reads, in its order; `masked`: an empty file or /dev/null link hides every later one."""

    name: str
    path: str
    hidden: tuple[str, ...] = ()  # same-name files in lower-priority directories, not read
    masked: bool = False


def dropin_order(listings: Mapping[str, Sequence[str]], dirs: Sequence[str], suffix: str,
                 masked: Sequence[str] = ()) -> list[RulesFile]:
    """The files udev (or systemd-tmpfiles) reads, in the order it reads them: every `suffix` name from `dirs`
    (highest priority first), one per name (the first directory's), sorted by name. `listings`: dir -> names;
    `masked`: paths that are empty or link to /dev/null."""
    chosen: dict[str, str] = {}
    hidden: dict[str, list[str]] = {}
    for directory in dirs:
        for name in listings.get(directory, ()):
            if not name.endswith(suffix):
                continue
            path = f"{directory}/{name}"
            if name in chosen:
                hidden[name].append(path)
            else:
                chosen[name] = path
                hidden[name] = []
    return [RulesFile(name, chosen[name], tuple(hidden[name]), chosen[name] in masked) for name in sorted(chosen)]


def udev_order(listings: Mapping[str, Sequence[str]], masked: Sequence[str] = ()) -> list[RulesFile]:
    return dropin_order(listings, UDEV_RULES_DIRS, ".rules", masked)


# --- sysfsutils, systemd-tmpfiles, the kernel command line -------------------------------------------------

# A pattern compiled at first use (re keeps it): most runs never need it.
_SYS_BLOCK = r"/?(?:sys/)?(?:class/)?block/([^/\s]+)/(queue/[\w/]+|bdi/read_ahead_kb)"


def parse_sysfs_conf(path: str, text: str) -> list[Assignment]:
    """sysfsutils: ``block/sda/queue/scheduler = mq-deadline`` (paths relative to /sys); mode/owner lines skipped."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if not key or key.split()[0] in ("mode", "owner"):
            continue
        m = re.fullmatch(_SYS_BLOCK, key)
        name = queue_attribute(m.group(2)) if m else None
        if m and name:
            out.append(Assignment("sysfs.conf", name, value, path, number, Target((m.group(1),)), BOOT,
                                  "sysfsutils writes it once at boot"))
    return out


def parse_tmpfiles(path: str, text: str) -> list[Assignment]:
    """systemd-tmpfiles ``w``/``w+`` lines whose path is a block queue attribute: ``w /sys/block/sda/queue/x - - - - v``."""
    out: list[Assignment] = []
    if not _may_write(text) and not any(c in text for c in "\\'\""):
        return out  # the line test below, for the whole text at once: no line passes it
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not _may_write(line) and not any(c in line for c in "\\'\""):
            continue  # no attribute named, nor one quoting or a backslash could spell: shlex need not split it
        if line[0] not in "w'\"\\":
            continue  # its type is not w or w+, nor one a quote or a backslash could spell (the first field's first letter)
        import shlex  # here, not at the top: only a line that may write an attribute is split

        try:
            fields = shlex.split(line)
        except ValueError:
            continue
        if len(fields) < 7 or fields[0].rstrip("!-=~^") not in ("w", "w+"):
            continue
        m = re.fullmatch(_SYS_BLOCK, fields[1])
        name = queue_attribute(m.group(2)) if m else None
        if m and name:
            out.append(Assignment("tmpfiles", name, " ".join(fields[6:]), path, number, Target((m.group(1),)), BOOT,
                                  "systemd-tmpfiles-setup writes it once at boot"))
    return out


def parse_cmdline(path: str, text: str) -> list[Assignment]:
    """``elevator=`` on the kernel command line: ignored by blk-mq kernels (every kernel since 5.0)."""
    return [Assignment("cmdline", "scheduler", word.split("=", 1)[1], path, 0, Target(), BOOT,
                       "ignored since Linux 5.0 (blk-mq has no elevator= parameter): it sets nothing on this kernel")
            for word in text.split() if word.startswith("elevator=")]
