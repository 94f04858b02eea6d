#!/usr/bin/python
# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module `tunectl_info`: what tunectl sees on the host, read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tunectl_info
short_description: Block devices, their tunectl class, drift and partition alignment, read-only
description:
  - Reports the block devices of the managed host as C(tunectl status --json) sees them - identity, class,
    scheduler, read-ahead, queue attributes and iosched knobs - with the drift of each device against the
    last applied profile or against O(profile).
  - With O(alignment=true) also reports partition alignment (C(tunectl align --json)); that runs parted,
    which needs root.
  - Writes nothing, so it runs the same way in check mode; drift and misalignment are data here, not failures
    (use M(tunectl.tunectl.tunectl) with O(tunectl.tunectl.tunectl#module:state=verified) to fail on drift).
version_added: "0.1.0"
author:
  - tunectl developers (@tunectl)
extends_documentation_fragment:
  - tunectl.tunectl.tunectl
  - tunectl.tunectl.tunectl.attributes
options:
  profile:
    description:
      - Compare with this profile (a name on tunectl's search path or an absolute path)
        instead of the last one applied (or C(default) when none was).
    type: str
  devices:
    description:
      - Only these devices (kernel names such as C(sdb) or C(/dev/...) paths) in RV(devices) and RV(alignment).
        Default is every device.
    type: list
    elements: str
    default: []
  alignment:
    description:
      - Also check partition alignment against the profile's boundary (parted reads each partition table).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read what tunectl sees
  tunectl.tunectl.tunectl_info:
  register: disks
  become: true

- name: Name the SSDs
  ansible.builtin.debug:
    msg: "{{ disks.classes.ssd | default([]) }}"

- name: Devices that drifted from the database profile, with alignment
  tunectl.tunectl.tunectl_info:
    profile: database
    alignment: true
  register: db
  become: true

- name: Stop when a partition is misaligned
  ansible.builtin.assert:
    that: db.alignment.ok
"""

RETURN = r"""
profile:
  description: The profile the drift is measured against.
  returned: always
  type: str
  sample: throughput-performance
devices:
  description:
    - One entry per device as in C(tunectl status --json) - C(name), C(identity), C(class), C(scheduler),
      C(schedulers), C(queue), C(iosched), C(slaves), C(holders), C(partitions), C(drift), C(warnings), ...
  returned: always
  type: list
  elements: dict
  sample:
    - name: sdb
      identity: wwn-0x5002538e40a1b2c3
      class: ssd
      scheduler: mq-deadline
      queue: {read_ahead_kb: 128}
      drift: []
classes:
  description: Device names by class (C(ssd), C(rotational), C(nvme), C(dm), ...), each list sorted.
  returned: always
  type: dict
  sample: {"ssd": ["sdb"], "nvme": ["nvme0n1"]}
drift:
  description: The settings whose live value differs from the profile, over all devices.
  returned: always
  type: list
  elements: dict
  sample:
    - device: sdb
      attribute: read_ahead_kb
      before: 128
      after: 4096
      status: change
in_sync:
  description: True when no device drifted.
  returned: always
  type: bool
alignment:
  description: The report of C(tunectl align --json) (C(ok), and per disk its C(partitions) with C(aligned)).
  returned: when O(alignment=true)
  type: dict
commands:
  description: The tunectl command lines the module ran, in order.
  returned: always
  type: list
  elements: str
  sample: ["tunectl status --json"]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.tunectl.tunectl.plugins.module_utils.tunectl_cli import (  # noqa: E402
    StepFailed,
    Tunectl,
    find_executable,
)

# The --json formats this module reads, at the versions it understands (tunectl/schema/CHANGELOG.md).
READS = {"tunectl-status": 3, "tunectl-align": 1, "tunectl-error": 1}

ARGUMENT_SPEC = {
    "profile": {"type": "str"},
    "devices": {"type": "list", "elements": "str", "default": []},
    "alignment": {"type": "bool", "default": False},
    "executable": {"type": "str", "default": "tunectl"},
}


def device_drift(device: dict) -> list[dict]:
    """A device's drift records, each naming its device (status lists them per device)."""
    return [dict(d, device=d.get("device", device.get("name"))) for d in device.get("drift") or []]


def gather(tunectl: Tunectl, params: dict) -> dict:
    profile = ["-p", params["profile"]] if params["profile"] else []
    status = tunectl.run(["status", "--all"] + profile, (0, 1))
    wanted = set(params["devices"])
    devices = [d for d in status.get("devices") or []
               if not wanted or d.get("name") in wanted or f"/dev/{d.get('name')}" in wanted]
    classes: dict[str, list[str]] = {}
    for d in devices:
        classes.setdefault(str(d.get("class")), []).append(d.get("name"))
    drift = [rec for d in devices for rec in device_drift(d)]
    result = {"profile": status.get("profile"), "devices": devices, "drift": drift, "in_sync": not drift,
              "classes": {k: sorted(v) for k, v in sorted(classes.items())}}
    if params["alignment"]:
        result["alignment"] = tunectl.run(["align"] + params["devices"] + profile, (0, 1))
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    tunectl = Tunectl(module, find_executable(module, module.params["executable"]), READS)
    try:
        result = gather(tunectl, module.params)
    except StepFailed as e:
        module.fail_json(msg=str(e), commands=tunectl.commands)
    for w in tunectl.warnings:
        module.warn(w)
    module.exit_json(changed=False, commands=tunectl.commands, **result)


if __name__ == "__main__":
    main()
