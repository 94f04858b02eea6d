"""Which roots are the real machine's: a fake one is checked, confined, and never writes the real state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.system import trust
from tunectl.system.roots import STATE, Roots, is_real_sysfs


def test_the_real_machine_has_no_fake_root_even_where_lib_is_a_link_to_usr_lib() -> None:
    roots = Roots.choose({})
    assert roots.real and roots.fakes() == [] and roots.uses_real_state()


def test_every_root_a_variable_moves_is_fake_and_named_by_its_option(tmp_path: Path) -> None:
    env = {"TUNECTL_PROC_ROOT": str(tmp_path / "proc"), "TUNECTL_MODULES_ROOT": str(tmp_path / "modules")}
    roots = Roots.choose(env, sysfs_root=str(tmp_path / "sys"), state_dir=str(tmp_path / "state"))
    labels = [label for label, _ in roots.fakes()]
    assert labels == ["--sysfs-root / TUNECTL_SYSFS_ROOT", "--udev-root / TUNECTL_UDEV_ROOT", "TUNECTL_PROC_ROOT",
                      "TUNECTL_MODULES_ROOT"]
    assert not roots.uses_real_state() and Roots.choose(env, state_dir=STATE).uses_real_state()


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_a_directory_made_for_the_state_is_never_made_through_a_link_that_appeared_after_the_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ensure_dir saw /tmp/x missing, then made /tmp/x and /tmp/x/state by name: another user's link put at /tmp/x
    in between (EEXIST was taken as "made by a concurrent run") had root make `state` at the link's target (won
    once in 200 CLI runs against a swap loop). Now each is made through a descriptor of the one above it."""
    sticky, target = tmp_path / "tmp", tmp_path / "root-only"
    sticky.mkdir()
    sticky.chmod(0o1777)
    target.mkdir()
    real_lexists = os.path.lexists

    def then_the_link(path) -> bool:  # the other user wins the race right after the look
        found = real_lexists(path)
        if str(path) == str(sticky / "x") and not found:
            os.symlink(target, sticky / "x")
            os.lchown(sticky / "x", 65534, 65534)
        return found

    monkeypatch.setattr(trust.os.path, "lexists", then_the_link)
    with pytest.raises(trust.Untrusted) as refused:
        trust.ensure_dir(sticky / "x" / "state")
    monkeypatch.undo()
    assert not (target / "state").exists()  # nothing made at the link's target
    assert "changed while tunectl created it" in str(refused.value)
    # a directory another user made there meanwhile is not built in either
    (sticky / "x").unlink()
    (sticky / "y").mkdir()
    os.chown(sticky / "y", 65534, 65534)
    with pytest.raises(trust.Untrusted, match="owned by nobody"):
        trust.ensure_dir(sticky / "y" / "state")
    assert not (sticky / "y" / "state").exists()
    assert trust.ensure_dir(sticky / "z" / "state") == sticky / "z" / "state"  # and made with fixed modes
    assert [(sticky / n).stat().st_mode & 0o7777 for n in ("z", "z/state")] == [0o755, 0o755]


def test_a_root_whose_link_vanishes_while_it_is_resolved_is_no_real_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.path.realpath raises FileNotFoundError when a link on the path is removed between its lstat and its
    readlink (another user's loop on /tmp): that was exit 70 "internal error" in 2 of 200 runs."""
    def vanished(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/tmp/x")

    roots = Roots.choose({}, sysfs_root="/tmp/x/sys", state_dir="/tmp/x/state")
    monkeypatch.setattr(os.path, "realpath", vanished)
    assert not is_real_sysfs("/tmp/x/sys") and not roots.uses_real_state()
    assert [label for label, _ in roots.fakes()][0] == "--sysfs-root / TUNECTL_SYSFS_ROOT"


@pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")
def test_a_sysfs_root_named_through_a_link_another_user_can_change_is_no_real_sysfs(tmp_path: Path) -> None:
    """Taken for the real /sys, a root is never checked, and is then read and written by its name: through
    another user's link (or root's link in another user's directory) that user repoints it at a tree of theirs
    whenever they like. Such a name is a fake root, and check_trusted refuses it."""
    from tunectl.errors import UsageError
    from tunectl.system.roots import check_trusted

    tmp_path.chmod(0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    (theirs / "link").symlink_to("/sys")
    os.lchown(theirs / "link", 65534, 65534)
    (theirs / "roots").symlink_to("/sys")  # root's link, in their directory
    (tmp_path / "mine").symlink_to("/sys")  # root's, in root's: the real /sys
    assert is_real_sysfs(str(tmp_path / "mine"))
    for name in ("link", "roots"):
        sysfs = str(theirs / name)
        assert not is_real_sysfs(sysfs), name
        roots = Roots.choose({}, sysfs_root=sysfs, state_dir=str(tmp_path / "state"))
        assert not roots.real and roots.fakes()[0] == ("--sysfs-root / TUNECTL_SYSFS_ROOT", sysfs)
        with pytest.raises(UsageError, match=f"cannot be trusted: {theirs}: owned by nobody") as refused:
            check_trusted(roots)
        assert refused.value.code == "untrusted-root"
