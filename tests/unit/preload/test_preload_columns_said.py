"""`preload show -v` and `replay -v` (and --json's "columns") say whether the list's columns file (LIST.cols) was
used and why not. Before, a declined LIST.cols was passed over without a word (the reason was dropped)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.harness import run_cli
from tests.preload_helpers import collected, cols_of
from tunectl.preload import listfile

NOBODY = 65534
ANOTHER_LIST = "made from another list (or this one before it changed)"


@pytest.fixture(autouse=True)
def columns_from_three(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listfile, "COLUMNS_FROM", 3)  # a list of 3 files or more has columns; these lists are short


def said(verb: str, lst: Path, files: int = 4) -> tuple[dict, list[str]]:
    """What `preload VERB` says of the columns: --json's "columns", and the lines -v prints; the files it read are
    the list's, whichever way it was read."""
    r = run_cli("--json", "preload", verb, str(lst))
    assert r.code == 0 and r.doc["files"] == files, r.err
    text = run_cli("-v", "preload", verb, str(lst))
    assert text.code == 0, text.err
    return r.doc["columns"], [line for line in text.out.splitlines() if line.startswith("columns: ")]


@pytest.mark.parametrize("verb", ["show", "replay"])
def test_columns_made_from_the_list_are_said_to_be_used(tmp_path: Path, verb: str) -> None:
    lst = collected(tmp_path)
    assert cols_of(lst).is_file()
    assert said(verb, lst) == ({"status": "used", "reason": ""},
                               [f"columns: {lst}.cols used (its entries, not decoded from the list's JSON)"])
    quiet = run_cli("preload", verb, str(lst))
    assert "\ncolumns: " not in "\n" + quiet.out  # said under -v only


def rewritten(lst: Path) -> None:
    """The list rewritten in place (an editor that keeps the inode): the same inode, another mtime."""
    st = os.stat(lst)
    lst.write_bytes(lst.read_bytes())
    os.utime(lst, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a write within one clock tick keeps the mtime


def recreated(lst: Path) -> None:
    """The list removed and made again with the same bytes (`rm`, then `cp` of a copy): another inode."""
    data = lst.read_bytes()
    with open(lst, "rb"):  # held open: the file system cannot give the new file the old one's inode number
        lst.unlink()
        lst.write_bytes(data)


def anothers(lst: Path) -> None:
    """The columns of another list, of as many files, copied beside this one."""
    other = collected(lst.parent, name="other.list", folder="other")
    shutil.copyfile(cols_of(other), cols_of(lst))


@pytest.mark.parametrize("verb", ["show", "replay"])
@pytest.mark.parametrize("change", [rewritten, recreated, anothers])
def test_columns_of_another_list_or_of_this_one_before_it_changed_are_said_declined(tmp_path: Path, verb: str,
                                                                                    change) -> None:  # noqa: ANN001
    lst = collected(tmp_path)
    change(lst)
    doc, lines = said(verb, lst)
    assert doc == {"status": "declined", "reason": ANOTHER_LIST}
    assert lines == [f"columns: {lst}.cols not used: {ANOTHER_LIST}; the list was decoded from its JSON"]
    shown = run_cli("--json", "preload", "show", str(lst)).doc
    assert sorted(e["path"] for e in shown["entries"]) == [str(tmp_path / "files" / f"f{i}") for i in range(4)]


@pytest.mark.parametrize("how, reason", [
    ("group-writable", "mode 0664: writable by its group"),
    ("a link", "a symbolic link"),
    ("another user's", f"owned by nobody (uid {NOBODY}), not by the list's owner, root (uid 0)"),
])
def test_columns_another_user_may_have_chosen_are_said_declined(tmp_path: Path, how: str, reason: str) -> None:
    lst = collected(tmp_path)
    cols = cols_of(lst)
    if how == "group-writable":
        cols.chmod(0o664)
    elif how == "a link":
        cols.rename(tmp_path / "real.cols")
        cols.symlink_to("real.cols")
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root: the columns file is given to another user (chown)")
        os.chown(cols, NOBODY, NOBODY)
        reason = reason.replace("nobody (uid", f"{_name(NOBODY)} (uid")
    for verb in ("show", "replay"):
        doc, lines = said(verb, lst)
        assert doc == {"status": "declined", "reason": reason}, verb
        assert lines == [f"columns: {cols} not used: {reason}; the list was decoded from its JSON"], verb


def _name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def test_a_list_without_columns_says_why(tmp_path: Path) -> None:
    short = collected(tmp_path, files=2, name="short.list")
    assert not cols_of(short).exists()
    for verb in ("show", "replay"):
        assert said(verb, short, files=2) == (
            {"status": "absent", "reason": "none is made for a list of fewer than 3 or more than 262144 files"},
            ["columns: none used: none is made for a list of fewer than 3 or more than 262144 files; the list was "
             "decoded from its JSON"])
    lst = collected(tmp_path)
    cols_of(lst).unlink()
    assert said("replay", lst)[0] == {"status": "absent", "reason": "none beside the list"}


def test_the_reason_words_the_one_trust_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunectl.system import trust

    def looked(uid: int, mode: int) -> os.stat_result:
        return os.stat_result((0o100000 | mode, 1, 1, 1, uid, uid, 10, 0, 0, 0))

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    theirs = f"owned by {trust.owner(NOBODY)}, neither root nor you"
    assert [trust.why_chosen_by_other(looked(uid, mode)) for uid, mode in
            [(1000, 0o644), (0, 0o644), (NOBODY, 0o644), (1000, 0o664), (0, 0o646)]] == \
        ["", "", theirs, "mode 0664: writable by its group", "mode 0646: writable by others"]
    assert [trust.chosen_by_no_other(looked(uid, 0o644)) for uid in (1000, 0, NOBODY)] == [True, True, False]
    assert trust.chosen_by_other(looked(NOBODY, 0o644)) is None  # not root: a user's run acts with its own rights
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert trust.chosen_by_other(looked(NOBODY, 0o644)) == f"owned by {trust.owner(NOBODY)}, not root"


def test_the_lines_read_the_status_by_the_names_columns_read_defines(monkeypatch: pytest.MonkeyPatch) -> None:
    """`text.columns_used` compares with `ColumnsRead.USED` / `DECLINED`, the one definition of the statuses, not
    literals of its own: renamed there, the lines still say used / declined."""
    from tunectl.preload.text import columns_used

    monkeypatch.setattr(listfile.ColumnsRead, "USED", "taken")
    monkeypatch.setattr(listfile.ColumnsRead, "DECLINED", "refused")
    assert columns_used("L", listfile.ColumnsRead("taken")) == \
        ["columns: L.cols used (its entries, not decoded from the list's JSON)"]
    assert columns_used("L", listfile.ColumnsRead("refused", "a link")) == \
        ["columns: L.cols not used: a link; the list was decoded from its JSON"]
    assert columns_used("L", listfile.ColumnsRead(listfile.ColumnsRead.ABSENT, "none beside the list")) == \
        ["columns: none used: none beside the list; the list was decoded from its JSON"]
