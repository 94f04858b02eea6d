"""collect and record remove the columns file (LIST.cols) an earlier list left when they write none, only if it is
this user's own columns file. Before, it stayed beside a list that has none: harmless (bound to the list it was
made from, so declined on read), but litter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.preload_helpers import collected, cols_of
from tunectl.preload import listfile
from tunectl.preload.listing import Entry

NOBODY = 65534


@pytest.fixture(autouse=True)
def columns_from_three(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listfile, "COLUMNS_FROM", 3)  # a list of 3 files or more has columns; these lists are short


@pytest.mark.parametrize("verb", ["collect", "record"])
def test_a_list_written_without_columns_removes_the_stale_ones(tmp_path: Path, verb: str) -> None:
    lst = collected(tmp_path)
    assert cols_of(lst).is_file()
    if verb == "collect":
        collected(tmp_path, files=2)  # the same list, shorter now: none is made for it
    else:
        (tmp_path / "empty").mkdir()
        r = run_cli("preload", "record", "--method", "diff", "--scope", str(tmp_path / "empty"), "-o", str(lst),
                    "--", "true")
        assert r.code == 0, r.err
    assert not cols_of(lst).exists()


def test_columns_that_cannot_hold_the_entries_leave_no_stale_file(tmp_path: Path) -> None:
    lst = collected(tmp_path)
    same_bytes = Entry("/d/\udcc3\udca9", "8:1", 1, 1, 0, ((0, 1),), None)  # no columns can hold it: not equal to é
    listfile.write_list(str(lst), [same_bytes] * 3)
    assert not cols_of(lst).exists()


@pytest.mark.parametrize("what", ["a link", "not a columns file", "another user's"])
def test_only_this_users_own_columns_file_is_removed(tmp_path: Path, what: str) -> None:
    lst = collected(tmp_path)
    cols = cols_of(lst)
    kept = cols
    if what == "a link":
        kept = tmp_path / "real.cols"
        cols.rename(kept)
        cols.symlink_to(kept)
    elif what == "not a columns file":
        cols.write_text("my notes on x.list\n")
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root: the columns file is given to another user (chown)")
        os.chown(cols, NOBODY, NOBODY)
    before = kept.read_bytes()
    collected(tmp_path, files=2)
    assert os.path.lexists(cols) and kept.read_bytes() == before
    assert os.path.islink(cols) == (what == "a link")
