"""The guest's entry point (tests/vm/guest/main.py) imports only the group its boot runs: under TCG every module
a boot imports costs it time (all nine groups' took 7.5 s)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.vm import machine

MAIN = machine.REPO / "tests" / "vm" / "guest" / "main.py"
GROUP_MODULES = {"bootpair", "classify", "devices", "evidence", "explain", "models", "preload", "reboot", "stacks"}

# main.py run as the guest runs it, with common.main replaced: what the group table resolved to, and which group
# modules were imported by then.
PROBE = """
import json, runpy, sys
sys.path.insert(0, sys.argv[1])
import common
seen = {}
common.main = lambda groups: seen.update(groups)
sys.argv = [sys.argv[1] + "/main.py", sys.argv[2], "/nonexistent-shared"]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps({"groups": {g: f.__module__ + "." + f.__name__ for g, f in seen.items()},
                  "imported": sorted(m for m in sys.modules if m in GROUP_MODULES)}))
""".replace("GROUP_MODULES", repr(sorted(GROUP_MODULES)))


def _run_main(group: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(MAIN.parent), group], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_boot_imports_its_own_group_only() -> None:
    seen = _run_main("classify")
    assert seen["groups"] == {"classify": "classify.run"}
    assert seen["imported"] == ["classify"]
    seen = _run_main("profiles")  # a group named apart from its module
    assert seen["groups"] == {"profiles": "evidence.run"}
    assert "stacks" not in seen["imported"] and "explain" not in seen["imported"]


def test_every_group_resolves_to_its_function() -> None:
    for group, (module, function) in {"reboot2": ("reboot", "second"), "bootpair1": ("bootpair", "first"),
                                      "stacks": ("stacks", "run")}.items():
        assert _run_main(group)["groups"] == {group: f"{module}.{function}"}


def test_an_unknown_group_reaches_common_main_with_nothing_to_run() -> None:
    # common.main then records the KeyError in the group's results, as it did when every group was imported.
    assert _run_main("nosuchgroup") == {"groups": {}, "imported": []}
