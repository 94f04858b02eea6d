"""A profile's match keys as udev rules: the facts discovery reads, in its order, as udev sees them.

udev compares strings with fnmatch(3) globs, never numbers: a size range becomes
a short list of digit-class globs joined with ``|``; a model glob is rewritten
for ID_MODEL's escaping; a WWN glob for the sysfs ``naa.`` spelling.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

# Where discovery reads each glob-matched fact, in its order: the first source with a value wins.
# A transform says how the glob must be rewritten for that source (see _fact_rules).
FACT_SOURCES: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    "model": (("ENV", "ID_MODEL_ENC", "id_model"), ("ATTR", "device/model", None), ("ENV", "ID_MODEL", None)),
    "vendor": (("ENV", "ID_VENDOR", None), ("ATTR", "device/vendor", None)),
    # ID_SCSI_SERIAL first: scsi_id puts a SCSI disk's NAA id (its WWN) in ID_SERIAL_SHORT when it has one.
    "serial": (("ENV", "ID_SCSI_SERIAL", None), ("ENV", "ID_SERIAL_SHORT", None), ("ATTR", "device/serial", None),
               ("ATTR", "serial", None)),
    "wwn": (("ENV", "ID_WWN", None), ("ATTR", "wwid", "naa"), ("ATTR", "device/wwid", "naa")),
    "bus": (("ENV", "ID_BUS", None), ("ENV", "TUNECTL_BUS", None)),
}
# Characters udev keeps in ID_MODEL; it writes '_' for blanks (a run of them) and for anything else.
_UDEV_SAFE = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#+-.:=@_")
MATCH_KEY_ORDER = ("class", "dm_type", "kernel", "bus", "model", "vendor", "serial", "wwn", "rotational", "removable",
                   "size")


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


def int_globs(lo: int | None, hi: int | None) -> list[str]:
    """Globs matching exactly the decimal text of the integers lo..hi (None: unbounded), negative ones too.

    A setting's range as udev must test it (sysfs prints -1 for some defaults: wbt_lat_usec, io_poll_delay).
    """
    out: list[str] = []
    if lo is None or lo < 0:
        top = -1 if hi is None else min(hi, -1)  # the negative part: -top .. -lo, written with a leading '-'
        out += ["-" + g for g in range_globs(-top, None if lo is None else -lo)]
    if hi is None or hi >= 0:
        out += range_globs(max(lo or 0, 0), hi)
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


def env_name(name: str) -> str:
    return "TUNECTL_" + name.upper().replace("-", "_").replace("/", "_")


class RuleWriter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}".rstrip())

    def rule(self, *parts: str) -> None:
        self.lines.append(", ".join(parts))

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")


def quote(value: Any) -> str:
    return f'"{value}"'


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


def id_model_glob(glob: str) -> tuple[str, bool]:
    """The glob for ID_MODEL when discovery reads the decoded ID_MODEL_ENC; exact or not."""
    parts = _glob_parts(glob)
    exact = all(p == "*" or (len(p) == 1 and p in _UDEV_SAFE and p != "_") for p in parts)
    return "".join(p if len(p) > 1 or p in "*?" or p in _UDEV_SAFE else "_" for p in parts), exact


def naa_glob(glob: str) -> tuple[str | None, bool]:
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


def _fact_rules(w: RuleWriter, key: str, globs: list[str], skip: str, label: str, inexact: list[str]) -> None:
    """Match the globs on the first source of `key` that has a value (discovery's order); none: no match."""
    sources = FACT_SOURCES[key]
    for i, (kind, name, _) in enumerate(sources):
        w.rule(f'{kind}{{{name}}}=="?*"', f'GOTO="{label}_{i}"')
    w.rule(f'GOTO="{skip}"')
    for i, (kind, name, transform) in enumerate(sources):
        w.rule(f'LABEL="{label}_{i}"')
        if transform == "id_model":
            rewritten = [id_model_glob(g) for g in globs]
            if not all(exact for _, exact in rewritten):
                inexact.append("udev has the model only hex-escaped (ID_MODEL_ENC) or with '_' for blanks and other "
                               "characters (ID_MODEL); the rule matches ID_MODEL, which differs from tunectl's decoded model "
                               "when the glob has blanks, '_', '?', [...] or characters outside A-Z a-z 0-9 # + - . : = @")
            w.rule(f"ENV{{ID_MODEL}}!={quote('|'.join(g for g, _ in rewritten))}", f'GOTO="{skip}"')
        elif transform == "naa":
            naa = [naa_glob(g) for g in globs]
            if not all(exact for _, exact in naa):
                inexact.append("a sysfs wwid naa.* is normalised to 0x...; only a glob starting with a literal 0x and "
                               "without [...] is rewritten exactly for it")
            patterns = [g for g, _ in naa if g is not None]
            if patterns:
                w.rule(f'{kind}{{{name}}}=="naa.*"', f"{kind}{{{name}}}!={quote('|'.join(patterns))}", f'GOTO="{skip}"')
            else:
                w.rule(f'{kind}{{{name}}}=="naa.*"', f'GOTO="{skip}"')
            w.rule(f'{kind}{{{name}}}!="naa.*"', f"{kind}{{{name}}}!={quote('|'.join(globs))}", f'GOTO="{skip}"')
        else:
            w.rule(f"{kind}{{{name}}}!={quote('|'.join(globs))}", f'GOTO="{skip}"')
        if i < len(sources) - 1:
            w.rule(f'GOTO="{label}_ok"')
    w.rule(f'LABEL="{label}_ok"')


def match_rules(w: RuleWriter, match: dict, skip: str, label: str, notes: list[str], where: str) -> bool:
    """Rules that jump to `skip` unless every key holds. False if the entry can never match."""
    for key in MATCH_KEY_ORDER:
        if key not in match:
            continue
        want = match[key]
        if key == "class":
            w.rule(f'ENV{{{env_name("class")}}}!={quote("|".join(want))}', f'GOTO="{skip}"')
        elif key == "dm_type":
            w.rule(f'ENV{{{env_name("dm_type")}}}!={quote("|".join(want))}', f'GOTO="{skip}"')
        elif key == "kernel":
            w.rule(f"KERNEL!={quote(want[0])}", f'GOTO="{skip}"')
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
                w.rule(f"ATTR{{size}}!={quote('|'.join(globs))}", f'GOTO="{skip}"')
    return True


def describe_match(match: dict) -> str:
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
