"""Issue #34: paths root is given that nobody can make point elsewhere (or exist later); reads that never block."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tests.root.system import test_trust_attacks as attacks
from tests.root.system.test_trust_attacks import Arena
from tunectl.cli import main
from tunectl.context import Context
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore

pytestmark = pytest.mark.root

arena = attacks.arena


def test_udev_install_refuses_a_tunectl_executable_that_does_not_exist_yet(arena: Arena) -> None:
    state, rules = arena.base / "state", arena.base / "rules"
    rules.mkdir()
    profile = arena.base / "below.yaml"  # root's: its below: settings make the rules RUN tunectl
    profile.write_text("name: below\nclasses:\n  dm:\n    below: {read_ahead_kb: 4096}\n")
    later = arena.open / "bin" / "tunectl"  # nobody may create it whenever they like
    for exe, allow in ((later, []), (later, ["--allow-untrusted-profile"]), (Path("/nonexistent/tunectl"), [])):
        ctx = Context(arena.tree.sysfs, arena.tree.udev, StateStore(state), [shipped_profile_dir()],
                      {"TUNECTL_EXECUTABLE": str(exe)})
        err = io.StringIO()
        code = main(["udev", "install", "-p", str(profile), "--rules-dir", str(rules), *allow], stdout=io.StringIO(),
                    stderr=err, context=ctx)
        assert code == 2 and f"tunectl executable {exe}: does not exist" in err.getvalue(), err.getvalue()
        assert os.listdir(rules) == []
