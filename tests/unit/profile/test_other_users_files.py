"""As root, a file whose text decides what root does is root's alone (SPEC 4a): a profile named by `-p FILE`
(what root writes to sysfs), a tuned profile import-tuned turns into one, a preload list (what root reads). One
another user owns or may write is refused, with its owner or mode and what to do; not as root, nothing changes.
Before, `-p FILE` and tuned files were read whatever their owner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, sata_hdd
from tests.harness import run_cli
from tests.tuning_helpers import Tunectl, snapshot, snapshot_all
from tunectl.system import trust

NOBODY = 65534
PROFILE = "name: theirs\nclasses:\n  rotational: {read_ahead_kb: 1024}\n"
TUNED = "[disk]\nreadahead=>4096\n"

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a file another user owns is made with chown (root)")


def _file(path: Path, text: str, mode: int = 0o644, owner: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, owner, owner)
    return path


@as_root
@pytest.mark.parametrize("mode, owner, said", [
    (0o644, NOBODY, "owned by nobody (uid 65534), not root"),
    (0o664, 0, "mode 0664: writable by its group"),
    (0o646, 0, "mode 0646: writable by others"),
])
def test_root_applies_no_profile_another_user_can_change(empty_fake_tree: FakeTree, tmp_path: Path, mode: int,
                                                         owner: int, said: str) -> None:
    sata_hdd(empty_fake_tree)
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    profile = _file(tmp_path / "home" / "p.yaml", PROFILE, mode, owner)
    before = snapshot_all(empty_fake_tree)
    r = t("apply", "-p", str(profile), "sda")
    assert r.code == 2, (r.out, r.err)
    assert f"{profile}: {said}: as root, tunectl acts on no file another user can change" in r.out + r.err
    assert f"chown root: {profile}; chmod go-w {profile}" in r.out + r.err
    assert snapshot_all(empty_fake_tree) == before and not (tmp_path / "state" / "journal.json").exists()
    os.chown(profile, 0, 0)
    profile.chmod(0o644)  # reviewed and made root's: used
    assert t("apply", "-p", str(profile), "sda").code == 0
    assert snapshot(empty_fake_tree, "sda")["read_ahead_kb"] == "1024"


@as_root
def test_root_imports_no_tuned_profile_another_user_can_change(tmp_path: Path) -> None:
    conf = _file(tmp_path / "theirs" / "tuned.conf", TUNED, 0o644, NOBODY)
    r = run_cli("profile", "import-tuned", str(conf.parent), env={})
    assert r.code == 2 and "4096" not in r.out, (r.out, r.err)
    assert f"{conf}: owned by nobody (uid 65534), not root: as root, tunectl acts on no file" in r.err, r.err
    os.chown(conf, 0, 0)
    assert run_cli("profile", "import-tuned", str(conf.parent), env={}).code == 0


def test_the_rule_holds_only_for_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One function decides for every such input; a user's own run acts with that user's rights only."""
    st = os.stat_result((0o100664, 1, 1, 1, 1000, 1000, 10, 0, 0, 0))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert trust.chosen_by_other(st) is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert trust.chosen_by_other(st) == f"owned by {trust.owner(1000)}, not root"
    root_group_writable = os.stat_result((0o100664, 1, 1, 1, 0, 0, 10, 0, 0, 0))
    assert trust.chosen_by_other(root_group_writable) == "mode 0664: writable by its group"
    assert trust.chosen_by_other(os.stat_result((0o100644, 1, 1, 1, 0, 0, 10, 0, 0, 0))) is None
