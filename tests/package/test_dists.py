"""The sdist and the wheel: the sdist's tests run from the sdist; the wheel carries profiles, schema, man pages, units."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.package.builds import REPO, Dists, run

pytestmark = pytest.mark.package


def test_sdist_carries_every_test_file_and_the_license(dists: Dists):
    with tarfile.open(dists.sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    tracked = run(["git", "ls-files", "tests", "profiles", "man", "udev", "bin"], cwd=REPO).stdout.split()
    tracked = [t for t in tracked if not t.startswith("tests/package/")] + ["COPYING", "MANIFEST.in", "pyproject.toml"]
    assert sorted(set(tracked) - shipped) == [], f"{top} lacks these"
    assert not [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")]


def test_tests_run_from_the_unpacked_sdist(dists: Dists, tmp_path: Path):
    """Every test collects there; those that read tests/data and the golden files pass there."""
    with tarfile.open(dists.sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (tree,) = tmp_path.iterdir()
    pytest_argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "not root and not package"]
    collected = subprocess.run(pytest_argv + ["--collect-only"], cwd=tree, capture_output=True, text=True, timeout=600)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert re.search(r"^\d+(/\d+)? tests? collected", collected.stdout.splitlines()[-1]), collected.stdout[-500:]
    readers = data_readers(tree)
    assert len({r.split("::")[0] for r in readers}) >= 3, readers
    done = subprocess.run(pytest_argv + readers, cwd=tree, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert str(tree) in run([sys.executable, "-c", "import tunectl; print(tunectl.__file__)"], cwd=tree).stdout


def test_wheel_carries_profiles_schema_man_pages_and_units(dists: Dists):
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
    data = f"tunectl-{dists.wheel.name.split('-')[1]}.data/data"
    want = {"tunectl/profiles/default.yaml", "tunectl/schema/profile.schema.json", f"{data}/share/man/man8/tunectl.8",
            f"{data}/share/man/man5/tunectl-profile.5", f"{data}/lib/systemd/system/tunectl-preload-replay.service"}
    assert want <= names, sorted(want - names)


def test_rpm_spec_parses_and_builds_a_source_rpm_from_the_sdist(dists: Dists, tmp_path: Path):
    """As far as Debian's rpm goes: the spec parses, the SRPM builds, %prep unpacks the sdist.

    %build onwards needs Fedora's pyproject-rpm-macros and python3dist() build requirements.
    """
    spec = REPO / "packaging" / "rpm" / "tunectl.spec"
    defines = ["--define", f"_sourcedir {dists.sdist.parent}", "--define", f"_topdir {tmp_path}"]
    version = run(["rpmspec", "-q", "--srpm", "--qf", "%{version}", str(spec)]).stdout
    assert dists.sdist.name == f"tunectl-{version}.tar.gz"
    run(["rpmbuild", "-bs", str(spec), *defines])
    assert [p.name for p in (tmp_path / "SRPMS").iterdir()] == [f"tunectl-{version}-1.src.rpm"]
    run(["rpmbuild", "-bp", "--nodeps", str(spec), *defines])
    assert (tmp_path / "BUILD" / f"tunectl-{version}" / "tests" / "conftest.py").exists()


READS = re.compile(r'"golden"|"data"|\b(TEST_)?DATA\b|\bGOLDEN\b')


def data_readers(tree: Path) -> list[str]:
    """The unit tests that read tests/data or the golden files, directly or through a module-level name.

    Property and fuzz tests are left to the main run: their examples cost minutes, and their timing
    makes them flaky on a loaded machine.
    """
    found = []
    for path in sorted((tree / "tests" / "unit").rglob("test_*.py")):
        if "fuzz" in path.name:
            continue
        source = path.read_text()
        body = ast.parse(source).body
        names: set[str] = set()
        while True:
            more = {target for node in body for target in _bound(node)
                    if target not in names and _mentions(ast.get_source_segment(source, node), names)}
            if not more:
                break
            names |= more
        found += [f"{path.relative_to(tree)}::{node.name}" for node in body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                  and not any("given" in ast.unparse(d) for d in node.decorator_list)
                  and _mentions(ast.get_source_segment(source, node), names)]
    return found


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("test_"):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _mentions(text: str, names: set[str]) -> bool:
    return bool(READS.search(text) or any(re.search(rf"\b{re.escape(n)}\b", text) for n in names))
