"""A list's columns file (LIST.cols) between two users: each uses only what root or they chose, says why not, and
never removes the other's. nobody's runs are real processes of that user (setpriv), in a directory nobody owns."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import CliResult, run_process
from tests.preload_helpers import cols_of

pytestmark = pytest.mark.root

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
FILES = 1024  # the fewest a list has columns for (listfile.COLUMNS_FROM): these runs are processes of their own


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory nobody can reach (pytest's tmp_path is closed to it): `files` (FILES small files, root's,
    readable by all) and `theirs`, nobody's own directory."""
    d = Path(tempfile.mkdtemp(prefix="tunectl-cols-", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        (d / "files").mkdir(mode=0o755)
        for i in range(FILES):
            (d / "files" / f"f{i}").write_bytes(b"x" * 64)
        (d / "few").mkdir(mode=0o755)
        for i in range(2):
            (d / "few" / f"g{i}").write_bytes(b"y" * 64)
        (d / "theirs").mkdir(mode=0o755)
        os.chown(d / "theirs", NOBODY, NOBODY)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def as_nobody(*argv: str) -> CliResult:
    return run_process(*argv, prefix=AS_NOBODY, env={"PATH": os.environ["PATH"]}, timeout=120)


def test_nobodys_shorter_list_leaves_roots_columns_file_beside_it(base: Path) -> None:
    lst = base / "theirs" / "x.list"
    done = run_process("-q", "preload", "collect", str(base / "files"), "-o", str(lst), timeout=120)
    assert done.code == 0, done.err
    roots = cols_of(lst).read_bytes()
    assert os.stat(cols_of(lst)).st_uid == 0
    done = as_nobody("-q", "preload", "collect", str(base / "few"), "-o", str(lst))
    assert done.code == 0, done.err
    assert os.stat(lst).st_uid == NOBODY  # nobody's directory: its list replaced root's
    assert cols_of(lst).read_bytes() == roots and os.stat(cols_of(lst)).st_uid == 0  # root's file: not nobody's to remove


def test_each_user_is_told_whose_columns_it_did_not_use(base: Path) -> None:
    lst = base / "theirs" / "x.list"
    done = as_nobody("-q", "preload", "collect", str(base / "files"), "-o", str(lst))
    assert done.code == 0, done.err
    assert os.stat(cols_of(lst)).st_uid == NOBODY
    mine = as_nobody("--json", "preload", "replay", str(lst))
    assert mine.code == 0 and mine.doc["columns"] == {"status": "used", "reason": ""}, mine.err
    shown = run_process("-v", "preload", "show", str(lst), timeout=120)  # root: the list is nobody's, so are its cols
    assert shown.code == 0, shown.err
    why = f"owned by nobody (uid {NOBODY}), not root"
    assert f"columns: {lst}.cols not used: {why}; the list was decoded from its JSON" in shown.out.splitlines()
    done = run_process("-q", "preload", "collect", str(base / "few"), "-o", str(lst), timeout=120)
    assert done.code == 0, done.err
    assert os.path.exists(cols_of(lst))  # nobody's: root does not remove it either
