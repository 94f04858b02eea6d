"""Where /proc is not mounted (a bare chroot, a container without it): the reopen through /proc/self/fd after a
look is not there. A tree's file (`trust.read_in_root`: doctor's rules, a tuned profile) is read all the same,
found again and compared with the look; bench says /proc is missing instead of "No such file or directory" and
the hint for a mistyped target. Here /proc is faked away (every open of /proc/self/fd/N fails as on a machine
without procfs: the `no_proc` fixture); tests/root/system/test_trust_no_proc_root.py runs the same in a mount
namespace with no procfs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.system import trust


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "before-5.6"])
def test_a_trees_file_is_read_without_proc_and_what_is_no_regular_file_is_still_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_proc: list[str], openat2: bool) -> None:
    """It failed "No such file or directory" for every file: doctor in a bare chroot read no rules file at all
    (and said nothing: a missing file is no news)."""
    monkeypatch.setattr(trust, "_openat2_missing", not openat2)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "plain").write_text("plain\n")
    (tmp_path / "etc" / "rel").symlink_to("plain")
    os.mkfifo(tmp_path / "etc" / "fifo")
    assert trust.read_in_root(str(tmp_path), "/etc/plain", 100) == b"plain\n"
    assert trust.read_in_root(str(tmp_path), "etc/rel", 100, whole=True) == b"plain\n"
    assert no_proc  # the reopen was tried first
    with pytest.raises(trust.Untrusted, match="a named pipe, not a regular file"):  # from the look: never opened
        trust.read_in_root(str(tmp_path), "/etc/fifo", 100)


def test_without_proc_another_file_at_the_name_since_the_look_is_refused_as_a_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_proc: list[str]) -> None:
    """The second open finds the name again: what stands there by then must be the file looked at."""
    (tmp_path / "f").write_text("looked at\n")
    real = trust.open_in_root

    def swapped(root, rel, flags):
        if not flags & os.O_PATH:  # between the look and the open: another file put at the name
            os.rename(tmp_path / "other", tmp_path / "f")
        return real(root, rel, flags)

    (tmp_path / "other").write_text("swapped in\n")
    monkeypatch.setattr(trust, "open_in_root", swapped)
    with pytest.raises(trust.Untrusted) as refused:
        trust.read_in_root(str(tmp_path), "f", 100)
    assert (refused.value.path, refused.value.found) == ("f", "changed while tunectl opened it")


def test_the_reopen_is_the_held_file_or_none_without_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`trust.reopen`, the one reopen of bench's reads and of read_in_root: the file held open, never its name
    again; None where /proc is not mounted; another file there (no procfs at /proc) is refused."""
    (tmp_path / "f").write_text("held\n")
    held = os.open(tmp_path / "f", os.O_PATH)
    try:
        os.rename(tmp_path / "f", tmp_path / "moved")
        (tmp_path / "f").write_text("another\n")
        fd = trust.reopen(held, os.O_RDONLY, "f")
        assert fd is not None
        try:
            assert os.read(fd, 100) == b"held\n"
        finally:
            os.close(fd)
        monkeypatch.setattr(trust, "PROC_FD", str(tmp_path / "no-proc"))
        assert trust.reopen(held, os.O_RDONLY, "f") is None
        (tmp_path / "fake-proc").mkdir()
        (tmp_path / "fake-proc" / str(held)).write_text("another\n")  # a /proc that is no procfs
        monkeypatch.setattr(trust, "PROC_FD", str(tmp_path / "fake-proc"))
        with pytest.raises(trust.Untrusted, match="is another file than the one tunectl holds open") as refused:
            trust.reopen(held, os.O_RDONLY, "f")
        assert refused.value.hint == trust.PROC_HINT
    finally:
        os.close(held)


def test_a_missing_entry_where_proc_is_there_is_no_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOENT for /proc/self/fd/N was taken as "/proc not mounted" whatever else stood there: only a missing
    /proc/self/fd is; a missing entry for a descriptor held is an error, not a second open by name."""
    (tmp_path / "f").write_text("held\n")
    (tmp_path / "proc-fd").mkdir()  # /proc/self/fd there, no entry for the descriptor
    monkeypatch.setattr(trust, "PROC_FD", str(tmp_path / "proc-fd"))
    held = os.open(tmp_path / "f", os.O_PATH)
    try:
        with pytest.raises(FileNotFoundError):
            trust.reopen(held, os.O_RDONLY, "f")
        with pytest.raises(FileNotFoundError):  # and read_in_root does not open the name again
            trust.read_in_root(str(tmp_path), "f", 100)
    finally:
        os.close(held)


def test_bench_says_proc_is_not_mounted_not_that_its_target_is_missing(tmp_path: Path, no_proc: list[str]) -> None:
    """Each point's read reopens the target held open; without /proc that said "cannot open T: No such file or
    directory", hint "name a block device ... or an existing file", of a target that is there."""
    from tunectl.errors import UsageError
    from tunectl.system import blockio

    (tmp_path / "t").write_bytes(b"x" * 10)
    held = os.open(tmp_path / "t", os.O_RDONLY)
    try:
        with pytest.raises(UsageError) as said:
            blockio.reopen(held, str(tmp_path / "t"))
    finally:
        os.close(held)
    assert said.value.message == f"cannot open {tmp_path / 't'} again: /proc is not mounted (no /proc/self/fd)"
    assert said.value.hint is not None and "mount -t proc proc /proc" in said.value.hint
