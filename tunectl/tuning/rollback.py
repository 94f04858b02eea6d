"""rollback: restore the journalled originals, then update the record of intent.

Apart from `changes` (apply) because only a rollback may remove udev rules first: apply does not load the
rules file's edge (and the program runner under it).
"""

from __future__ import annotations

import contextlib
import os

from tunectl.context import Context
from tunectl.devices.discover import shared_identity_warnings
from tunectl.devices.model import Device
from tunectl.devices.resolve import Resolver
from tunectl.errors import StateError, UsageError
from tunectl.record import replace
from tunectl.status import Status
from tunectl.system import rulesfile
from tunectl.tuning import apply as applying
from tunectl.tuning import changes, intent, journal, operations, relink
from tunectl.tuning.intent import Intent
from tunectl.tuning.journal import Journal


def rollback(ctx: Context, dev_refs: list[str] | None = None, check: bool = False,
             remove_rules: bool = False) -> changes.ApplyReport:
    """Restore the journalled originals (of `dev_refs`, else of every device), then update the record of intent.

    While udev rules are installed a rollback is refused (the next change event
    would write their values again) unless `remove_rules` removes them first. A
    full rollback that restores everything clears the record. `check` writes nothing, so it takes no lock (a
    user who cannot create the lock can still ask what a rollback would do).
    """
    with contextlib.nullcontext() if check else ctx.state.locked():
        read = journal.load(ctx.state)
        record = intent.load(ctx.state)
        devices = operations.discover_devices(ctx)
        kept, _ = changes.adopt_rules_originals(ctx, record, read, devices)
        notes = _rules_before_rollback(ctx, record, check, remove_rules)
        chosen = set(Resolver(ctx, devices).whole_devices(dev_refs)) if dev_refs else None
        # A loop device whose identity changed while tuned, proven the journalled one: restored under its new identity.
        relinked = {i: d for i, d in relink.orphans(kept, devices).items() if chosen is None or d.name in chosen}
        kept = relink.stamp(relink.rekey(kept, relinked), devices)
        settings = applying.rollback_plan(kept, devices, lambda d: chosen is None or d.name in chosen)
        present = {d.identity for d in devices}
        notes += [f"{entry.name} ({identity}) is not present; its originals stay in the journal"
                  for identity, entry in kept.devices.items() if identity not in present and chosen is None]
        # Warn about the devices this rollback resolves (DEV) or restores, not every device there is.
        restoring = {s.device for s in settings}
        warnings = list(ctx.state.warnings) + shared_identity_warnings(
            [d for d in devices if d.name in restoring or chosen is not None and d.name in chosen], devices)
        unmatched = _lost_loop_identities(kept, devices, chosen or set(), present)
        warnings += unmatched + [relink.warning(i, d, restored=False) for i, d in relinked.items()]
        if check:
            return changes.ApplyReport("journal", [applying.Outcome(s, s.status) for s in settings], check=True,
                                       notes=notes, warnings=warnings, unmatched=unmatched)
        if remove_rules and record is not None and record.rules is not None:
            record = replace(record, rules=None)
            intent.save(ctx.state, record)
        writes_before = ctx.sysfs.writes
        outcomes = applying.apply_settings(ctx.sysfs, settings)
        failed = {o.setting.identity for o in outcomes if o.status not in (Status.CHANGED, Status.IN_SYNC)}
        restored = {o.setting.identity for o in outcomes} - failed
        kept = kept.without(restored)
        try:
            if kept != read or ctx.state.recovered():
                journal.save(ctx.state, kept)
            if record is not None:
                left = record.without(restored | {i for i, d in relinked.items() if d.identity in restored})
                if (chosen is None and not kept.devices) or left.scope == ():
                    intent.clear(ctx.state)  # nothing is tuned any more: verify says "nothing applied"
                elif left != record:
                    intent.save(ctx.state, left)
        except StateError as e:  # the devices are restored already: say so, not only that the state is stuck
            done = sorted({o.setting.device for o in outcomes if o.status == Status.CHANGED})
            raise StateError(f"{e.message}. The devices were restored ({len(done)} changed: {', '.join(done) or 'none'}"
                             "); the journal still lists their originals, so the next rollback finds them in sync",
                             hint=e.hint) from None
    return changes.ApplyReport("journal", outcomes, writes=ctx.sysfs.writes - writes_before, notes=notes,
                               warnings=warnings, unmatched=unmatched)


def _lost_loop_identities(kept: Journal, devices: list[Device], chosen: set[str], present: set[str]) -> list[str]:
    """A named loop device with no journal entry of its own, whose name an entry of a loop device no longer present
    holds: its backing file was renamed or deleted (or its twin detached) while it was tuned. Nothing tells tunectl
    it is the same device, so nothing is written; the rollback says so and does not exit 0."""
    found = []
    for dev in devices:
        if dev.name not in chosen or dev.cls != "loop" or dev.identity in kept:
            continue
        for identity, entry in kept.devices.items():
            if identity.startswith("loop:") and identity not in present and entry.name == dev.name:
                found.append(f"tunectl: warning: {dev.name} ({dev.identity}) was journalled as {identity}: its backing "
                             "file was renamed, deleted or re-attached since it was tuned; its originals stay in the "
                             f"journal and nothing was restored on it (check it with `tunectl status -v {dev.name}`)")
    return found


def _rules_before_rollback(ctx: Context, record: Intent | None, check: bool, remove_rules: bool) -> list[str]:
    """Refuse a rollback the installed udev rules would undo; with `remove_rules`, remove them first."""
    rules = record.rules if record is not None else None
    if rules is None or not os.path.exists(rules.path):
        return []
    if check and remove_rules:
        return [f"would remove udev rules {rules.path} (profile {rules.profile}) before restoring"]
    if check:
        return [f"udev rules {rules.path} are installed: a rollback needs --remove-rules, or the next change "
                "event writes their values again"]
    if not remove_rules:
        raise UsageError(f"udev rules {rules.path} (profile {rules.ref}) are installed: the next change "
                         "event would write their values again after a rollback, so nothing was restored",
                         hint="tunectl rollback --remove-rules removes the rules first; or keep the rules")
    problems = rulesfile.remove(rules.path, ctx.run)
    return [f"removed udev rules {rules.path} (profile {rules.profile}) before restoring"] + problems
