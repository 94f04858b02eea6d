"""The sdist and the wheel: the sdist's tests run from the sdist; the wheel carries profiles, schema, man pages, units
and the compiled data pass, which a wheel built without a compiler goes without; the RPM spec as far as Debian goes."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.package.builds import REPO, Dists, data_pass, debian_env, run

pytestmark = pytest.mark.package

DATAPASS_C = "tunectl/preload/_datapass.c"
DATAPASS_SO = "tunectl/preload/_datapass.abi3.so"


def test_sdist_carries_every_test_file_and_the_license(dists: Dists):
    with tarfile.open(dists.sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    tracked = run(["git", "ls-files", "tests", "profiles", "man", "udev", "bin"], cwd=REPO).stdout.split()
    tracked = [t for t in tracked if not t.startswith("tests/package/")] + ["COPYING", "MANIFEST.in", "pyproject.toml",
                                                                             "setup.cfg", "setup.py", DATAPASS_C]
    assert sorted(set(tracked) - shipped) == [], f"{top} lacks these"
    assert not [n for n in shipped if "__pycache__" in n or n.endswith((".pyc", ".so"))]


def test_tests_run_from_the_unpacked_sdist(dists: Dists, tmp_path: Path):
    """Every test collects there; those that read tests/data and the golden files pass there."""
    with tarfile.open(dists.sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (tree,) = tmp_path.iterdir()
    pytest_argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "not root and not package"]
    # An unpacked sdist is a source tree: its compiled data pass is not built (the extension is optional), so the
    # tests that need it skip there, saying so, even where this run requires it (CI=true, TUNECTL_REQUIRE_DATAPASS).
    source_tree = {k: v for k, v in os.environ.items() if k not in ("CI", "TUNECTL_REQUIRE_DATAPASS")}
    collected = subprocess.run(pytest_argv + ["--collect-only"], cwd=tree, capture_output=True, text=True, timeout=600,
                               env=source_tree)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert re.search(r"^\d+(/\d+)? tests? collected", collected.stdout.splitlines()[-1]), collected.stdout[-500:]
    readers = data_readers(tree)
    assert len({r.split("::")[0] for r in readers}) >= 3, readers
    done = subprocess.run(pytest_argv + readers, cwd=tree, capture_output=True, text=True, timeout=900, env=source_tree)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert str(tree) in run([sys.executable, "-c", "import tunectl; print(tunectl.__file__)"], cwd=tree).stdout


def test_wheel_carries_profiles_schema_man_pages_and_units(dists: Dists):
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
    data = f"tunectl-{dists.wheel.name.split('-')[1]}.data/data"
    want = {"tunectl/profiles/default.yaml", "tunectl/schema/profile.schema.json", f"{data}/share/man/man8/tunectl.8",
            f"{data}/share/man/man5/tunectl-profile.5", f"{data}/lib/systemd/system/tunectl-preload-replay.service"}
    assert want <= names, sorted(want - names)


def test_wheel_carries_the_compiled_data_pass_for_every_cpython_from_3_9(dists: Dists, package_tmp: Path,
                                                                           tmp_path: Path):
    """One wheel per platform, not per Python: the extension is built against the limited API of 3.9 (abi3)."""
    assert dists.wheel.name.endswith(f"-cp39-abi3-{sysconfig.get_platform().replace('-', '_')}.whl"), dists.wheel.name
    with zipfile.ZipFile(dists.wheel) as wheel:
        assert DATAPASS_SO in wheel.namelist()
        assert "Root-Is-Purelib: false" in wheel.read(f"tunectl-{dists.wheel.name.split('-')[1]}.dist-info/WHEEL").decode()
    assert installed_data_pass(dists.wheel, tmp_path, debian_env(package_tmp)) == "compiled"


def test_a_wheel_built_where_nothing_compiles_installs_and_reads_with_the_python_loop(dists: Dists, package_tmp: Path,
                                                                                      tmp_path: Path):
    """The extension is optional: from the sdist with a compiler that fails (CC=false) the build says so and goes
    on; the wheel, without the .so, installs and `preload replay` reads every file through the Python loop."""
    with tarfile.open(dists.sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    (tree,) = (tmp_path / "src").iterdir()
    env = debian_env(package_tmp, CC="false")
    built = run(["python3", "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "dist"), str(tree)],
                env=env)
    assert 'building extension "tunectl.preload._datapass" failed' in built.stdout + built.stderr, built.stdout
    (wheel,) = (tmp_path / "dist").glob("tunectl-*.whl")
    with zipfile.ZipFile(wheel) as unpacked:
        assert not [n for n in unpacked.namelist() if n.endswith(".so")]
        assert "tunectl/preload/replay.py" in unpacked.namelist()
    assert installed_data_pass(wheel, tmp_path, debian_env(package_tmp)) == "Python"


def installed_data_pass(wheel: Path, tmp: Path, env: dict[str, str]) -> str:
    """The wheel pip-installed into a virtualenv over Debian's python3 and its libraries; what its replay reads with."""
    venv = tmp / "venv"
    run(["python3", "-m", "venv", "--system-site-packages", str(venv)], env=env)
    run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)], env=env)
    env = dict(env, PATH=f"{venv / 'bin'}:{env['PATH']}", TUNECTL_STATE_DIR=str(tmp / "state"))
    return data_pass(lambda script: run(["sh", "-c", script], cwd=tmp, env=env), tmp / "files", str(tmp / "files"))


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


def test_rpmlint_passes_the_spec_and_the_source_rpm(dists: Dists, tmp_path: Path):
    """Clean but for what tunectl.rpmlintrc filters: each filter says which Fedora guideline the default breaks."""
    spec = REPO / "packaging" / "rpm" / "tunectl.spec"
    run(["rpmbuild", "-bs", str(spec), "--define", f"_sourcedir {dists.sdist.parent}", "--define", f"_topdir {tmp_path}"])
    (srpm,) = (tmp_path / "SRPMS").iterdir()
    done = run(["rpmlint", "-r", str(spec.with_suffix(".rpmlintrc")), str(spec), str(srpm)])
    assert re.search(r"1 packages and 1 specfiles checked; 0 errors, 0 warnings", done.stdout), done.stdout


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
