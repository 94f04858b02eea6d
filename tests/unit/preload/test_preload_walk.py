"""`preload collect` walks a tree by descriptor: a subdirectory swapped while the walk is in the tree is passed over.

The swap is made at the one moment that matters, deterministically: when the walk has listed the top directory
(d_type said `sub` is a directory) and before it goes into `sub`. The hostile version (another user's exchange
loop, as root) is in tests/root/preload/test_preload_links.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunectl.preload.collect import collect, walk


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """(the tree, the other directory): tree/kept/k1, tree/sub/s1 and s2, other/secret-1 and secret-2."""
    tree, other = tmp_path / "tree", tmp_path / "other"
    for d, names in ((tree / "kept", ["k1"]), (tree / "sub", ["s1", "s2"]), (other, ["secret-1", "secret-2"])):
        d.mkdir(parents=True)
        for name in names:
            (d / name).write_bytes(b"x" * 100)
    (tree / "top-file").write_bytes(b"y" * 10)
    return tree, other


class _SwapAfterListing:
    """os.scandir, but once the listing of `directory` ends, `swap` runs (the walk has looked at its entries and
    not yet gone into any of them). Named by path or by descriptor: the same directory by its device and inode."""

    def __init__(self, directory: Path, swap, real=os.scandir) -> None:  # noqa: ANN001
        self.st, self.swap, self.real, self.done = os.stat(directory), swap, real, False

    def __call__(self, path=".") -> object:  # noqa: ANN001
        it = self.real(path)
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
        return _Listing(it, self) if (st.st_dev, st.st_ino) == (self.st.st_dev, self.st.st_ino) else it


class _Listing:
    def __init__(self, it, hook: _SwapAfterListing) -> None:  # noqa: ANN001
        self.it, self.hook = it, hook

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.it.close()

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> os.DirEntry:
        try:
            return next(self.it)
        except StopIteration:
            if not self.hook.done:
                self.hook.done = True
                self.hook.swap()
            raise

    def close(self) -> None:
        self.it.close()


@pytest.mark.parametrize("swapped_for", ["a link", "another directory"])
def test_a_subdirectory_swapped_after_the_walk_looked_at_it_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_for: str) -> None:
    tree, other = _tree(tmp_path)

    def swap() -> None:
        os.rename(tree / "sub", tmp_path / "sub.real")
        if swapped_for == "a link":
            os.symlink(other, tree / "sub")  # this user's own link: the old walk listed through it and kept the names
        else:
            os.rename(other, tree / "sub")

    monkeypatch.setattr(os, "scandir", _SwapAfterListing(tree, swap))
    report = collect([str(tree)], str(tmp_path / "out.list"))
    seen = [e.path for e in report.entries] + [s.path for s in report.skipped]
    assert not [p for p in seen if "secret" in p], seen  # nothing of the other directory, listed or skipped
    assert sorted(e.path for e in report.entries) == [str(tree / "kept" / "k1"), str(tree / "top-file")]
    assert report.skipped == []


def test_paths_are_the_tree_as_named_and_the_walk_holds_no_descriptor_after(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tree, _ = _tree(tmp_path)
    (tmp_path / "ln").symlink_to(tree)  # this user's link, named as the top: followed, its name kept in the paths
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir("/proc/self/fd"))
    found = [f.path for f in walk(["ln/", "./tree/sub", "ln/top-file", str(tmp_path / "ln" / "kept")])]
    assert sorted(os.listdir("/proc/self/fd")) == before
    ln, sub = tmp_path / "ln", tree / "sub"
    assert found[0] == str(ln / "top-file")  # a directory's files before its subdirectories
    assert sorted(found[1:4]) == [str(ln / "kept" / "k1"), str(ln / "sub" / "s1"), str(ln / "sub" / "s2")]
    assert sorted(found[4:6]) == [str(sub / "s1"), str(sub / "s2")]
    assert found[6:] == [str(tree / "top-file"), str(ln / "kept" / "k1")]  # a file named: the file it resolves to
    partial = iter(walk([str(tree)]))
    next(partial)
    partial.close()  # a walk left part way closes what it held
    assert sorted(os.listdir("/proc/self/fd")) == before



def test_each_path_named_is_judged_once_and_its_skip_comes_first(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A path named was judged twice: once for the report's skipped line, once more by the walk (two walks of its
    links, which another user could change in between). Now one judgement decides both; the skips of the paths
    named still come first, in the order named, before any skip of a file in a tree."""
    from tunectl.preload import collect as collect_module
    from tunectl.system import trust

    tree, _ = _tree(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "gone").symlink_to(tmp_path / "nothing")
    (tree / "kept" / "k1").chmod(0)  # a file in the tree that cannot be read: its skip after the named ones
    judged: list[str] = []

    def walk_once(path: str, *args: object, **kwargs: object) -> trust.Landed:
        judged.append(path)
        return real(path, *args, **kwargs)

    real = trust.walk
    monkeypatch.setattr(trust, "walk", walk_once)
    monkeypatch.setattr(collect_module.trust, "walk", walk_once)
    named = [str(tree), str(tmp_path / "pipe"), str(tree / "top-file"), str(tmp_path / "gone")]
    report = collect(named, str(tmp_path / "x.list"))
    assert sorted(p for p in judged if p in named) == sorted(named)  # once each (the list's own walk aside)
    skipped = [(s.path, s.status) for s in report.skipped]
    assert skipped[:2] == [(str(tmp_path / "pipe"), "unreadable"), (str(tmp_path / "gone"), "vanished")]
    if os.geteuid() != 0:  # root reads a mode-0 file
        assert skipped[2:] == [(str(tree / "kept" / "k1"), "unreadable")]
    assert sorted(e.path for e in report.entries) == sorted(
        [str(tree / "top-file"), str(tree / "kept" / "k1"), str(tree / "sub" / "s1"), str(tree / "sub" / "s2")]
        if os.geteuid() == 0 else [str(tree / "top-file"), str(tree / "sub" / "s1"), str(tree / "sub" / "s2")])


@pytest.mark.parametrize("swapped_for", ["a link", "another directory", "nothing", "a link to a file"])
def test_a_path_named_that_changes_after_its_judgement_is_a_skip_not_a_silent_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_for: str) -> None:
    """Another user's directory (or file) named to collect, swapped between the judgement and the open: the walk
    lists nothing of it (nothing through the link) and says so, a skip line and exit 3 as when the judgement
    itself sees the link. It wrote an empty list and exited 0 with nothing said (an exchange loop as nobody
    against root's collect: 2 runs in 60)."""
    from tunectl.preload import collect as collect_module

    tree, other = _tree(tmp_path)
    named = tree / "top-file" if swapped_for == "a link to a file" else tree

    def judge_then_swap(path: str) -> object:
        landed = real(path)
        os.rename(named, tmp_path / "named.real")
        if swapped_for == "another directory":
            os.rename(other, named)
        elif swapped_for != "nothing":
            os.symlink(other / "secret-1" if swapped_for == "a link to a file" else other, named)
        return landed

    real = collect_module._judge
    monkeypatch.setattr(collect_module, "_judge", judge_then_swap)
    report = collect([str(named)], str(tmp_path / "out.list"))
    assert report.entries == []
    assert [(s.path, s.status) for s in report.skipped] == [
        (str(named), "vanished" if swapped_for == "nothing" else "unreadable")]
    assert report.exit_code == (0 if swapped_for == "nothing" else 3)


def test_a_name_mounted_over_is_looked_at_through_the_mount_and_listed_only_as_a_regular_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """d_type is the name's own type, not that of what is mounted on it: the open crosses no mount (EXDEV), what is
    there is looked at through it first and listed only as a regular file (a device node mounted over a name,
    which takes root, is tests/root/preload/test_preload_mounted_over.py's). Here openat2 answers for `top-file`
    as it does for a mount point."""
    import errno

    from tunectl.system import trust

    tree, _ = _tree(tmp_path)
    real, asked = trust._openat2, []

    def openat2(dir_fd: int, rel: str, flags: int, resolve: int) -> int:
        if rel == "top-file":
            asked.append(resolve)
            if resolve & trust._RESOLVE_NO_XDEV:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), rel)
        return real(dir_fd, rel, flags, resolve)

    monkeypatch.setattr(trust, "_openat2", openat2)
    report = collect([str(tree)], str(tmp_path / "t.list"))
    assert asked == [trust._RESOLVE_NO_XDEV] and not report.skipped
    assert sorted(e.path for e in report.entries) == sorted(
        str(tree / p) for p in ("kept/k1", "sub/s1", "sub/s2", "top-file"))
