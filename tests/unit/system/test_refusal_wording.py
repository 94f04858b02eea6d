"""A refused fstab or rules file is named once, with what was found there: "X: a named pipe", never "X is changed
while ..." or "cannot write X: X: ...". Seen through the CLI with another user swapping the file under a root run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.errors import UsageError
from tunectl.mounts import fstab_file
from tunectl.system import rulesfile, trust


def test_an_fstab_whose_directory_became_a_link_says_so_without_is(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "fstab").write_text("/dev/sda1 / ext4 defaults 0 1\n")
    (tmp_path / "d").symlink_to("real")  # resolve() gave d/fstab; d became a link since
    with pytest.raises(fstab_file.NotReplaced) as e:
        fstab_file.read_current(tmp_path / "d" / "fstab")
    assert e.value.message.startswith(f"{tmp_path / 'd' / 'fstab'}: changed while tunectl looked at it"), e.value
    assert " is changed" not in e.value.message


def test_an_fstab_swapped_for_a_named_pipe_before_the_write_is_named_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fstab = tmp_path / "fstab"
    os.mkfifo(fstab)
    (tmp_path / "was").write_text("x\n")
    seen = os.stat(tmp_path / "was")  # the swap came after the last compare
    monkeypatch.setattr(fstab_file, "_read_current", lambda real: (b"x\n", seen))
    with pytest.raises(Exception) as e:
        fstab_file.replace(fstab, b"x\n", b"y\n")
    assert str(e.value).splitlines()[0] == f"cannot write {fstab}: a named pipe, not a regular file"


def test_a_rules_file_whose_directory_is_a_link_names_the_link_once(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "d").symlink_to("real")
    with pytest.raises(rulesfile.RulesError) as e:
        rulesfile.write(tmp_path / "d" / "65-tunectl.rules", b"# x\n")
    assert e.value.message.startswith(f"cannot write {tmp_path / 'd' / '65-tunectl.rules'}: {tmp_path / 'd'}: "), e.value


@pytest.mark.parametrize("same", [True, False])
def test_about_names_the_part_only_when_it_is_not_the_target(same: bool) -> None:
    e = trust.Untrusted("/a/b" if same else "/a", "a symbolic link", "hint")
    assert e.about("/a/b") == ("a symbolic link" if same else "/a: a symbolic link")


def test_a_file_to_read_that_is_no_regular_file_is_refused_in_one_wording_however_it_was_reached(
        tmp_path: Path) -> None:
    """A path given (`open_regular`: a profile), a tree's file (`read_in_root`: doctor, tuned) and a listed name
    (`open_listed`: a preload list) met by a named pipe: the first two said "name a regular file; move X aside",
    the third "move X aside", each spelled where it was raised. One function says it now (`trust.not_regular`)."""
    os.mkfifo(tmp_path / "fifo")
    refusals = []
    for read in (lambda: trust.open_regular(tmp_path / "fifo"), lambda: trust.read_in_root(tmp_path, "fifo", 10),
                 lambda: trust.open_listed(str(tmp_path / "fifo"))):
        with pytest.raises(trust.Untrusted) as refused:
            read()
        refusals.append((refused.value.found, refused.value.hint.replace(str(tmp_path / "fifo"), "fifo")))
    assert refusals == [("a named pipe, not a regular file", "name a regular file; move fifo aside")] * 3, refusals


def test_a_link_loop_is_refused_with_what_to_name_never_an_owner_or_mode_fix(tmp_path: Path) -> None:
    """Two links naming each other: check_dir said "make it root's and not group/world-writable (chown root: X;
    chmod go-w X), or move it aside" (its owner/mode hint), which ends no loop, and `mounts fix` passed that on;
    check_root said "name the directory itself". One refusal (`trust.link_loop`) for every walk now."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    looped = tmp_path / "a" / "x"
    hints = []
    for check in (trust.check_dir, trust.check_root):
        with pytest.raises(trust.Untrusted) as refused:
            check(looped)
        assert refused.value.found == "a symbolic link loop", refused.value
        hints.append(refused.value.hint)
    assert hints == ["name the directory itself"] * 2, hints
    with pytest.raises(UsageError) as refused_fstab:
        fstab_file.refuse_untrusted_dir(looped / "fstab")
    assert "a symbolic link loop" in str(refused_fstab.value), refused_fstab.value
    assert "chown" not in refused_fstab.value.hint and "name the directory itself" in refused_fstab.value.hint


@pytest.mark.parametrize("itself", [False, True], ids=["on-its-way", "itself"])
def test_a_file_where_the_state_dir_must_be_is_named_alike_by_every_state_step(tmp_path: Path, itself: bool) -> None:
    """A file at TUNECTL_STATE_DIR or on its way: `exists` (status) named it ("FILE: a regular file, not a
    directory; move FILE aside, or point ..."), but creating the directory (apply, rollback) said "a part of its
    path is not a directory" of the state directory itself and to move FILE/state aside, a path that cannot exist.
    The naming is the shared reason and hint's now: each step says the same of what is in the way."""
    from tunectl.system.state import StateError, StateStore

    (tmp_path / "file").write_text("")
    state = tmp_path / "file" if itself else tmp_path / "file" / "state"
    found = "" if itself else f"{tmp_path / 'file'}: "
    def lock(store: StateStore) -> None:
        with store.locked():
            pass

    said = []
    for step, where in ((StateStore.exists, f"state directory {state} cannot be used: "),
                        (lock, f"cannot create state directory {state}: ")):
        with pytest.raises(StateError) as refused:
            step(StateStore(state))
        assert refused.value.message.startswith(where), refused.value.message
        said.append((refused.value.message[len(where):], refused.value.hint))
    assert said == [(f"{found}a regular file, not a directory",
                     f"move {tmp_path / 'file'} aside, or point --state-dir / TUNECTL_STATE_DIR elsewhere")] * 2, said
