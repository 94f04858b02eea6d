"""The scope of a scoped apply as udev matches: one rule per stable identity, as discovery computes it.

Identities are `tunectl.devices.discover` strings (``wwn:``, ``serial:``,
``dm-uuid:``, ``md-uuid:``, ``loop:``, ``by-id:``, ``kernel:``). Each becomes the
udev key discovery read it from; a device that matches one sets
``TUNECTL_IN_SCOPE``, and every other device leaves the rules before the class
stage. udev compares with fnmatch(3) and splits alternatives on ``|``, so a
character that means something there is matched by ``?`` (any one character):
the rule is then a little wider than the identity, and a note says so.
"""

from __future__ import annotations

import re

from tunectl.attributes import side_effects
from tunectl.system.rulesfile import orig_name
from tunectl.udev.match import RuleWriter, quote

IN_SCOPE = "TUNECTL_IN_SCOPE"
_PLAIN = re.compile(r"[A-Za-z0-9 ._/+@:,=#~-]")
_LOOP_TAIL = re.compile(r"(?:@offset=([0-9]+))?(?:#(?:ino[0-9]+:)?(loop[0-9]+))?\Z")


def _literal(value: str, notes: list[str], identity: str) -> str:
    out = "".join(c if _PLAIN.match(c) else "?" for c in value)
    if out != value:
        notes.append(f"scope identity {identity!r} holds characters udev would read as a pattern; "
                     "its rule matches them as any character")
    return out


def identity_matches(identity: str, notes: list[str]) -> list[list[str]]:
    """The alternative udev matches (each a list of keys that must all hold) for one identity."""
    kind, _, value = identity.partition(":")
    v = _literal(value, notes, identity)
    if kind == "wwn":
        alternatives = [[f"ENV{{ID_WWN}}=={quote(v)}"]]
        if v.startswith("0x"):  # discovery spells sysfs' naa.5000... as 0x5000...
            naa = "naa." + v[2:]
            alternatives += [['TEST=="wwid"', f"ATTR{{wwid}}=={quote(naa)}"],
                             ['TEST=="device/wwid"', f"ATTR{{device/wwid}}=={quote(naa)}"]]
        return alternatives
    if kind == "serial":
        return [[f"ENV{{ID_SERIAL}}=={quote(v)}"]]
    if kind == "dm-uuid":
        return [[f"ENV{{DM_UUID}}=={quote(v)}"]]
    if kind == "md-uuid":
        return [[f"ENV{{MD_UUID}}=={quote(v)}"]]
    if kind == "loop":
        # loop:/img@offset=1048576 (a partition of an image), loop:/img#ino12:loop3 (two devices on one file)
        tail = _LOOP_TAIL.search(v)
        assert tail is not None  # every part of the pattern is optional: it always matches at the end
        keys = ['KERNEL=="loop*"', 'TEST=="loop/backing_file"', f"ATTR{{loop/backing_file}}=={quote(v[:tail.start()])}"]
        if tail.group(1):
            keys.append(f'ATTR{{loop/offset}}=="{tail.group(1)}"')
        if tail.group(2):
            keys.insert(0, f"KERNEL=={quote(tail.group(2))}")
        return [keys]
    if kind == "by-id":
        return [[f"SYMLINK=={quote('disk/by-id/' + v)}"]]
    if kind == "kernel":
        return [[f"KERNEL=={quote(v)}"]]
    notes.append(f"scope identity {identity!r} is of no kind tunectl knows; no device matches it")
    return []


def scope_rules(w: RuleWriter, identities: list[str], end: str, notes: list[str]) -> None:
    """Rules that let only the devices of `identities` through to the class stage."""
    w.comment("scope of the last apply (stable identities, from the record of intent): only these devices;")
    w.comment("`tunectl udev install --all` renders rules for every device")
    for identity in identities:
        for keys in identity_matches(identity, notes):
            w.rule(*keys, f'ENV{{{IN_SCOPE}}}="1"')
    w.rule(f'ENV{{{IN_SCOPE}}}!="1"', f'GOTO="{end}"')


def captured(used: dict[str, set]) -> list[str]:
    """The attributes whose originals the rules keep: those they write, and those the kernel changes with them."""
    attrs = set(used) | {e for a in used for e in side_effects(a)}
    if "scheduler" in attrs:
        attrs.add("nr_requests")  # a switch resets it
    return sorted(attrs)


def capture_rules(w: RuleWriter, used: dict[str, set]) -> None:
    """Keep each original in udev's database before the rules write anything.

    IMPORT{db} brings back the value an earlier event stored, so only the first
    event after the device appeared reads it (a remove clears the database
    entry: a re-attached device is read afresh). tunectl journals these the
    first time it sees a device the rules tuned (`tunectl.tuning.adopt`).
    """
    attrs = captured(used)
    if not attrs:
        return
    w.blank()
    w.comment("originals for tunectl's journal: the values before the first write since the device appeared")
    for attr in attrs:
        name = orig_name(attr)
        w.rule(f'IMPORT{{db}}="{name}"')
        w.rule(f'ENV{{{name}}}!="?*"', f'TEST=="queue/{attr}"', f'ENV{{{name}}}="$attr{{queue/{attr}}}"')
