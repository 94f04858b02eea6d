#!/usr/bin/python
# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module `tunectl`: drives the tunectl command line through its `--json` interface."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tunectl
short_description: Tune block devices with a tunectl profile; persist, verify and roll back
description:
  - Applies a tunectl profile to the block devices of the managed host
    (I/O scheduler, its knobs, read-ahead and other queue attributes through sysfs), optionally installs the
    profile's udev rules so hot-plugged devices and the next boot get the same values, verifies drift,
    and rolls back to the values that were there before tunectl first changed them.
  - Optionally checks or fixes mount options against the profile's C(mounts) rules, and checks partition
    alignment against its C(alignment) boundary.
  - The module runs the C(tunectl) command with C(--json) and reads its report.
  - The managed host needs tunectl installed (the P(tunectl.tunectl.tunectl#role) role installs it from the
    Debian package or a wheel); see O(executable) and the requirements.
  - C(changed) is true exactly when something was written (or, in check mode, would be written).
    Settings tunectl skipped or that the device cannot take (a scheduler it does not offer) are reported
    as warnings; writes the kernel refused fail the task, after everything else was applied.
version_added: "0.1.0"
author:
  - tunectl developers (@tunectl)
extends_documentation_fragment:
  - tunectl.tunectl.tunectl
  - tunectl.tunectl.tunectl.attributes
options:
  state:
    description:
      - C(applied) writes the profile's values now (only those that differ).
      - C(verified) compares the live values with the profile and fails on drift; it never writes.
        With O(persist), the installed udev rules must also be what the profile renders.
      - C(rolled_back) restores the values journalled before tunectl's first change
        (of O(devices), or of every device tunectl changed). With O(persist), the rules file tunectl
        installed is removed too, so the next hot-plug or boot does not tune the devices again.
    type: str
    choices: [applied, verified, rolled_back]
    default: applied
  profile:
    description:
      - A profile name on tunectl's search path (C(/etc/tunectl/profiles), then the shipped library)
        or the absolute path of a profile file.
      - Required for O(state=applied) and O(state=verified).
    type: str
  devices:
    description:
      - Only these devices (kernel names such as C(sdb) or paths such as C(/dev/disk/by-id/...)).
        Default is every device the profile matches.
      - Each item is passed to tunectl after C(--), so it is never read as an option; an empty item,
        one starting with C(-) or holding a newline fails the task before tunectl runs.
      - The udev rules of O(persist) cover the devices tunectl's record names (those of the applies
        limited to O(devices)), or every device after an apply without O(devices).
    type: list
    elements: str
    default: []
  persist:
    description:
      - With O(state=applied), also install the profile's udev rules (C(tunectl udev install)),
        so hot-plug and every boot apply the same values without tunectl running.
      - With O(state=verified), fail unless the installed rules are what the profile renders.
      - With O(state=rolled_back), remove the rules file tunectl installed, before the rollback
        (tunectl refuses a rollback while its rules are installed, since the next udev event would undo it).
    type: bool
    default: false
  rules_dir:
    description:
      - The directory of the udev rules file. Default is tunectl's, C(/etc/udev/rules.d).
    type: path
  mounts:
    description:
      - C(check) compares live mount options and C(/etc/fstab) with the profile's C(mounts) rules and fails
        on drift.
      - C(fix) rewrites the options field of the fstab entries that differ (a backup is kept beside the file);
        with O(remount) it also applies them to the live mounts. Only with O(state=applied).
      - Default is to leave mounts alone.
    type: str
    choices: [check, fix]
  fstab:
    description:
      - The fstab file for O(mounts). Default is tunectl's, C(/etc/fstab).
    type: path
  remount:
    description:
      - With O(mounts=fix), remount the affected filesystems so the options take effect now.
    type: bool
    default: false
  alignment:
    description:
      - C(check) fails when a partition of O(devices) (default all disks) does not start on the profile's
        alignment boundary (default 1 MiB) and optimal I/O size.
    type: str
    choices: [check]
  executable:
    description:
      - The tunectl command, looked up on C(PATH) (and the sbin directories) unless it is a path.
      - When its path is known, udev rules that start tunectl (for stacked devices) start this one,
        unless C(TUNECTL_EXECUTABLE) is set in the environment.
notes:
  - Supports check mode (C(--check)) and diff mode (C(--diff)); O(state=verified) and O(alignment=check)
    are read-only and run the same way in check mode.
  - Writing sysfs and the udev rules directory needs root (C(become)).
  - "Exit codes and the JSON documents are described in tunectl(8); the C(command) module with
    C(tunectl apply --json --detailed-exitcode) is an alternative for plays that prefer it."
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Tune every disk with a shipped profile and keep it across hot-plug and reboot
  tunectl.tunectl.tunectl:
    profile: throughput-performance
    persist: true
  become: true

- name: Apply a profile file to two disks only
  tunectl.tunectl.tunectl:
    profile: /etc/tunectl/profiles/db.yaml
    devices: [sdb, /dev/disk/by-id/wwn-0x5002538e40a1b2c3]
  become: true

- name: Fail the play when a disk drifted from the profile
  tunectl.tunectl.tunectl:
    state: verified
    profile: db
  become: true

- name: Fix fstab options from the profile's mounts rules, remounting live filesystems
  tunectl.tunectl.tunectl:
    profile: db
    mounts: fix
    remount: true
  become: true

- name: Provisioning gate - every partition aligned
  tunectl.tunectl.tunectl:
    profile: db
    state: verified
    alignment: check

- name: Put back the values from before tunectl and remove its udev rules
  tunectl.tunectl.tunectl:
    state: rolled_back
    persist: true
  become: true
"""

RETURN = r"""
profile:
  description: The name of the profile tunectl resolved (C(journal) for O(state=rolled_back)).
  returned: when tunectl read a profile or the journal
  type: str
  sample: throughput-performance
changes:
  description: The settings that were written (C(status=changed)) or, in check mode, would be (C(status=change)).
  returned: always
  type: list
  elements: dict
  sample:
    - device: sdb
      attribute: read_ahead_kb
      before: 128
      after: 4096
      status: changed
drift:
  description: With O(state=verified), the settings whose live value differs from the profile.
  returned: always
  type: list
  elements: dict
  sample:
    - device: sdb
      attribute: scheduler
      before: bfq
      after: mq-deadline
      status: change
settings:
  description: >-
    Every setting tunectl considered, as in C(tunectl apply --json) (or C(verify), C(rollback)):
    C(device), C(identity), C(attribute), C(before), C(after), C(source), C(status) and, for apply and
    rollback, the C(readback) and C(error). C(status) is one of C(changed), C(change), C(ok), C(skip),
    C(unavailable), C(failed), C(not-permitted).
  returned: always
  type: list
  elements: dict
udev:
  description: The report of C(tunectl udev install), C(check) or C(remove) (C(path), C(changed), C(in_sync), ...).
  returned: when O(persist=true)
  type: dict
  sample: {"path": "/etc/udev/rules.d/65-tunectl.rules", "changed": true, "reloaded": true}
mounts:
  description: The report of C(tunectl mounts check) or C(tunectl mounts fix).
  returned: when O(mounts) is set
  type: dict
alignment:
  description: The report of C(tunectl align) (C(ok), and per disk its C(partitions) with C(aligned), C(off_by_bytes)).
  returned: when O(alignment) is set
  type: dict
commands:
  description: The tunectl command lines the module ran, in order.
  returned: always
  type: list
  elements: str
  sample: ["tunectl apply -p throughput-performance --json"]
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.tunectl.tunectl.plugins.module_utils.tunectl_cli import (  # noqa: E402
    StepFailed,
    Tunectl,
    find_executable,
)

RULES_FILE = "65-tunectl.rules"  # tunectl(8): the file `udev install` writes in the rules directory
DEFAULT_RULES_DIR = "/etc/udev/rules.d"
WRITTEN = ("changed", "change")  # statuses of a setting written (apply) or to be written (check mode)
REFUSED = ("failed", "not-permitted")
NOTED = ("skip", "unavailable")
# The --json formats this module reads, at the versions it understands (tunectl/schema/CHANGELOG.md):
# a tunectl on the host printing another version is refused with a message, never misread.
READS = {"tunectl-apply": 2, "tunectl-rollback": 2, "tunectl-verify": 3, "tunectl-align": 1,
         "tunectl-mounts-check": 2, "tunectl-mounts-fix": 2, "tunectl-udev-render": 2,
         "tunectl-udev-install": 2, "tunectl-udev-remove": 1, "tunectl-udev-check": 2, "tunectl-error": 1}


def show(value) -> str:
    return "(absent)" if value is None else str(value)


def setting_line(s: dict) -> str:
    return f"{s.get('device')} {s.get('attribute')}"


def settings_diff(settings: list[dict]) -> list[dict]:
    """One before/after per device, one `attribute: value` line per written setting."""
    by_device: dict[str, tuple[list[str], list[str]]] = {}
    for s in settings:
        if s.get("status") not in WRITTEN:
            continue
        before, after = by_device.setdefault(s["device"], ([], []))
        got = s.get("readback") if s.get("status") == "changed" and s.get("readback") is not None else s.get("after")
        before.append(f"{s['attribute']}: {show(s.get('before'))}\n")
        after.append(f"{s['attribute']}: {show(got)}\n")
    return [{"before_header": f"{dev} (sysfs queue)", "after_header": f"{dev} (sysfs queue)",
             "before": "".join(b), "after": "".join(a)} for dev, (b, a) in sorted(by_device.items())]


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Run:
    """One module invocation: the steps of its state, their results, failures and diffs."""

    def __init__(self, module: AnsibleModule, tunectl: Tunectl) -> None:
        self.module = module
        self.p = module.params
        self.t = tunectl
        self.check = module.check_mode
        self.changed = False
        self.failures: list[str] = []
        self.summary: list[str] = []
        self.diff: list[dict] = []
        self.result: dict = {"changes": [], "drift": [], "settings": []}

    def profile_args(self) -> list[str]:
        return ["-p", self.p["profile"]] if self.p["profile"] else []

    def device_args(self) -> list[str]:
        """The devices after `--`: an item is never read as an option (`--remove-rules`, `--state-dir=/x`)."""
        return ["--", *self.p["devices"]] if self.p["devices"] else []

    def rules_args(self) -> list[str]:
        return ["--rules-dir", self.p["rules_dir"]] if self.p["rules_dir"] else []

    def take_settings(self, doc: dict, verb: str) -> None:
        """Record a settings report: changes, refused writes as failures, skipped ones as warnings."""
        settings = doc.get("settings") or []
        self.result["settings"] = settings
        if "profile" in doc:
            self.result["profile"] = doc["profile"]
        changes = [s for s in settings if s.get("status") in WRITTEN]
        self.result["changes"] = changes
        for s in settings:
            if s.get("status") in REFUSED:
                self.failures.append(f"{setting_line(s)}: writing {show(s.get('after'))} failed: "
                                     f"{s.get('error') or s.get('status')}")
            elif s.get("status") in NOTED:
                self.t.warn(f"{setting_line(s)}: {s.get('status')}: {s.get('error') or s.get('reason') or ''}".rstrip(": "))
        for note in doc.get("notes") or []:
            self.t.warn(note)
        if doc.get("changed"):
            self.changed = True
        if self.module._diff:
            self.diff.extend(settings_diff(settings))
        devices = sorted({s["device"] for s in changes})
        if changes:
            would = "would " if self.check else ""
            self.summary.append(f"{verb}: {would}change {len(changes)} setting(s) on {', '.join(devices)}")
        else:
            self.summary.append(f"{verb}: nothing to change")

    # state=applied
    def apply(self) -> None:
        args = ["apply"] + self.profile_args() + (["--check"] if self.check else []) + self.device_args()
        doc = self.t.run(args, (0, 3, 4))
        self.take_settings(doc, "apply")

    def persist(self) -> None:
        rules = self.profile_args() + self.rules_args()
        before = None
        if self.check or self.module._diff:
            doc = self.udev(["check"] + rules, (0, 1))
            before = read_text(doc["path"])
            if self.check:
                if doc.get("in_sync"):
                    self.summary.append(f"udev: {doc['path']} in sync")
                else:
                    render = ["udev", "render", "--as-installed"] + self.profile_args()
                    rendered = self.t.run(render, (0,)) if self.module._diff else {}
                    self.file_changed("would install", doc["path"], before, rendered.get("rules", ""))
                return
        doc = self.udev(["install"] + rules, (0, 3))
        if doc.get("changed"):
            self.file_changed("installed", doc["path"], before, read_text(doc["path"]))
        else:
            self.summary.append(f"udev: {doc['path']} in sync")

    def udev(self, args: list[str], ok_codes: tuple[int, ...]) -> dict:
        """`tunectl udev ARGS --json`: its report kept in the result, its problems (udevd not running) as warnings."""
        doc = self.t.run(["udev"] + args, ok_codes)
        self.result["udev"] = doc
        for problem in doc.get("problems") or []:
            self.t.warn(f"udev: {problem}")
        return doc

    def file_changed(self, verb: str, path: str, before: str | None, after: str) -> None:
        self.changed = True
        self.summary.append(f"udev: {verb} {path}")
        if self.module._diff and before is not None:
            self.diff.append({"before_header": path, "after_header": path, "before": before, "after": after})

    def mounts(self, mode: str) -> None:
        fstab = ["--fstab", self.p["fstab"]] if self.p["fstab"] else []
        if mode == "check":
            doc = self.t.run(["mounts", "check"] + self.profile_args() + fstab, (0, 1))
            self.result["mounts"] = doc
            self.take_mount_notes(doc)
            for e in doc.get("errors") or []:  # a line of the fstab to mend (more than 6 fields)
                self.failures.append(f"mounts: {e}")
            for fs in doc.get("filesystems") or []:
                if fs.get("drift"):
                    self.failures.append(f"mounts: {fs.get('target')}: {describe_drift(fs['drift'])}")
            timer = doc.get("fstrim_timer")
            if timer and not timer.get("ok", True):
                self.failures.append(f"mounts: discard: periodic wants fstrim.timer enabled; it is {timer.get('state')}")
            if not doc.get("in_sync") and not any(f.startswith("mounts:") for f in self.failures):
                self.failures.append("mounts: not in sync with the profile (see mounts in the result)")
            self.summary.append("mounts: in sync" if doc.get("in_sync") else "mounts: drift")
            return
        args = (["mounts", "fix"] + self.profile_args() + fstab + (["--check"] if self.check else [])
                + (["--diff"] if self.module._diff else []) + (["--remount"] if self.p["remount"] else []))
        doc = self.t.run(args, (0, 1, 3))  # 1: an fstab error fix does not mend (in errors), as check's exit 1
        self.result["mounts"] = doc
        self.take_mount_notes(doc)
        for e in doc.get("errors") or []:  # a line of the fstab to mend by hand (more than 6 fields)
            self.failures.append(f"mounts: {e}")
        if doc.get("changed"):
            self.changed = True
            self.summary.append(f"mounts: {'would rewrite' if self.check else 'rewrote'} {doc.get('fstab')}"
                                if doc.get("diff") else "mounts: remounted")
        else:
            self.summary.append(f"mounts: {doc.get('fstab')} in sync")
        if self.module._diff and doc.get("diff"):
            self.diff.append({"prepared": doc["diff"]})
        for r in doc.get("remounts") or []:
            if r.get("ok") is False:
                why = ", ".join(r.get("not_applied") or []) or r.get("error") or "failed"
                self.failures.append(f"mounts: remount of {r.get('target')} with {r.get('options')} did not take: {why}")
        for problem in doc.get("problems") or []:
            if not any(problem in f for f in self.failures):
                self.failures.append(f"mounts: {problem}")

    def take_mount_notes(self, doc: dict) -> None:
        for w in doc.get("warnings") or []:
            self.t.warn(f"mounts: {w}")
        for fs in doc.get("filesystems") or []:
            for skip in fs.get("skipped") or []:
                self.t.warn(f"mounts: {fs.get('target')}: {skip.get('option')} skipped: {skip.get('reason')}")

    def alignment(self) -> None:
        doc = self.t.run(["align"] + self.profile_args() + self.device_args(), (0, 1))
        self.result["alignment"] = doc
        bad = 0
        for disk in doc.get("disks") or []:
            misaligned = [part for part in disk.get("partitions") or [] if part.get("aligned") is False]
            bad += len(misaligned)
            for part in misaligned:
                self.failures.append(f"alignment: {disk.get('device')} partition {part.get('number')} starts "
                                     f"{part.get('off_by_bytes')} bytes past a {disk.get('grain_bytes')}-byte boundary; "
                                     f"nearest aligned start: sector {part.get('suggested_start_sector')}")
            warnings = "; ".join(disk.get("warnings") or [])
            if disk.get("table") is None and doc.get("ok") is False:
                self.failures.append(f"alignment: {disk.get('device')}: {warnings or 'no partition table'}")
            elif warnings:
                self.t.warn(f"alignment: {disk.get('device')}: {warnings}")
        if doc.get("ok") is False and not any(f.startswith("alignment:") for f in self.failures):
            self.failures.append("alignment: tunectl align reports a problem (see alignment in the result)")
        self.summary.append(f"alignment: {bad} misaligned partition(s)" if bad else "alignment: ok")

    # state=verified
    def verify(self) -> None:
        doc = self.t.run(["verify"] + self.profile_args() + self.device_args(), (0, 1))
        self.result["settings"] = doc.get("settings") or []
        self.result["profile"] = doc.get("profile")
        drift = [s for s in self.result["settings"] if s.get("status") in ("change", "unavailable")]
        self.result["drift"] = drift
        for s in drift:
            reason = f" ({s['reason']})" if s.get("reason") else ""
            self.failures.append(f"drift: {setting_line(s)} is {show(s.get('before'))}, profile wants "
                                 f"{show(s.get('after'))}{reason}")
        for s in self.result["settings"]:
            if s.get("status") == "skip":
                self.t.warn(f"{setting_line(s)}: skip: {s.get('reason') or ''}".rstrip(": "))
        if self.module._diff:
            self.diff.extend(settings_diff(drift))
        self.summary.append("verify: in sync" if not drift else f"verify: {len(drift)} setting(s) drifted")
        if self.p["persist"]:
            udev = self.udev(["check"] + self.profile_args() + self.rules_args(), (0, 1))
            if not udev.get("in_sync"):
                state = "differs from" if udev.get("installed") else "is missing, unlike"
                self.failures.append(f"udev: {udev.get('path')} {state} what profile {udev.get('profile')} renders")

    # state=rolled_back
    def rollback(self) -> None:
        # The rules go first: tunectl refuses a rollback while they are installed (an event would undo it).
        if self.p["persist"]:
            path = os.path.join(self.p["rules_dir"] or DEFAULT_RULES_DIR, RULES_FILE)
            before = read_text(path)
            if self.check:
                if os.path.exists(path):
                    self.file_changed("would remove", path, before, "")
            elif self.udev(["remove"] + self.rules_args(), (0, 3)).get("removed"):
                self.file_changed("removed", path, before, "")
        doc = self.t.run(["rollback"] + (["--check"] if self.check else []) + self.device_args(), (0, 3, 4))
        self.take_settings(doc, "rollback")


def describe_drift(drift: list) -> str:
    """tunectl mounts' drift records ({where, change, option}) as `live: +noatime -relatime; fstab: +noatime`."""
    by_where: dict[str, list[str]] = {}
    for d in drift:
        if isinstance(d, dict):
            sign = "+" if d.get("change") == "add" else "-"
            by_where.setdefault(str(d.get("where")), []).append(f"{sign}{d.get('option')}")
        else:
            by_where.setdefault("drift", []).append(str(d))
    return "; ".join(f"{where}: {' '.join(opts)}" for where, opts in by_where.items())


ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["applied", "verified", "rolled_back"], "default": "applied"},
    "profile": {"type": "str"},
    "devices": {"type": "list", "elements": "str", "default": []},
    "persist": {"type": "bool", "default": False},
    "rules_dir": {"type": "path"},
    "mounts": {"type": "str", "choices": ["check", "fix"]},
    "fstab": {"type": "path"},
    "remount": {"type": "bool", "default": False},
    "alignment": {"type": "str", "choices": ["check"]},
    "executable": {"type": "str", "default": "tunectl"},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "applied", ("profile",)), ("state", "verified", ("profile",))],
        supports_check_mode=True,
    )
    p = module.params
    state = p["state"]
    if state == "verified" and p["mounts"] == "fix":
        module.fail_json(msg="mounts=fix rewrites fstab but state=verified changes nothing; use mounts=check")
    if state == "rolled_back" and (p["mounts"] or p["alignment"]):
        module.fail_json(msg="mounts and alignment are checked against a profile; they do not apply to state=rolled_back")
    if p["remount"] and p["mounts"] != "fix":
        module.fail_json(msg="remount applies the options of mounts=fix; set mounts=fix")
    for item in p["devices"]:
        if not item or item.startswith("-") or any(c in item for c in "\0\n"):
            module.fail_json(msg=f"devices: {item!r} is not a device (a kernel name such as sdb, or a path such as "
                                 "/dev/disk/by-id/...); an item never starts with '-'")

    tunectl = Tunectl(module, find_executable(module, p["executable"]), READS)
    run = Run(module, tunectl)
    try:
        if state == "applied":
            run.apply()
            if p["persist"]:
                run.persist()
        elif state == "verified":
            run.verify()
        else:
            run.rollback()
        if p["mounts"]:
            run.mounts("check" if state == "verified" else p["mounts"])
        if p["alignment"]:
            run.alignment()
    except StepFailed as e:
        run.failures.append(str(e))

    result = dict(run.result, changed=run.changed, commands=tunectl.commands)
    if module._diff and run.diff:
        result["diff"] = run.diff
    for w in tunectl.warnings:
        module.warn(w)
    if run.failures:
        module.fail_json(msg="\n".join(run.failures), **result)
    module.exit_json(msg="; ".join(run.summary), **result)


if __name__ == "__main__":
    main()
