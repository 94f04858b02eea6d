"""Build the release artifacts once per session, from a copy of this checkout: sdist, wheel, .deb, collection.

Every builder is the one the README's release steps name; a failure prints its output.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.package.builds import Deb, Dists, ansible_tool, debian_env, run, source_tree


@pytest.fixture(scope="session")
def package_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("package")


@pytest.fixture(scope="session")
def dists(package_tmp: Path) -> Dists:
    """`python3 -m build`: the sdist and the wheel (Debian's python3-build, no download: --no-isolation)."""
    src = source_tree(package_tmp / "sdist-src")
    out = package_tmp / "dist"
    run(["python3", "-m", "build", "--no-isolation", "--outdir", str(out), str(src)], env=debian_env(package_tmp))
    (sdist,) = out.glob("tunectl-*.tar.gz")
    (wheel,) = out.glob("tunectl-*.whl")
    return Dists(sdist, wheel)


@pytest.fixture(scope="session")
def deb(package_tmp: Path) -> Deb:
    """`dpkg-buildpackage -us -uc -b`; the suite already ran on this source, so the build skips it (nocheck)."""
    src = source_tree(package_tmp / "deb" / "tunectl")
    run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, env=debian_env(package_tmp, DEB_BUILD_OPTIONS="nocheck"))
    (deb,) = src.parent.glob("tunectl_*_all.deb")
    (changes,) = src.parent.glob("tunectl_*.changes")
    return Deb(deb, changes)


@pytest.fixture(scope="session")
def bookworm_tarball(package_tmp: Path) -> Path:
    """A clean Debian 12 root (mmdebstrap minbase) as a tarball: the .deb's dependencies, man,
    bash-completion, python3-apt (what Ansible's apt module needs on a managed host).
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: mmdebstrap builds the root as root, and the tests chroot into it")
    tarball = package_tmp / "bookworm.tar"
    mirror = os.environ.get("TUNECTL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    run(["mmdebstrap", "--variant=minbase", "--mode=root",
         "--include=parted,udev,python3-yaml,python3-jsonschema,python3-pyudev,man-db,bash-completion,python3-apt",
         "bookworm", str(tarball), mirror], env=debian_env(package_tmp), timeout=1200)
    return tarball


@pytest.fixture
def bookworm(bookworm_tarball: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the clean root for one test, unpacked with owners and modes."""
    root = tmp_path / "bookworm"
    root.mkdir()
    run(["tar", "-x", "-p", "--numeric-owner", "-f", str(bookworm_tarball), "-C", str(root)])
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def collection_tarball(package_tmp: Path) -> Path:
    """`ansible-galaxy collection build ansible/`."""
    src = source_tree(package_tmp / "collection-src")
    out = package_tmp / "collection"
    run([ansible_tool("ansible-galaxy"), "collection", "build", str(src / "ansible"), "--output-path", str(out)])
    (tarball,) = out.glob("tunectl-tunectl-*.tar.gz")
    return tarball
