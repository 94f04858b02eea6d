"""The sweep of temp files a killed tunectl writer left (`trust.sweep_temps`): only its own, never a live writer's."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tunectl.system import trust

LEFT = ".out.csv.0123456789ab"  # what a SIGKILLed bench --csv out.csv leaves: `.NAME.` + 12 hex digits


def _sweep(d: Path, prefix: str = ".out.csv.") -> list[str]:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return trust.sweep_temps(fd, prefix)
    finally:
        os.close(fd)


def test_only_tunectls_own_leftovers_go(tmp_path: Path) -> None:
    (tmp_path / LEFT).write_text("half a CSV")
    keep = [".out.csv.0123456789abc", ".out.csv.0123456789AB", ".out.csv.012345678", ".other.0123456789ab",
            "out.csv.0123456789ab", ".out.csv.tmp"]
    for name in keep:
        (tmp_path / name).write_text("not tunectl's")
    (tmp_path / "target").write_text("a link's target")
    (tmp_path / ".out.csv.aaaaaaaaaaaa").symlink_to(tmp_path / "target")  # the pattern, but a link
    os.mkfifo(tmp_path / ".out.csv.bbbbbbbbbbbb")  # the pattern, but a pipe (never opened: it would block)
    (tmp_path / ".out.csv.cccccccccccc").mkdir()
    assert _sweep(tmp_path) == [LEFT]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        keep + ["target", ".out.csv.aaaaaaaaaaaa", ".out.csv.bbbbbbbbbbbb", ".out.csv.cccccccccccc"])
    assert (tmp_path / "target").read_text() == "a link's target"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_file_with_the_pattern_stays(tmp_path: Path) -> None:
    theirs = tmp_path / LEFT
    theirs.write_text("theirs")
    os.chown(theirs, 65534, 65534)
    assert _sweep(tmp_path) == [] and theirs.read_text() == "theirs"


def test_a_live_writers_temp_file_stays_and_its_write_completes(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    with trust.PendingWrite(out, shared_dir=True) as first:
        (live,) = [p.name for p in tmp_path.iterdir()]
        with trust.PendingWrite(out, shared_dir=True, sweep=True) as second:  # a second bench on the same file
            assert second.swept == [] and (tmp_path / live).exists()
            second.commit(b"second\n")
        first.commit(b"first\n")
    assert out.read_text() == "first\n" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_killed_writers_file_is_swept_by_the_next_writer(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    (tmp_path / LEFT).write_text("")
    with trust.PendingWrite(out, shared_dir=True, sweep=True) as pending:
        assert pending.swept == [LEFT] and not (tmp_path / LEFT).exists()
        pending.commit(b"rows\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_temp_file_swept_before_its_writer_locked_it_is_made_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The one window: between the writer's create and its flock a sweep may lock and remove the new file. The
    writer then finds it unlinked and makes another, so its write is never lost."""
    real = fcntl.flock
    swept: list[list[str]] = []
    calls = []

    def sweep_first(fd: int, op: int) -> None:
        calls.append(op)
        if len(calls) == 1:  # the writer's lock, the first time: a sweep (its own flock passes through) gets first
            swept.append(_sweep(tmp_path))
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", sweep_first)
    out = tmp_path / "out.csv"
    with trust.PendingWrite(out, shared_dir=True) as pending:
        assert len(swept[0]) == 1 and swept[0][0].startswith(".out.csv.")
        assert [p.name for p in tmp_path.iterdir()] not in ([], swept[0])  # a new temp file stands
        pending.commit(b"rows\n")
    assert out.read_text() == "rows\n" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_file_put_at_the_name_between_the_look_and_the_open_stays(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep looks at a name (a leftover), then opens it: whatever stands there by then is compared with the
    look (device, inode), so a file renamed over the leftover meanwhile is not removed in its place."""
    (tmp_path / LEFT).write_text("half a CSV")
    (tmp_path / "other").write_text("not a leftover")
    real = os.stat

    def swap_after_the_look(path: str, *args: object, **kwargs: object) -> os.stat_result:
        st = real(path, *args, **kwargs)
        if path == LEFT:
            os.rename(tmp_path / "other", tmp_path / LEFT)
        return st

    monkeypatch.setattr(os, "stat", swap_after_the_look)
    assert _sweep(tmp_path) == []
    monkeypatch.undo()
    assert (tmp_path / LEFT).read_text() == "not a leftover"
