"""A list's path is opened as root may follow it: another user's link on the way is refused, never followed.

Before, the list (and its LIST.cols) was opened by name, every directory link on the way followed: a user owning a
directory on the path swapped a part of it for a link to a private directory of root's, and root's `preload show`
and `replay` of u/d/L read root's other list there (printed its names, read its files), exit 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.preload import listfile
from tunectl.preload.listing import Entry, ListError

NOBODY = 65534


def _list(directory: Path, name: str) -> Path:
    directory.mkdir()
    (directory / name).write_text("x\n")
    st = os.stat(directory / name)
    entry = Entry(str(directory / name), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino, st.st_size,
                  st.st_mtime_ns, ((0, st.st_size),), None)
    listfile.write_list(str(directory / "L"), [entry])
    return directory / "L"


def _paths(path: Path) -> list[str]:
    return [e.path for _, batch in listfile.batches(str(path)) for e in batch]


def test_a_directory_on_the_way_swapped_for_another_users_link_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the link is given to another user (lchown)")
    _list(tmp_path / "d", "mine")
    _list(tmp_path / "private", "private-name")
    (tmp_path / "d").rename(tmp_path / "d.old")
    (tmp_path / "d").symlink_to(tmp_path / "private")
    os.lchown(tmp_path / "d", NOBODY, NOBODY)
    given = str(tmp_path / "d" / "L")
    with pytest.raises(ListError) as refused:
        _paths(tmp_path / "d" / "L")
    assert refused.value.message == f"{given}: {tmp_path / 'd'} on its way: a symbolic link owned by nobody " \
                                    f"(uid {NOBODY}), not root"
    with pytest.raises(ListError):
        listfile.header(given, replayed=False)  # show's reading too


def test_roots_own_link_on_the_way_is_followed_and_the_name_itself_is_no_link(tmp_path: Path) -> None:
    _list(tmp_path / "real", "mine")
    (tmp_path / "via").symlink_to("real")
    assert _paths(tmp_path / "via" / "L") == [str(tmp_path / "real" / "mine")]
    (tmp_path / "real" / "link").symlink_to("L")
    with pytest.raises(ListError, match="link: a symbolic link"):
        _paths(tmp_path / "real" / "link")
