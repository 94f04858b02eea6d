"""`udev install|check|remove` keep to what the user scoped: the devices of the last apply, the recorded rules directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.journal_helpers import Pair
from tunectl.system import udevadm
from tunectl.udev import install as udev_commands
from tunectl.udev.render import RULES_FILE


class Recorder:
    """udevadm as a running udevd answers it; every call kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv, timeout=60, check=True, input_text=None):
        from tunectl.system.runner import Completed

        self.calls.append(tuple(argv))
        return Completed(tuple(argv), 0, "252\n" if tuple(argv) == ("udevadm", "--version") else "", "")


@pytest.fixture
def root_pair(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> tuple[Pair, Recorder]:
    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rec = Recorder()
    pair.run.ctx.run = rec
    pair.run.ctx.env = {"TUNECTL_EXECUTABLE": "/usr/sbin/tunectl"}
    return pair, rec


def test_trigger_sends_change_events_only_to_the_devices_in_scope(root_pair, tmp_path: Path) -> None:
    pair, rec = root_pair
    rules = tmp_path / "rules.d"
    rules.mkdir()
    assert pair.run("apply", "-p", "p2", "sda").code == 0
    r = pair.run("udev", "install", "--rules-dir", str(rules), "--trigger")
    assert r.code == 0, r.err
    triggers = [c for c in rec.calls if c[:2] == ("udevadm", "trigger")]
    assert triggers == [udevadm.TRIGGER + ("--sysname-match=sda",)], triggers
    assert "devices in scope (sda)" in r.out
    # unscoped rules (--all): every disk, as before
    rec.calls.clear()
    r = pair.run("udev", "install", "--all", "--rules-dir", str(rules), "--trigger")
    assert r.code == 0 and [c for c in rec.calls if c[:2] == ("udevadm", "trigger")] == [udevadm.TRIGGER]
    assert "every block disk" in r.out


def test_check_and_remove_use_the_rules_dir_install_recorded(root_pair, tmp_path: Path) -> None:
    pair, _ = root_pair
    rules = tmp_path / "elsewhere"
    rules.mkdir()
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.run("udev", "install", "--rules-dir", str(rules)).code == 0
    r = pair.run("udev", "check")
    assert r.code == 0 and "in sync" in r.out and str(rules / RULES_FILE) in r.out, r.out + r.err
    r = pair.run("udev", "remove", "--json")
    assert r.code == 0 and r.doc["removed"] is True and r.doc["path"] == str(rules / RULES_FILE), r.out
    assert not (rules / RULES_FILE).exists()
    # nothing recorded any more: the default place again
    r = pair.run("udev", "check")
    assert r.code == 1 and "/etc/udev/rules.d/" + RULES_FILE in r.out


def test_render_says_first_which_rules_it_shows_and_as_installed_is_what_install_writes(root_pair,
                                                                                        tmp_path: Path) -> None:
    pair, _ = root_pair
    assert pair.run("apply", "-p", "p2", "sda").code == 0
    r = pair.run("udev", "render", "-p", "p2")
    first = r.err.splitlines()[0]
    assert first.startswith("tunectl: note: profile p2's own rules for every device") and "--as-installed" in first
    assert "1 device(s) of the last apply's scope" in first, first
    shown = pair.run("udev", "render", "-p", "p2", "--as-installed")
    assert shown.err.splitlines()[0].startswith("tunectl: note: the rules `tunectl udev install` writes"), shown.err
    rules = tmp_path / "rules.d"
    rules.mkdir()
    assert pair.run("udev", "install", "-p", "p2", "--rules-dir", str(rules)).code == 0
    assert (rules / RULES_FILE).read_text() == shown.out
    assert shown.out != r.out
