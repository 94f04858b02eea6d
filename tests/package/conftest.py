"""Build the release artifacts once per session, from a copy of this checkout: sdist, wheel, .deb, collection.

Every builder is the one the README's release steps name; a failure prints its output.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.package.builds import REPO, Deb, Dists, ansible_tool, debian_env, run, source_tree


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
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()  # Architecture: any (the compiled data pass)
    (deb,) = src.parent.glob(f"tunectl_*_{arch}.deb")
    (changes,) = src.parent.glob("tunectl_*.changes")
    return Deb(deb, changes)


BOOKWORM_PACKAGES = "parted,udev,python3-yaml,python3-jsonschema,python3-pyudev,man-db,bash-completion,zsh,python3-apt"
BOOKWORM_CACHE_DAYS = 7


@pytest.fixture(scope="session")
def bookworm_tarball(package_tmp: Path) -> Path:
    """A clean Debian 12 root (mmdebstrap minbase) as a tarball: the .deb's dependencies, man,
    bash-completion and zsh (the completion tests), python3-apt (what Ansible's apt module needs on a managed host).

    mmdebstrap takes minutes, mostly downloading; the tarball is kept in build/ for a week (each test
    unpacks a fresh copy) and made again when the package list or the mirror changes.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: mmdebstrap builds the root as root, and the tests chroot into it")
    mirror = os.environ.get("TUNECTL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    key = hashlib.sha256(f"{BOOKWORM_PACKAGES} {mirror}".encode()).hexdigest()[:16]
    cached = REPO / "build" / "package-cache" / f"bookworm-{key}.tar"
    if cached.exists() and time.time() - cached.stat().st_mtime < BOOKWORM_CACHE_DAYS * 86400:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = package_tmp / "bookworm.tar"
    run(["mmdebstrap", "--variant=minbase", "--mode=root", f"--include={BOOKWORM_PACKAGES}",
         "bookworm", str(partial), mirror], env=debian_env(package_tmp), timeout=1200)
    for old in cached.parent.glob("bookworm-*.tar"):
        old.unlink()
    part = cached.with_suffix(".part")  # a run stopped half-way leaves no tarball that looks whole
    shutil.move(partial, part)
    os.replace(part, cached)
    return cached


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
