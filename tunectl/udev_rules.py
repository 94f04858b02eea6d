"""udev rules from a profile: `render` (pure: same profile, same bytes), `lint`, and the class mapping.

The rules reproduce `tunectl.plan` inside udev, in three stages per event:

1. facts: the class (in `classify()` order), dm subtype, bus, whether the
   device has an I/O scheduler at all;
2. layers: each class block and each `devices` entry that matches sets
   ``TUNECTL_*`` properties; a later layer overwrites an earlier one, exactly
   as `plan.Wanted.layer` does, and a scheduler preference list is resolved
   against what the device offers when its layer is reached;
3. writes, in `attributes.write_order` like `apply`: the scheduler (only when
   it is not already active), nr_requests, the knobs of the scheduler active
   afterwards, the other queue attributes, read_ahead_kb last.

Nothing from a profile reaches a rule unchecked: scheduler names, knobs and
queue attributes come from the allow-list in `tunectl.attributes`, numbers are
range-checked, and match globs are limited to a grammar on which udev's
fnmatch(3) and Python's `fnmatchcase` agree (no ``|``, quotes, ``%``, ``$``,
backslashes, commas or control characters). The only substitution in the
output is ``$kernel`` in the one RUN a `below:` block needs.

udev 252 behaviours the rules are built around (checked on a real udevd):
a match on an ATTR that does not exist fails for ``!=`` as well as ``==``, so
absent attributes are tested with TEST first; an ENV that is unset reads as
"";  properties do not survive from one event to the next; a sysfs value read
after udev wrote it in the same event is the stale cached one; writing the
already-active scheduler still freezes the queue (~15 ms).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tunectl.attributes import IOSCHED, LIMIT_ATTRS, QUEUE, SCHEDULERS, schedulers_with_knob, write_order
from tunectl.device import _DM_UUID_PREFIXES, CLASSES, DM_TYPES, OPT_IN_CLASSES
from tunectl.discover import _BUS_BY_PATH
from tunectl.errors import UsageError
from tunectl.profile import Profile

RULES_FILE = "65-tunectl.rules"  # after 60-persistent-storage*.rules: ID_* and DM_* exist by then
FORMAT_VERSION = 1
END = "tunectl_end"

# Built-in classes as udev matches, in tunectl.device.classify order (first match wins).
# `ssd` is what is left: not rotational (an unreadable flag counts as not rotational).
CLASS_MATCH: tuple[tuple[str, str | None], ...] = (
    ("dm", 'KERNEL=="dm-*"'),
    ("md", 'KERNEL=="md*"'),
    ("loop", 'KERNEL=="loop*"'),
    ("zram", 'KERNEL=="zram*"'),
    ("nvme", 'KERNEL=="nvme*n*"'),
    ("mmc", 'KERNEL=="mmcblk*"'),
    ("virtio", 'KERNEL=="vd*|xvd*"'),
    ("rotational", 'ATTR{queue/rotational}=="1"'),
    ("ssd", None),
)

# Where discovery reads each glob-matched fact, in its order: the first source with a value wins.
# A transform says how the glob must be rewritten for that source (see _fact_rules).
FACT_SOURCES: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    "model": (("ENV", "ID_MODEL_ENC", "id_model"), ("ATTR", "device/model", None), ("ENV", "ID_MODEL", None)),
    "vendor": (("ENV", "ID_VENDOR", None), ("ATTR", "device/vendor", None)),
    "serial": (("ENV", "ID_SERIAL_SHORT", None), ("ATTR", "device/serial", None), ("ATTR", "serial", None)),
    "wwn": (("ENV", "ID_WWN", None), ("ATTR", "wwid", "naa"), ("ATTR", "device/wwid", "naa")),
    "bus": (("ENV", "ID_BUS", None), ("ENV", "TUNECTL_BUS", None)),
}
# Characters udev keeps in ID_MODEL; it writes '_' for blanks (a run of them) and for anything else.
_UDEV_SAFE = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#+-.:=@_")
MATCH_KEY_ORDER = ("class", "dm_type", "kernel", "bus", "model", "vendor", "serial", "wwn", "rotational", "removable",
                   "size")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@:-]*$")
_GLOB_LITERAL = frozenset(chr(c) for c in range(0x20, 0x7F)) - set('"\\%$,|`[]*?')
_BRACKET_ITEM = frozenset(_GLOB_LITERAL) - set("-!^ ")


class RenderError(UsageError):
    """A profile value that cannot be put into a udev rule safely or exactly."""


@dataclass(frozen=True)
class Rendered:
    text: str
    digest: str
    notes: list[str] = field(default_factory=list)
    runs_tunectl: bool = False


# --- validation ---------------------------------------------------------------------------------------------


def check_glob(glob: Any, where: str) -> str:
    """A profile glob udev can match exactly as tunectl does, or RenderError.

    Accepted: printable ASCII literals, ``*``, ``?`` and bracket sets like
    ``[0-9]`` / ``[!a-c]``. Rejected: ``|`` (udev alternation), quotes,
    ``%``/``$`` (udev substitutions), backslashes, commas, control characters,
    ``[^...]`` and ``[:class:]`` (fnmatch(3) and Python disagree on them),
    and leading/trailing blanks (discovery strips values; udev does not).
    """
    if not isinstance(glob, str) or not glob:
        raise RenderError(f"{where}: expected a non-empty glob, got {glob!r}")
    if glob != glob.strip():
        raise RenderError(f"{where}: {glob!r} starts or ends with blanks, which udev and tunectl compare differently",
                          hint="remove the blanks; tunectl strips them from the device's values")
    i = 0
    while i < len(glob):
        c = glob[i]
        if c in "*?":
            i += 1
        elif c == "[":
            end = glob.find("]", i + 1)
            body = glob[i + 1:end] if end > 0 else ""
            if end < 0 or not _bracket_ok(body):
                raise RenderError(f"{where}: {glob!r}: bracket expression at column {i + 1} is not one udev and tunectl "
                                  "read alike", hint="use simple sets such as [0-9], [a-f] or [!0-9]")
            i = end + 1
        elif c in _GLOB_LITERAL:
            i += 1
        else:
            raise RenderError(f"{where}: {glob!r}: character {c!r} cannot be put into a udev rule",
                              hint="globs may use letters, digits, punctuation without \" \\ % $ , | ` and *, ?, [...]")
    return glob


def _bracket_ok(body: str) -> bool:
    if body.startswith("!"):
        body = body[1:]
    if not body:
        return False
    i = 0
    while i < len(body):
        if body[i] not in _BRACKET_ITEM:
            return False
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i + 2] not in _BRACKET_ITEM or body[i] > body[i + 2]:
                return False
            i += 3
        else:
            i += 1
    return True


def _check_int(value: Any, lo: int | None, hi: int | None, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RenderError(f"{where}: expected an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise RenderError(f"{where}: {value} is out of range {lo}..{hi}")
    return value


def _check_settings(settings: Any, where: str) -> dict:
    """The tunable part of a class/devices/below block, re-checked against the allow-list."""
    if not isinstance(settings, dict):
        raise RenderError(f"{where}: expected a mapping, got {type(settings).__name__}")
    out: dict = {}
    if "scheduler" in settings:
        prefs = settings["scheduler"]
        prefs = [prefs] if isinstance(prefs, str) else prefs
        if not isinstance(prefs, list) or not prefs or any(p not in SCHEDULERS for p in prefs):
            raise RenderError(f"{where}.scheduler: {settings['scheduler']!r} is not a list of {', '.join(SCHEDULERS)}")
        out["scheduler"] = list(dict.fromkeys(prefs))
    knobs = settings.get("iosched") or {}
    if not isinstance(knobs, dict):
        raise RenderError(f"{where}.iosched: expected a mapping")
    out["iosched"] = {}
    for knob in sorted(knobs):
        owners = schedulers_with_knob(knob) if isinstance(knob, str) else []
        if not owners:
            raise RenderError(f"{where}.iosched: unknown knob {knob!r}")
        specs = [IOSCHED[s][knob] for s in owners]
        value = knobs[knob]
        if not any(_in_range(value, a.minimum, a.maximum) for a in specs):
            _check_int(value, specs[0].minimum, specs[0].maximum, f"{where}.iosched.{knob}")
        out["iosched"][knob] = value
    queue = {}
    if "read_ahead_kb" in settings:
        spec = QUEUE["read_ahead_kb"]
        queue["read_ahead_kb"] = _check_int(settings["read_ahead_kb"], spec.minimum, spec.maximum, f"{where}.read_ahead_kb")
    q = settings.get("queue") or {}
    if not isinstance(q, dict):
        raise RenderError(f"{where}.queue: expected a mapping")
    for attr in sorted(q):
        spec = QUEUE.get(attr) if isinstance(attr, str) else None
        if spec is None or attr == "read_ahead_kb":
            raise RenderError(f"{where}.queue: {attr!r} is not an attribute tunectl may write")
        value = q[attr]
        if spec.is_int:
            _check_int(value, spec.minimum, spec.maximum, f"{where}.queue.{attr}")
        elif value not in (spec.choices or ()):
            raise RenderError(f"{where}.queue.{attr}: {value!r} is not one of {', '.join(spec.choices or ())}")
        queue[attr] = value
    out["queue"] = queue
    if settings.get("below"):
        out["below"] = True  # its contents are applied by the tunectl run, which validates them itself
    return out


def _in_range(value: Any, lo: int | None, hi: int | None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (lo is None or value >= lo) and (hi is None or value <= hi)


def _check_match(match: Any, where: str) -> dict:
    if not isinstance(match, dict) or not match:
        raise RenderError(f"{where}: expected a non-empty mapping of match keys")
    out: dict = {}
    for key, want in match.items():
        path = f"{where}.{key}"
        if key in ("kernel", "model", "vendor", "serial", "wwn"):
            out[key] = [check_glob(want, path)]
        elif key == "bus":
            wants = [want] if isinstance(want, str) else want
            if not isinstance(wants, list) or not wants:
                raise RenderError(f"{path}: expected a glob or a list of globs")
            out[key] = sorted({check_glob(w, f"{path}[{i}]") for i, w in enumerate(wants)})
        elif key in ("class", "dm_type"):
            allowed = CLASSES if key == "class" else DM_TYPES
            wants = [want] if isinstance(want, str) else want
            if not isinstance(wants, list) or not wants or any(w not in allowed for w in wants):
                raise RenderError(f"{path}: {want!r} is not a list of {', '.join(allowed)}")
            out[key] = [c for c in allowed if c in wants]
        elif key in ("rotational", "removable"):
            if not isinstance(want, bool):
                raise RenderError(f"{path}: expected true or false, got {want!r}")
            out[key] = want
        elif key == "size":
            if not isinstance(want, dict) or not want or set(want) - {"min", "max"}:
                raise RenderError(f"{path}: expected {{min: ..., max: ...}} in bytes")
            out[key] = {k: _check_int(v, 0, None, f"{path}.{k}") for k, v in sorted(want.items())}
        else:
            raise RenderError(f"{path}: unknown match key {key!r}")
    return out


def _check_path(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    if not isinstance(path, str) or not _PATH_RE.match(path):
        raise RenderError(f"{what} {path!r} must be an absolute path of letters, digits and ._/+@:- only",
                          hint="udev splits RUN on blanks and substitutes % and $; move the file to a plain path")
    return path


# --- size ranges as digit globs -----------------------------------------------------------------------------


def range_globs(lo: int, hi: int | None) -> list[str]:
    """Globs matching exactly the decimal integers lo..hi (hi None: no upper bound), as udev sees ATTR{size}."""
    if lo < 0 or (hi is not None and hi < lo):
        return []
    out: list[str] = []
    width = len(str(lo))
    top = len(str(hi)) if hi is not None else width
    for n in range(width, top + 1):
        first = 10 ** (n - 1) if n > 1 else 0
        last = 10**n - 1
        a, b = max(lo, first), last if hi is None else min(hi, last)
        if a <= b:
            out.extend(_same_width(str(a), str(b)))
    if hi is None:
        out.append("[1-9]" + "[0-9]" * top + "*")
    return out


def _digits(a: str, b: str) -> str:
    return a if a == b else f"[{a}-{b}]"


def _same_width(lo: str, hi: str) -> list[str]:
    if lo == hi:
        return [lo]
    if len(lo) == 1:
        return [_digits(lo, hi)]
    if lo[0] == hi[0]:
        return [lo[0] + p for p in _same_width(lo[1:], hi[1:])]
    rest = len(lo) - 1
    out = []
    start, end = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * rest:
        out += [lo[0] + p for p in _same_width(lo[1:], "9" * rest)]
        start += 1
    tail = []
    if hi[1:] != "9" * rest:
        tail = [hi[0] + p for p in _same_width("0" * rest, hi[1:])]
        end -= 1
    if start <= end:
        out.append(_digits(str(start), str(end)) + "[0-9]" * rest)
    return out + tail


# --- rendering ----------------------------------------------------------------------------------------------


def _env(name: str) -> str:
    return "TUNECTL_" + name.upper().replace("-", "_").replace("/", "_")


def _sched_glob(name: str) -> str:
    # The offered list, e.g. "none [mq-deadline] kyber bfq": no scheduler name is part of another.
    return f"*{name}*"


def _active_glob(name: str) -> str:
    return f"*[[]{name}[]]*"


def _canonical(profile: Profile) -> dict:
    """The inputs that decide the rules, in a form independent of dict order (the digest covers this)."""
    classes = {}
    for cls in CLASSES:
        if cls in profile.classes:
            classes[cls] = _check_settings(profile.classes[cls] or {}, f"classes.{cls}")
            if classes[cls].get("below"):
                classes[cls]["below"] = _canonical_below(profile.classes[cls]["below"], f"classes.{cls}.below")
    unknown = sorted(set(profile.classes) - set(CLASSES), key=str)
    if unknown:
        raise RenderError(f"classes: unknown class {unknown[0]!r}")
    devices = []
    for i, entry in enumerate(profile.devices):
        if not isinstance(entry, dict):
            raise RenderError(f"devices[{i}]: expected a mapping")
        item = _check_settings(entry, f"devices[{i}]")
        if item.get("below"):
            item["below"] = _canonical_below(entry["below"], f"devices[{i}].below")
        item["match"] = _check_match(entry.get("match"), f"devices[{i}].match")
        devices.append(item)
    return {"classes": classes, "devices": devices}


def _canonical_below(below: Any, where: str) -> dict:
    settings = _check_settings(below, where)
    settings.pop("below", None)
    return settings


def digest_of(canonical: dict) -> str:
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _named_classes(canonical: dict) -> set[str]:
    """Classes the profile can reach; a devices entry without a class match may tune loop and zram too (as plan does)."""
    named = set(canonical["classes"])
    for entry in canonical["devices"]:
        named.update(entry["match"].get("class", OPT_IN_CLASSES))
    return named


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}".rstrip())

    def rule(self, *parts: str) -> None:
        self.lines.append(", ".join(parts))

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")


def _q(value: Any) -> str:
    return f'"{value}"'


def _layer_rules(w: _Writer, settings: dict, used: dict[str, set]) -> None:
    """The assignments of one layer, for a device already known to match it."""
    assigns = []
    prefs = settings.get("scheduler")
    if prefs:
        # This layer's list replaces an earlier layer's choice; nothing offered -> no switch, as in plan.
        assigns += [f'ENV{{{_env("scheduler")}}}=""', f'ENV{{{_env("scheduler_wanted")}}}={_q(" ".join(prefs))}']
    for knob, value in settings["iosched"].items():
        assigns.append(f"ENV{{{_env('iosched_' + knob)}}}={_q(value)}")
        used.setdefault(f"iosched/{knob}", set()).add(value)
    for attr, value in settings["queue"].items():
        assigns.append(f"ENV{{{_env('queue_' + attr)}}}={_q(value)}")
        used.setdefault(attr, set()).add(value)
    if settings.get("below"):
        assigns.append(f'ENV{{{_env("below")}}}="1"')
    if assigns:
        w.rule(*assigns)
    if prefs:
        if len(prefs) > 1:
            w.comment(f"preference {', '.join(prefs)}: the last rule that fires wins, so the first one offered is chosen")
        for name in reversed(prefs):
            w.rule(f"ATTR{{queue/scheduler}}=={_q(_sched_glob(name))}", f'ENV{{{_env("scheduler")}}}={_q(name)}')
            used.setdefault("scheduler", set()).add(name)


def _glob_parts(glob: str) -> list[str]:
    """A checked glob split into literal characters, wildcards and whole bracket sets."""
    parts, i = [], 0
    while i < len(glob):
        if glob[i] == "[":
            end = glob.index("]", i + 1)
            parts.append(glob[i:end + 1])
            i = end + 1
        else:
            parts.append(glob[i])
            i += 1
    return parts


def _id_model_glob(glob: str) -> tuple[str, bool]:
    """The glob for ID_MODEL when discovery reads the decoded ID_MODEL_ENC; exact or not."""
    parts = _glob_parts(glob)
    exact = all(p == "*" or (len(p) == 1 and p in _UDEV_SAFE and p != "_") for p in parts)
    return "".join(p if len(p) > 1 or p in "*?" or p in _UDEV_SAFE else "_" for p in parts), exact


def _naa_glob(glob: str) -> tuple[str | None, bool]:
    """The glob for a raw sysfs ``naa.5000C500...`` wwid that discovery normalises to ``0x5000c500...``.

    None: the glob can match no normalised naa value.
    """
    if glob[0] not in "0*?[":
        return None, True
    exact = glob.startswith("0x")
    parts = _glob_parts(glob[2:] if exact else glob)
    out = ["naa."] if exact else []
    for p in parts:
        if len(p) > 1:
            exact = False
            out.append(p)
        elif "A" <= p <= "Z":
            if exact:
                return None, True  # the normalised value is lower case
            out.append(p)
        elif "a" <= p <= "z":
            out.append(f"[{p}{p.upper()}]")
        else:
            out.append(p)
    return "".join(out), exact


def _fact_rules(w: _Writer, key: str, globs: list[str], skip: str, label: str, inexact: list[str]) -> None:
    """Match the globs on the first source of `key` that has a value (discovery's order); none: no match."""
    sources = FACT_SOURCES[key]
    for i, (kind, name, _) in enumerate(sources):
        w.rule(f'{kind}{{{name}}}=="?*"', f'GOTO="{label}_{i}"')
    w.rule(f'GOTO="{skip}"')
    for i, (kind, name, transform) in enumerate(sources):
        w.rule(f'LABEL="{label}_{i}"')
        if transform == "id_model":
            rewritten = [_id_model_glob(g) for g in globs]
            if not all(exact for _, exact in rewritten):
                inexact.append("udev has the model only hex-escaped (ID_MODEL_ENC) or with '_' for blanks and other "
                               "characters (ID_MODEL); the rule matches ID_MODEL, which differs from tunectl's decoded model "
                               "when the glob has blanks, '_', '?', [...] or characters outside A-Z a-z 0-9 # + - . : = @")
            w.rule(f"ENV{{ID_MODEL}}!={_q('|'.join(g for g, _ in rewritten))}", f'GOTO="{skip}"')
        elif transform == "naa":
            naa = [_naa_glob(g) for g in globs]
            if not all(exact for _, exact in naa):
                inexact.append("a sysfs wwid naa.* is normalised to 0x...; only a glob starting with a literal 0x and "
                               "without [...] is rewritten exactly for it")
            patterns = [g for g, _ in naa if g is not None]
            if patterns:
                w.rule(f'{kind}{{{name}}}=="naa.*"', f"{kind}{{{name}}}!={_q('|'.join(patterns))}", f'GOTO="{skip}"')
            else:
                w.rule(f'{kind}{{{name}}}=="naa.*"', f'GOTO="{skip}"')
            w.rule(f'{kind}{{{name}}}!="naa.*"', f"{kind}{{{name}}}!={_q('|'.join(globs))}", f'GOTO="{skip}"')
        else:
            w.rule(f"{kind}{{{name}}}!={_q('|'.join(globs))}", f'GOTO="{skip}"')
        if i < len(sources) - 1:
            w.rule(f'GOTO="{label}_ok"')
    w.rule(f'LABEL="{label}_ok"')


def _match_rules(w: _Writer, match: dict, skip: str, label: str, notes: list[str], where: str) -> bool:
    """Rules that jump to `skip` unless every key holds. False if the entry can never match."""
    for key in MATCH_KEY_ORDER:
        if key not in match:
            continue
        want = match[key]
        if key == "class":
            w.rule(f'ENV{{{_env("class")}}}!={_q("|".join(want))}', f'GOTO="{skip}"')
        elif key == "dm_type":
            w.rule(f'ENV{{{_env("dm_type")}}}!={_q("|".join(want))}', f'GOTO="{skip}"')
        elif key == "kernel":
            w.rule(f"KERNEL!={_q(want[0])}", f'GOTO="{skip}"')
        elif key in FACT_SOURCES:
            inexact: list[str] = []
            _fact_rules(w, key, want, skip, f"{label}_{key}", inexact)
            for reason in dict.fromkeys(inexact):
                w.comment(f"approximate: {reason}")
                notes.append(f"{where}.{key}: approximate in udev: {reason}")
        elif key in ("rotational", "removable"):
            attr = "queue/rotational" if key == "rotational" else "removable"
            if want:
                # An absent attribute reads as "not set" to tunectl, but fails any ATTR match in udev.
                w.rule(f'TEST!="{attr}"', f'GOTO="{skip}"')
                w.rule(f'ATTR{{{attr}}}!="1"', f'GOTO="{skip}"')
            else:
                w.rule(f'ATTR{{{attr}}}=="1"', f'GOTO="{skip}"')
        elif key == "size":
            lo = -(-want.get("min", 0) // 512)
            hi = want["max"] // 512 if "max" in want else None
            globs = range_globs(lo, hi)
            if not globs:
                return False
            upper = "any" if hi is None else hi
            bytes_ = f"{want.get('min', 0)}..{want.get('max', 'any')}"
            w.comment(f"size {bytes_} bytes = ATTR{{size}} {lo}..{upper} sectors of 512 bytes")
            if lo > 0:
                w.rule('TEST!="size"', f'GOTO="{skip}"')
            if not (lo == 0 and hi is None):
                w.rule(f"ATTR{{size}}!={_q('|'.join(globs))}", f'GOTO="{skip}"')
    return True


def _describe_match(match: dict) -> str:
    parts = []
    for key in MATCH_KEY_ORDER:
        if key in match:
            want = match[key]
            if isinstance(want, list):
                want = ",".join(want)
            elif isinstance(want, dict):
                want = "..".join(str(want.get(k, "")) for k in ("min", "max"))
            parts.append(f"{key}={str(want).lower() if isinstance(want, bool) else want}")
    return " ".join(parts)


def render_rules(profile: Profile, tunectl_path: str | None, profile_path: str | None = None,
                 only_kernels: tuple[str, ...] | list[str] = (), only_loop_backing: str | None = None) -> Rendered:
    """The rules file for `profile`, its digest and the notes a user should read.

    `tunectl_path` and `profile_path` (default: the profile's own file) are
    needed only when a `below:` block makes a stacked device's event run
    tunectl. `only_kernels` / `only_loop_backing` restrict the rules to some
    devices (tests, staged roll-outs); a profile never sets them.
    """
    name = profile.name
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RenderError(f"profile name {name!r} cannot be put into a rules file",
                          hint="names are letters, digits, '.', '_' and '-'")
    canonical = _canonical(profile)
    scope = [check_glob(k, "only_kernels") for k in only_kernels]
    backing = check_glob(only_loop_backing, "only_loop_backing") if only_loop_backing else None
    if backing and not backing.startswith("/"):
        raise RenderError(f"only_loop_backing {backing!r} must be an absolute path glob")
    runs = bool(any(s.get("below") for s in canonical["classes"].values()) or any(e.get("below") for e in canonical["devices"]))
    notes: list[str] = []
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
                     f"({run_cmd}); a later event on a disk below re-applies only that disk's own settings")
    digest = digest_of(canonical)
    named = _named_classes(canonical)
    w = _Writer()
    w.comment(f"{RULES_FILE}: block-device tuning for tunectl profile {name!r}, generated by `tunectl udev render`.")
    w.comment(f"digest {digest}, rules format {FORMAT_VERSION}.")
    w.comment(f"Do not edit: change the profile, then run `tunectl udev install -p {name}`.")
    w.comment("Stages: facts (class, bus), profile layers setting TUNECTL_* properties (later layers win, as in")
    w.comment("`tunectl apply`), then the writes in apply's order: scheduler, nr_requests, knobs, queue, read-ahead.")
    w.blank()
    w.rule('SUBSYSTEM!="block"', f'GOTO="{END}"')
    w.rule('ACTION!="add|change"', f'GOTO="{END}"')
    w.comment("whole disks only: partitions share the disk's queue/ (and ATTRS{} would reach the parent disk)")
    w.rule('ENV{DEVTYPE}!="disk"', f'GOTO="{END}"')
    w.rule('TEST!="queue"', f'GOTO="{END}"')
    if scope or backing:
        w.comment("scope set by the caller, not by the profile: only these devices")
        if scope:
            w.rule(f"KERNEL!={_q('|'.join(scope))}", f'GOTO="{END}"')
        if backing:
            w.rule('KERNEL!="loop*"', f'GOTO="{END}"')
            w.rule('TEST!="loop/backing_file"', f'GOTO="{END}"')
            w.rule(f"ATTR{{loop/backing_file}}!={_q(backing)}", f'GOTO="{END}"')
    w.blank()
    w.comment("class, in the order of tunectl's classify(): the first match wins")
    for cls, key in CLASS_MATCH:
        if key is None:
            w.rule(f'ENV{{{_env("class")}}}={_q(cls)}')
        else:
            w.rule(key, f'ENV{{{_env("class")}}}={_q(cls)}', 'GOTO="tunectl_class_done"')
    w.rule('LABEL="tunectl_class_done"')
    skipped = [c for c in OPT_IN_CLASSES if c not in named]
    if skipped:
        w.comment(f"{' and '.join(skipped)} devices are tuned only when the profile names their class")
        w.rule(f'ENV{{{_env("class")}}}=={_q("|".join(skipped))}', f'GOTO="{END}"')
    if "loop" in named:
        w.comment("an unattached loop device has nothing to tune")
        w.rule(f'ENV{{{_env("class")}}}=="loop"', 'TEST!="loop/backing_file"', f'GOTO="{END}"')
    w.comment("dm: only once the table is live (change event, or coldplug of a device activated before),")
    w.comment("and never while device-mapper asks other rules to keep out (suspended, no table yet)")
    w.rule(f'ENV{{{_env("class")}}}=="dm"', 'ACTION=="add"', 'ENV{DM_UDEV_PRIMARY_SOURCE_FLAG}!="1"', f'GOTO="{END}"')
    w.rule(f'ENV{{{_env("class")}}}=="dm"', 'ENV{DM_UDEV_DISABLE_OTHER_RULES_FLAG}=="1"', f'GOTO="{END}"')
    if any("dm_type" in e["match"] for e in canonical["devices"]):
        for prefix, kind in _DM_UUID_PREFIXES:
            w.rule(f'ENV{{{_env("class")}}}=="dm"', f'ENV{{DM_UUID}}=="{prefix}*"', f'ENV{{{_env("dm_type")}}}={_q(kind)}')
    w.comment("md: not before the array runs (md sets its own read-ahead when it starts)")
    w.rule(f'ENV{{{_env("class")}}}=="md"', 'ATTR{md/array_state}=="|clear|inactive"', f'GOTO="{END}"')
    if any("bus" in e["match"] for e in canonical["devices"]):
        w.comment("bus when udev has no ID_BUS: from the device path, as tunectl's discovery does")
        w.rule('ENV{ID_BUS}=="?*"', 'GOTO="tunectl_bus_done"')
        for fragment, bus in _BUS_BY_PATH:
            w.rule(f'DEVPATH=="*{fragment}*"', f'ENV{{{_env("bus")}}}={_q(bus)}', 'GOTO="tunectl_bus_done"')
        w.rule('LABEL="tunectl_bus_done"')
    w.comment("bio-based devices (dm, md, zram) show \"none\" or no scheduler file: no scheduler, no knobs")
    w.rule('ATTR{queue/scheduler}!="none|[[]none[]]"', f'ENV{{{_env("has_scheduler")}}}="1"')

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
        w.rule(f'ENV{{{_env("class")}}}!={_q(cls)}', f'GOTO="{end}"')
        _layer_rules(w, settings, used)
        w.rule(f'LABEL="{end}"')
    for i, entry in enumerate(canonical["devices"]):
        w.blank()
        w.comment(f"devices[{i}]: {_describe_match(entry['match'])}")
        end = f"tunectl_dev{i}_end"
        if not (entry.get("scheduler") or entry["iosched"] or entry["queue"] or entry.get("below")):
            w.comment("nothing to set")
            continue
        body, entry_notes = _Writer(), []
        if not _match_rules(body, entry["match"], end, f"tunectl_dev{i}", entry_notes, f"devices[{i}].match"):
            w.comment("skipped: its size range holds no whole 512-byte sector count, so it matches no device")
            notes.append(f"devices[{i}] matches no device (empty size range); no rule was written for it")
            continue
        notes.extend(entry_notes)
        w.lines.extend(body.lines)
        _layer_rules(w, entry, used)
        w.rule(f'LABEL="{end}"')

    _write_stage(w, used)
    if runs:
        w.blank()
        w.comment("below: udev cannot write another device's attributes, so the event of a stacked device (one with")
        w.comment("slaves/) runs tunectl for that one stack: the device and the disks under it. It costs a process start")
        w.comment("per event of such a device; plain settings above never start a process.")
        w.rule(f'ENV{{{_env("below")}}}=="1"', 'TEST=="slaves/*/dev"', f"RUN+={_q(run_cmd)}")
    w.blank()
    w.rule(f'LABEL="{END}"')
    return Rendered("\n".join(w.lines) + "\n", digest, notes, runs)


def _write_stage(w: _Writer, used: dict[str, set]) -> None:
    schedulers = [s for s in SCHEDULERS if s in used.get("scheduler", ())]
    others = sorted((a for a in used if a != "scheduler"), key=write_order)
    knobs = [a for a in others if a.startswith("iosched/")]
    if not (schedulers or others):
        return
    w.blank()
    w.comment("writes, in tunectl's write order (attributes.write_order): the scheduler, nr_requests (a switch resets")
    w.comment("it), the knobs, other queue attributes, read_ahead_kb last (writing a queue limit recomputes it)")
    if schedulers or knobs:
        w.rule(f'ENV{{{_env("has_scheduler")}}}!="1"', 'GOTO="tunectl_scheduler_done"')
    if knobs:
        owners = [s for s in SCHEDULERS if any(s in schedulers_with_knob(k.split("/", 1)[1]) for k in knobs)]
        w.comment("knobs belong to the scheduler active after the switch: the chosen one, else the current one")
        for s in owners:
            if s in schedulers:
                w.rule(f'ENV{{{_env("scheduler")}}}=={_q(s)}', f'ENV{{{_env("iosched_target")}}}={_q(s)}')
            w.rule(f'ENV{{{_env("scheduler")}}}!="?*"', f"ATTR{{queue/scheduler}}=={_q(_active_glob(s))}",
                   f'ENV{{{_env("iosched_target")}}}={_q(s)}')
    if schedulers:
        w.comment("the scheduler first (its knobs exist only once it is active); skipped when already active,")
        w.comment("because even a same-name write freezes the queue")
        for s in schedulers:
            w.rule(f'ENV{{{_env("scheduler")}}}=={_q(s)}', f"ATTR{{queue/scheduler}}!={_q(_active_glob(s))}",
                   f"ATTR{{queue/scheduler}}={_q(s)}")
        w.comment("no preference offered: nothing written; recorded for `udevadm info` (tunectl verify reports it)")
        w.rule(f'ENV{{{_env("scheduler_wanted")}}}=="?*"', f'ENV{{{_env("scheduler")}}}!="?*"',
               f'ENV{{{_env("scheduler_unavailable")}}}="1"')
    if schedulers or knobs:
        w.rule('LABEL="tunectl_scheduler_done"')
    for attr in others:
        if attr.startswith("iosched/"):
            knob = attr.split("/", 1)[1]
            for s in schedulers_with_knob(knob):
                for value in sorted(used[attr], key=_value_order):
                    if _in_range(value, IOSCHED[s][knob].minimum, IOSCHED[s][knob].maximum):
                        w.rule(f'ENV{{{_env("iosched_target")}}}=={_q(s)}',
                               f"ENV{{{_env('iosched_' + knob)}}}=={_q(value)}", f"ATTR{{queue/{attr}}}={_q(value)}")
            continue
        if attr in LIMIT_ATTRS:
            w.comment(f"{attr} is a queue limit: writing it, even unchanged, makes the kernel recompute read_ahead_kb")
        for value in sorted(used[attr], key=_value_order):
            guard = [f"ATTR{{queue/{attr}}}!={_q(value)}"] if attr in LIMIT_ATTRS else []
            w.rule(f"ENV{{{_env('queue_' + attr)}}}=={_q(value)}", *guard, f"ATTR{{queue/{attr}}}={_q(value)}")


def _value_order(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def render(profile: Profile, tunectl_path: str | None, **kw: Any) -> str:
    """`render_rules(...).text`: the bytes `tunectl udev render` prints and `install` writes."""
    return render_rules(profile, tunectl_path, **kw).text


# --- lint ---------------------------------------------------------------------------------------------------

MATCH_OPS = frozenset({"==", "!="})
_ASSIGN = frozenset({"=", "+=", ":="})
# key -> (operators, attribute: "required" | "optional" | "none")
KNOWN_KEYS: dict[str, tuple[frozenset, str]] = {
    "ACTION": (MATCH_OPS, "none"), "DEVPATH": (MATCH_OPS, "none"), "KERNEL": (MATCH_OPS, "none"),
    "KERNELS": (MATCH_OPS, "none"), "SUBSYSTEM": (MATCH_OPS, "none"), "SUBSYSTEMS": (MATCH_OPS, "none"),
    "DRIVER": (MATCH_OPS, "none"), "DRIVERS": (MATCH_OPS, "none"), "TAGS": (MATCH_OPS, "none"),
    "RESULT": (MATCH_OPS, "none"), "PROGRAM": (MATCH_OPS, "none"),
    "ATTRS": (MATCH_OPS, "required"), "CONST": (MATCH_OPS, "required"), "TEST": (MATCH_OPS, "optional"),
    "ATTR": (MATCH_OPS | {"="}, "required"), "SYSCTL": (MATCH_OPS | {"="}, "required"),
    "ENV": (MATCH_OPS | {"=", "+="}, "required"), "TAG": (MATCH_OPS | _ASSIGN | {"-="}, "none"),
    "NAME": (MATCH_OPS | _ASSIGN, "none"), "SYMLINK": (MATCH_OPS | _ASSIGN | {"-="}, "none"),
    "IMPORT": (MATCH_OPS | _ASSIGN, "required"),
    "OWNER": (_ASSIGN, "none"), "GROUP": (_ASSIGN, "none"), "MODE": (_ASSIGN, "none"),
    "SECLABEL": (_ASSIGN, "required"), "RUN": (_ASSIGN, "optional"), "OPTIONS": (_ASSIGN, "none"),
    "LABEL": (frozenset({"="}), "none"), "GOTO": (frozenset({"="}), "none"),
}
_TOKEN = re.compile(r'\s*([A-Z_]+)(?:\{([^{}"]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*')


@dataclass(frozen=True)
class LintProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class _Token:
    key: str
    attr: str | None
    op: str
    value: str


def parse_rule(text: str) -> tuple[list[_Token], str | None]:
    """One rule line -> tokens, or the reason it cannot be parsed."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            return tokens, f"cannot parse at column {pos + 1}: {text[pos:pos + 30]!r}"
        tokens.append(_Token(m.group(1), m.group(2), m.group(3), m.group(4)))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                return tokens, f"missing ',' at column {pos + 1} (udev 252 silently accepts this)"
            pos += 1
            if not text[pos:].strip():
                return tokens, "trailing ','"
    if not tokens:
        return tokens, "empty rule"
    return tokens, None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(text.split("\n"), 1):
        if not buf:
            start = n
        if raw.endswith("\\"):
            buf += raw[:-1]
            continue
        out.append((start, buf + raw))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def lint(text: str) -> list[LintProblem]:
    """Problems in a rules text: syntax, known keys and operators, quoting, and tunectl's own invariants.

    udev 252 has no `udevadm verify` (new in systemd 254) and accepts some
    mistakes silently (a missing comma), so the rendered text is checked here.
    """
    problems: list[LintProblem] = []
    labels: dict[str, int] = {}
    gotos: list[tuple[int, str]] = []
    knob_write_at: int | None = None
    guards: set[str] = set()
    if text and not text.endswith("\n"):
        problems.append(LintProblem(text.count("\n") + 1, "file does not end with a newline"))
    for n, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if any(ord(c) < 0x20 and c != "\t" for c in line):
                problems.append(LintProblem(n, "control character in a comment"))
            continue
        if any(ord(c) < 0x20 or ord(c) > 0x7E for c in line):
            problems.append(LintProblem(n, "non-printable or non-ASCII character in a rule"))
        tokens, error = parse_rule(stripped)
        if error:
            problems.append(LintProblem(n, error))
            continue
        has_action = False
        for t in tokens:
            spec = KNOWN_KEYS.get(t.key)
            if spec is None:
                problems.append(LintProblem(n, f"unknown key {t.key}"))
                continue
            ops, attr_rule = spec
            if t.op not in ops:
                problems.append(LintProblem(n, f"operator {t.op} is not valid for {t.key}"))
            if attr_rule == "required" and not t.attr:
                problems.append(LintProblem(n, f"{t.key} needs an attribute, e.g. {t.key}{{name}}"))
            if attr_rule == "none" and t.attr is not None:
                problems.append(LintProblem(n, f"{t.key} takes no {{attribute}}"))
            problems.extend(_value_problems(n, t))
            if t.op not in MATCH_OPS:
                has_action = True
            if t.key == "ATTRS" and (t.attr or "").startswith("queue/"):
                problems.append(LintProblem(n, "ATTRS{queue/...} walks up to parent devices; use ATTR{} on the disk"))
            if t.key == "LABEL":
                if t.value in labels:
                    problems.append(LintProblem(n, f"LABEL {t.value!r} already defined at line {labels[t.value]}"))
                labels.setdefault(t.value, n)
            if t.key == "GOTO":
                gotos.append((n, t.value))
            if t.op in MATCH_OPS and (t.key in ("SUBSYSTEM", "ACTION") or (t.key == "ENV" and t.attr == "DEVTYPE")):
                guards.add(t.key if t.key != "ENV" else "DEVTYPE")
            if t.key == "ATTR" and t.op == "=":
                target = t.attr or ""
                if not guards >= {"SUBSYSTEM", "ACTION", "DEVTYPE"}:
                    problems.append(LintProblem(n, f"ATTR{{{target}}} is written before the SUBSYSTEM, ACTION and "
                                                   "ENV{DEVTYPE} guards"))
                if target == "queue/scheduler":
                    if knob_write_at is not None:
                        problems.append(LintProblem(n, f"scheduler written after an iosched knob (line {knob_write_at}); "
                                                       "the knob is lost when the scheduler switches"))
                elif target.startswith("queue/iosched/"):
                    knob_write_at = knob_write_at or n
        if not has_action:
            problems.append(LintProblem(n, "rule has only match keys and no effect"))
    for n, target in gotos:
        where = labels.get(target)
        if where is None:
            problems.append(LintProblem(n, f"GOTO {target!r} has no LABEL (udev ignores the rule)"))
        elif where < n:
            problems.append(LintProblem(n, f"GOTO {target!r} jumps backwards to line {where}; udev only jumps forward"))
    return sorted(problems, key=lambda p: (p.line, p.message))


def _value_problems(n: int, t: _Token) -> list[LintProblem]:
    out = []
    if "\\" in t.value:
        out.append(LintProblem(n, f"{t.key}: backslash in a value"))
    value = t.value
    if t.key == "RUN":
        value = value.replace("$kernel", "")
        if "'" in value:
            out.append(LintProblem(n, "RUN: quote in the command"))
    if "%" in value or "$" in value:
        out.append(LintProblem(n, f"{t.key}: substitution character (% or $) in a value"))
    if t.attr is not None and not re.fullmatch(r"[A-Za-z0-9_./*-]*", t.attr):
        out.append(LintProblem(n, f"{t.key}{{{t.attr}}}: unexpected characters in the attribute name"))
    if t.key == "ATTR" and t.attr and (t.attr.startswith("/") or ".." in t.attr.split("/")):
        out.append(LintProblem(n, f"ATTR{{{t.attr}}}: must be relative to the device, without .."))
    return out
