# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Documentation both tunectl modules share: what the host needs, how tunectl is found, its environment."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
requirements:
  - tunectl on the managed host (C(tunectl --version) works); the module talks to it through C(--json).
options:
  executable:
    description:
      - The tunectl command, looked up on C(PATH) (and the sbin directories) unless it is a path.
    type: str
    default: tunectl
notes:
  - The environment tunectl reads (C(TUNECTL_STATE_DIR), C(TUNECTL_SYSFS_ROOT), C(TUNECTL_PROFILE_PATH), ...)
    can be set with the task's C(environment) keyword.
"""

    ATTRIBUTES = r"""
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
"""
