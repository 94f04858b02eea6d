"""`udev check`'s rules file is read as root may follow its path: another user's link on the way is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOBODY = 65534


def test_udev_checks_rules_file_is_read_through_no_other_users_link(tmp_path: Path) -> None:
    """The same for `udev check --rules-dir DIR`: through nobody's link to a private directory of root's, root's
    file of that name there was read and shown in the diff."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the link is given to another user (lchown)")
    from tunectl.system import rulesfile

    (tmp_path / "private").mkdir()
    (tmp_path / "private" / rulesfile.RULES_FILE).write_text("private line\n")
    (tmp_path / "rules").symlink_to(tmp_path / "private")
    assert rulesfile.read(tmp_path / "rules" / rulesfile.RULES_FILE) == "private line\n"  # root's own link
    os.lchown(tmp_path / "rules", NOBODY, NOBODY)
    with pytest.raises(rulesfile.RulesError, match="on its way: a symbolic link owned by nobody"):
        rulesfile.read(tmp_path / "rules" / rulesfile.RULES_FILE)
    (tmp_path / "private" / rulesfile.RULES_FILE).write_text("#" * rulesfile.MAX_RULES_BYTES + "\n")
    with pytest.raises(rulesfile.RulesError, match="larger than"):  # was read in part
        rulesfile.read(tmp_path / "private" / rulesfile.RULES_FILE)
