"""The shipped profiles' verdicts (tunectl/profile/shipped.py): what the checker says today, used only for the
very texts shipped, never by `profile validate`; and the first apply's verdict kept for the runs after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO, run_process
from tests.tuning_helpers import loop_machine
from tunectl.profile import shipped
from tunectl.profile.library import check_file, shipped_profile_dir
from tunectl.profile.resolve import load_profile, resolve_profile
from tunectl.system.cache import ValidationCache

SHIPPED = sorted(shipped_profile_dir().glob("*.yaml"))


def test_the_shipped_verdicts_are_the_checkers_today() -> None:
    """Under this Python and its jsonschema (the landing runs the tests under the venv's and Debian's)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "shipped-verdicts"), "--check"],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert len(shipped.VERDICTS) == len(SHIPPED)


def test_a_shipped_profile_is_loaded_without_importing_jsonschema_or_pyyaml() -> None:
    """status with no state directory yet (a new machine, a fresh guest): the default profile and the two
    balanced extends, read as a full check reads them."""
    code = (
        "import sys, json\n"
        "from tunectl.profile.library import shipped_profile_dir\n"
        "from tunectl.profile.resolve import load_profile\n"
        "from tunectl.system.cache import ValidationCache\n"
        "p = load_profile('database', [shipped_profile_dir()], ValidationCache(None))\n"
        "print(json.dumps({'modules': sorted({'jsonschema', 'yaml'} & set(sys.modules)), 'data': p.data,\n"
        "                  'positions': repr(p.positions)}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    seen = json.loads(done.stdout)
    checked = load_profile("database", [shipped_profile_dir()], None)
    assert seen == {"modules": [], "data": checked.data, "positions": repr(checked.positions)}


def test_a_shipped_text_changed_by_one_value_is_checked_again(tmp_path: Path) -> None:
    library = tmp_path / "profiles"
    library.mkdir()
    text = (shipped_profile_dir() / "default.yaml").read_text()
    assert "scheduler: mq-deadline\n" in text
    (library / "default.yaml").write_text(text.replace("scheduler: mq-deadline\n", "scheduler: nope\n", 1))
    profile, diags = resolve_profile("default", [library], ValidationCache(None))
    assert profile is None
    assert any("unknown scheduler 'nope'" in str(d) for d in diags)


def test_the_verdict_shipped_is_the_one_a_load_uses_and_validate_checks_anyway(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict listed for default.yaml's text (here a forged warning, to see which verdict was used): a load
    with a cache uses it; `profile validate` (no cache) checks the text and says what the checker says."""
    path = shipped_profile_dir() / "default.yaml"
    sha = check_file(path)[0].sha256
    assert sha in shipped.VERDICTS
    forged = {"file": "elsewhere", "line": 2, "col": 1, "path": "$.name", "message": "forged", "severity": "warning"}
    monkeypatch.setitem(shipped.VERDICTS, sha, {"warnings": [forged]})
    _, used = check_file(path, ValidationCache(None))
    assert [str(d) for d in used] == [f"{path}:2:1: $.name: warning: forged"]  # the file is the one read
    _, checked = check_file(path)
    assert checked == []
    # A checker changed since the verdict was found (a patched checks.py): the text is checked again.
    monkeypatch.setattr(shipped, "CHECKER", "0" * 64)
    _, again = check_file(path, ValidationCache(None))
    assert again == []


def test_the_first_apply_keeps_its_profiles_verdict_for_the_runs_after_it(empty_fake_tree, tmp_path: Path) -> None:
    """The state directory does not exist when apply checks its profile: the verdict is kept until apply
    creates the directory, then stored, and the verify after it is a cache hit. A run that never creates the
    state directory (plan) leaves nothing behind."""
    t = loop_machine(empty_fake_tree, tmp_path, {"mine": "name: mine\nclasses:\n  loop: {read_ahead_kb: 256}\n"})
    assert t("plan", "-p", "mine", "loop0").code == 0
    assert not t.ctx.state.dir.exists()
    assert t("apply", "-p", "mine", "loop0").code == 0
    (entry,) = (t.ctx.state.dir / "validated").iterdir()
    stored = json.loads(entry.read_text())
    assert stored["text_sha256"] == check_file(tmp_path / "profiles" / "mine.yaml")[0].sha256
    assert t("verify", "-p", "mine", "loop0").code == 0
    assert list((t.ctx.state.dir / "validated").iterdir()) == [entry]


@pytest.mark.parametrize(("argv", "document"), [(("status", "--all"), "status"), (("verify",), "verify"),
                                                (("plan",), "plan"), (("udev", "render"), "udev-render")],
                         ids=["status", "verify", "plan", "udev render"])
def test_a_command_on_the_default_profile_loads_no_checker(fake_tree, tmp_path: Path, argv: tuple,
                                                           document: str) -> None:
    """A new machine (no state directory) on the shipped default profile: neither jsonschema nor PyYAML is
    imported (a `udev render` loaded its profile a second time, unchecked by the cache), nor typing."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPROFILEIMPORTTIME": "1"}  # each import, on stderr
    result = run_process("--json", "--sysfs-root", str(fake_tree.root), "--udev-root", str(fake_tree.udev_root),
                         "--state-dir", str(tmp_path / "state"), *argv, env=env)
    assert (result.code, result.doc["format"]) == (0, f"tunectl-{document}")
    imported = {line.rpartition("|")[2].strip() for line in result.lines if line.startswith("import time:")}
    assert "tunectl.cli" in imported  # the lines are there to read
    assert not {"jsonschema", "yaml", "typing"} & imported
    assert not (tmp_path / "state").exists()
