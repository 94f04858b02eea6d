"""`-p FILE`: the reference the record keeps is the walk's path, never realpath's through a link another user
swapped in after the profile was read (realpath followed it, or ended in EINVAL: "internal error")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.errors import UsageError
from tunectl.tuning import intent


def test_a_directory_swapped_for_another_users_link_after_the_read_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the link is given to another user (lchown)")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "p.yaml").write_text("name: p\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "p.yaml").write_text("name: secret\n")
    assert intent.absolute_ref(str(tmp_path / "d" / "p.yaml")) == str(tmp_path / "d" / "p.yaml")
    os.rename(tmp_path / "d", tmp_path / "d.old")
    (tmp_path / "d").symlink_to(tmp_path / "secret")
    os.lchown(tmp_path / "d", 65534, 65534)
    with pytest.raises(UsageError, match="changed while tunectl read it") as refused:
        intent.absolute_ref(str(tmp_path / "d" / "p.yaml"))
    assert refused.value.code == "untrusted-link"


def test_a_library_name_and_roots_own_link_are_kept_as_before(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "p.yaml").write_text("name: p\n")
    (tmp_path / "via").symlink_to("real")
    assert intent.absolute_ref("database") == "database"
    assert intent.absolute_ref(str(tmp_path / "via" / "p.yaml")) == str(tmp_path / "real" / "p.yaml")
