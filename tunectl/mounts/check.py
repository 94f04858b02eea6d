"""The mount check: per filesystem, wanted options against the live mount and the fstab entry.

Pure: takes facts gathered by `operations` and the profile's rules, returns records.
"""

from __future__ import annotations

from collections.abc import Sequence

from tunectl.mounts import options as opts
from tunectl.mounts.fstab import Entry
from tunectl.mounts.rules import Facts, select
from tunectl.record import field, record
from tunectl.system.mountinfo import Mount


@record
class FsCheck:
    source: str
    target: str
    fstype: str
    device: str | None
    disks: list[str]
    want: opts.Want
    live: Mount | None
    entry: Entry | None
    rules: list[int] = field(default_factory=list)
    unresolved: str = ""  # an fstab source that names a device no lookup finds (as `findmnt --verify` flags it)

    @property
    def fstab_drift(self) -> list[tuple[str, str]]:
        return opts.drift(self.entry.options, self.want) if self.entry is not None else []

    @property
    def live_drift(self) -> list[tuple[str, str]]:
        if self.live is None or self.fstype == "swap":
            return []
        return opts.drift(self.live.options, self.want, live=True)

    @property
    def drift(self) -> list[dict]:
        return ([{"where": "live", "change": c, "option": o} for c, o in self.live_drift]
                + [{"where": "fstab", "change": c, "option": o} for c, o in self.fstab_drift])

    def fixed_fstab_options(self) -> list[str]:
        assert self.entry is not None
        return opts.edit(self.entry.options, self.want)

    def to_json(self) -> dict:
        return {"source": self.source, "target": self.target, "fstype": self.fstype, "device": self.device,
                "disks": self.disks, "wanted": list(self.want.present), "unwanted": list(self.want.absent),
                "discard": self.want.discard, "rules": [f"mounts[{i}]" for i in self.rules],
                "live": self.live.options if self.live is not None else None,
                "fstab": list(self.entry.options) if self.entry is not None else None,
                "fstab_line": self.entry.lineno if self.entry is not None else None,
                "drift": self.drift, "skipped": [s.to_json() for s in self.want.skipped]}


def evaluate(rules: Sequence[dict], facts: Facts, source: str, entry: Entry | None, live: Mount | None,
             cannot_discard: str | None) -> FsCheck:
    held, skipped = select(rules, facts)
    want = opts.want_from_rules(held, facts.fstype, cannot_discard)
    for _index, rule, reason in skipped:
        for token in list(rule.get("options") or []) + ([f"discard: {rule['discard']}"] if rule.get("discard") else []):
            if not opts.has(want.present, token) and all(s.option != token for s in want.skipped):
                want.skipped.append(opts.Skip(token, reason))
    return FsCheck(source, facts.target, facts.fstype, facts.device.name if facts.device else None,
                   [d.name for d in facts.disks], want, live, entry, [i for i, _ in held])
