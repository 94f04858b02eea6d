"""Guest entry point: `main.py GROUP SHARED_DIR [ARGS...]` runs one group and writes SHARED_DIR/GROUP.json."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["TUNECTL_VM_SHARED"] = sys.argv[2]
# Every tunectl the guest starts is this checkout's: the venv's editable install names one checkout (often
# another worktree), and the host's PYTHONPATH does not reach the guest (virtme-ng passes only TERM). The
# host compiles this checkout's tunectl before the boot (machine.boot): the read-only root gets current .pyc.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ["PYTHONPATH"] = CHECKOUT
sys.path.insert(1, CHECKOUT)

import importlib  # noqa: E402

from common import main  # noqa: E402

# group: (its module, its function). Only the boot's own group is imported: importing all nine took 7.5 s of
# every boot under TCG (a guest's `python -c`, load 3.3), 76 modules beyond a bare interpreter's; one group's
# are 61-70 of them (-X importtime on the host), so a boot no longer pays for the other eight.
GROUPS = {"classify": ("classify", "run"), "devices": ("devices", "run"), "stacks": ("stacks", "run"),
          "explain": ("explain", "run"), "models": ("models", "run"), "preload": ("preload", "run"),
          "profiles": ("evidence", "run"), "reboot1": ("reboot", "first"), "reboot2": ("reboot", "second"),
          "bootpair1": ("bootpair", "first"), "bootpair2": ("bootpair", "second")}

if __name__ == "__main__":
    # An unknown group gets no function: common.main records the KeyError in its results, as before.
    main({group: getattr(importlib.import_module(module), function)
          for group, (module, function) in GROUPS.items() if group == sys.argv[1]})
