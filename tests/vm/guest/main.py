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

import bootpair  # noqa: E402
import classify  # noqa: E402
import devices  # noqa: E402
import evidence  # noqa: E402
import explain  # noqa: E402
import models  # noqa: E402
import preload  # noqa: E402
import reboot  # noqa: E402
import stacks  # noqa: E402
from common import main  # noqa: E402

GROUPS = {"classify": classify.run, "devices": devices.run, "stacks": stacks.run, "explain": explain.run,
          "models": models.run, "preload": preload.run, "profiles": evidence.run,
          "reboot1": reboot.first, "reboot2": reboot.second,
          "bootpair1": bootpair.first, "bootpair2": bootpair.second}

if __name__ == "__main__":
    main(GROUPS)
