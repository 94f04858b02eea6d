"""The sdist and the wheel: the sdist's tests run from the sdist; the wheel carries profiles, schema, man pages, units."""

from __future__ import annotations

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
    # The fuzz tests seed hypothesis from tests/data, but their timing makes them flaky on a loaded
    # machine; the main run has them. The rest that read tests/data or the golden files run here.
    readers = sorted(str(p.relative_to(tree)) for p in (tree / "tests").rglob("test_*.py")
                     if re.search(r'"golden"|\bDATA\b|parent / "data"', p.read_text())
                     and "package" not in p.parts and "fuzz" not in p.name)
    assert len(readers) >= 3, readers
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
