"""What the repository tracks: nothing of one machine. A worktree's `ln -s /work/main/.venv .venv` was committed twice
(the ignore rule then matched a directory only): the fast-forward onto main replaced main's virtual environment with a
link to itself, and every worktree that shared it stopped. The landing line runs this file before it fast-forwards."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.harness import REPO


def _tracked(*args: str) -> str:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist or a package build)")
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def test_no_virtual_environment_and_no_link_out_of_the_tree_is_tracked() -> None:
    venvs = _tracked("ls-files", "--", ".venv", ".venv-collection").split()
    assert venvs == [], f"{venvs} tracked: `git rm --cached {' '.join(venvs)}` and commit (never the local venv)"
    links = [line.split("\t", 1)[1] for line in _tracked("ls-files", "-s").splitlines() if line.startswith("120000 ")]
    outside = [f"{link} -> {(REPO / link).readlink()}" for link in links
               if (REPO / link).is_symlink() and str((REPO / link).readlink()).startswith("/")]
    assert outside == [], f"links to absolute paths tracked (a machine's own paths): {outside}"


def test_two_landings_that_each_add_a_schema_changelog_line_merge_without_a_conflict(tmp_path) -> None:
    """Each landing adds a line at the top of the schema CHANGELOG's list: every merge of two of them conflicted
    there. The file merges by union (.gitattributes): both new lines kept, none lost, no conflict to resolve."""
    _tracked("rev-parse", "HEAD")  # skips outside a git checkout
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, env=env, check=False)

    changelog = "tunectl/schema/CHANGELOG.md"
    (tmp_path / "tunectl" / "schema").mkdir(parents=True)
    base = (REPO / changelog).read_text()
    (tmp_path / changelog).write_text(base)
    shutil.copyfile(REPO / ".gitattributes", tmp_path / ".gitattributes")
    assert git("init", "-q", "-b", "main").returncode == 0
    git("add", ".")
    git("commit", "-qm", "base")
    top = "## Since the first versions\n\n"
    listed = base.split(top, 1)[1].split("\n## ", 1)[0]  # a union merge keeps whole lines: one entry, one line
    assert all(line.startswith("- `tunectl-") for line in listed.splitlines() if line), listed
    for branch in ("one", "two"):
        git("checkout", "-qb", branch, "main")
        (tmp_path / changelog).write_text(base.replace(top, f"{top}- `tunectl-error` 1: the {branch} landing\n", 1))
        git("commit", "-qam", branch)
    merged = git("merge", "--no-edit", "one")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    text = (tmp_path / changelog).read_text()
    assert "- `tunectl-error` 1: the one landing\n" in text and "- `tunectl-error` 1: the two landing\n" in text
    assert text.count("\n") == base.count("\n") + 2 and "<<<<<<<" not in text  # every earlier line kept, once


def test_no_two_test_modules_outside_a_package_share_a_basename() -> None:
    """pytest imports a test module outside a package (no __init__.py beside it) by its basename alone: two such
    tests/**/test_x.py make the whole suite error at collection ("import file mismatch"). Last stop a
    tests/unit/... and a tests/root/... test_trust_no_proc.py did, and the landing line (tests/unit only) never saw
    it. Modules inside a package (tests/vm) are imported by their dotted name and may repeat a basename."""

    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if not (path.parent / "__init__.py").exists():
            seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert shared == {}, f"test modules sharing a basename (rename one; pytest cannot collect both): {shared}"
