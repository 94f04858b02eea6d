"""trust.read_whole: a file read whole or refused (TooLarge), never taken in part."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.system import trust


def _read(path: Path, cap: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return trust.read_whole(fd, path, cap)
    finally:
        os.close(fd)


def test_a_file_exactly_at_the_cap_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 10)
    assert _read(tmp_path / "f", 10) == b"x" * 10


def test_one_byte_past_the_cap_is_too_large_with_path_cap_and_size(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(trust.TooLarge) as e:
        _read(tmp_path / "f", 10)
    assert (e.value.path, e.value.cap, e.value.size) == (str(tmp_path / "f"), 10, 11)


def test_the_size_said_is_the_files_not_what_was_read(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 5000)
    with pytest.raises(trust.TooLarge) as e:
        _read(tmp_path / "f", 10)
    assert e.value.size == 5000


def test_an_empty_file_is_empty(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    assert _read(tmp_path / "f", 10) == b""


def test_read_regular_and_read_in_root_read_whole_or_refuse(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 11)
    assert len(trust.read_regular(tmp_path / "f", 10)) == 11  # not whole: the caller's up to cap + 1, as before
    with pytest.raises(trust.TooLarge):
        trust.read_regular(tmp_path / "f", 10, whole=True)
    with pytest.raises(trust.TooLarge):
        trust.read_in_root(tmp_path, "f", 10, whole=True)
    assert trust.read_in_root(tmp_path, "f", 11, whole=True) == b"x" * 11
