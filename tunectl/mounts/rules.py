"""Which `mounts:` rules of a profile hold for a filesystem.

Pure. A rule's match keys are the device keys of SPEC §3 plus `fstype` and
`mountpoint` (shell globs, or lists of them). Device keys hold when the
filesystem's own device (a partition's disk, or the dm/md device) matches, or
when every whole disk below it does. Filesystems without a block device (nfs,
tmpfs, bind mounts, swap files) only take rules that name their fstype.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from tunectl.devices.match import matches
from tunectl.devices.model import Device
from tunectl.record import field, record

FS_KEYS = ("fstype", "mountpoint")


@record
class Facts:
    """What a rule can be matched against for one filesystem."""

    fstype: str
    target: str
    device: Device | None = None  # the filesystem's whole device (partition -> disk)
    disks: list[Device] = field(default_factory=list)
    block: bool = True  # lives on a block device (False: nfs, tmpfs, bind, ...)
    absent: str = ""  # why the device is not here, when `block` and no `device`


def _globs(value: object) -> list[str]:
    return list(value) if isinstance(value, list) else [str(value)]


@record(frozen=True)
class Outcome:
    index: int
    applies: bool
    skip_reason: str = ""  # set when the rule might apply but cannot be decided


def judge(index: int, match: dict, facts: Facts) -> Outcome:
    if "fstype" in match and not any(fnmatchcase(facts.fstype, g) for g in _globs(match["fstype"])):
        return Outcome(index, False)
    if "mountpoint" in match and not any(fnmatchcase(facts.target, g) for g in _globs(match["mountpoint"])):
        return Outcome(index, False)
    device_keys = {k: v for k, v in match.items() if k not in FS_KEYS}
    if not facts.block:
        return Outcome(index, "fstype" in match and not device_keys)
    if not device_keys:
        return Outcome(index, True)
    if facts.device is None:
        keys = ", ".join(sorted(device_keys))
        return Outcome(index, False, f"mounts[{index}] matches on the device ({keys}); {facts.absent or 'no device'}")
    if matches(facts.device, device_keys):
        return Outcome(index, True)
    return Outcome(index, bool(facts.disks) and all(matches(d, device_keys) for d in facts.disks))


def select(rules: Sequence[dict], facts: Facts) -> tuple[list[tuple[int, dict]], list[tuple[int, dict, str]]]:
    """(rules that hold, in file order), (rules skipped because the device is absent, with the reason)."""
    held, skipped = [], []
    for i, rule in enumerate(rules):
        outcome = judge(i, rule.get("match") or {}, facts)
        if outcome.applies:
            held.append((i, rule))
        elif outcome.skip_reason:
            skipped.append((i, rule, outcome.skip_reason))
    return held, skipped
