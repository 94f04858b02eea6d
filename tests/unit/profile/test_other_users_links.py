"""A profile or tuned file named by a path is read through root's (or the user's) links only: a link another
user owns is refused, not followed. Before, root followed it anywhere: `profile import-tuned` printed a line of a
0600 file in its parse error, `plan -p` read keys of a file the user could not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import run_cli

NOBODY = 65534
SECRET = 'KERNEL=="loop1", ATTR{queue/read_ahead_kb}="777"\n'
TUNED = "[disk]\nreadahead=>4096\n"
PROFILE = "name: linked\nclasses:\n  rotational: {read_ahead_kb: 1024}\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a link another user owns is made with lchown (root)")


def _link(at: Path, to: Path, owner: int) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)
    os.lchown(at, owner, owner)
    return at


def test_import_tuned_follows_its_own_links_and_no_other_users(tmp_path: Path) -> None:
    secret, good = tmp_path / "secret", tmp_path / "good.conf"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    good.write_text(TUNED)
    theirs = _link(tmp_path / "theirs" / "tuned.conf", secret, NOBODY)
    mine = _link(tmp_path / "mine" / "tuned.conf", good, 0)
    ok = run_cli("profile", "import-tuned", str(mine.parent), env={})
    assert ok.code == 0 and "4096" in ok.out, ok.err
    refused = run_cli("profile", "import-tuned", str(theirs.parent), env={})
    assert refused.code == 2 and "777" not in refused.out + refused.err
    assert f"{theirs}: a symbolic link owned by nobody" in refused.err and "follows no link another user owns" in refused.err


@pytest.mark.parametrize("command", [["profile", "validate"], ["profile", "show"]])
def test_a_profile_path_follows_its_own_links_and_no_other_users(tmp_path: Path, command: list[str]) -> None:
    target = tmp_path / "p.yaml"
    target.write_text(PROFILE)
    target.chmod(0o600)
    mine = _link(tmp_path / "mine" / "p.yaml", target, 0)
    theirs = _link(tmp_path / "theirs" / "p.yaml", target, NOBODY)
    assert run_cli(*command, str(mine), env={}).code == 0
    refused = run_cli(*command, str(theirs), env={})
    assert refused.code == 2 and "1024" not in refused.out
    assert f"{theirs}: a symbolic link owned by nobody" in refused.out + refused.err


@pytest.mark.parametrize("to", ["/dev/zero", "tuned.conf"])
def test_import_tuned_names_another_users_link_to_no_file_as_the_link(tmp_path: Path, to: str) -> None:
    """Another user's link to no regular file (a device, a loop to itself) was "tuned profile file F: not a regular
    file": the check of its type followed the link before the reader refused it. It is named as the link it is,
    with what to do, as one to a file is."""
    theirs = _link(tmp_path / "theirs" / "tuned.conf", Path(to), NOBODY)
    for ref in (theirs, theirs.parent):
        refused = run_cli("profile", "import-tuned", str(ref), env={})
        assert refused.code == 2, refused.err
        assert f"{theirs}: a symbolic link owned by nobody (uid {NOBODY}), not root" in refused.err, refused.err
        assert "follows no link another user owns" in refused.err
