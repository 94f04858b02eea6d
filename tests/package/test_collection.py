"""The collection as users get it: the built tarball, installed with ansible-galaxy, its site playbook run twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.package.builds import REPO, Deb, ansible_tool, run

pytestmark = [pytest.mark.package, pytest.mark.ansible]


def recap(stdout: str) -> dict[str, int]:
    line = re.search(r"localhost\s*:\s*(.*)", stdout.split("PLAY RECAP")[-1]).group(1)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def install_collection(tarball: Path, tmp: Path) -> Path:
    """`ansible-galaxy collection install TARBALL` into a collections directory of its own."""
    collections = tmp / "collections"
    run([ansible_tool("ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections), str(tarball)])
    return collections


def site_playbook(collections: Path, tmp: Path, extra: dict, **env: str) -> subprocess.CompletedProcess:
    """`ansible-playbook tunectl.tunectl.site` on localhost, from the installed collection."""
    environ = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-local"), ANSIBLE_STDOUT_CALLBACK="default", **env)
    environ.pop("ANSIBLE_CONFIG", None)
    argv = [ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "tunectl.tunectl.site",
            "-e", json.dumps(extra)]
    return run(argv, cwd=tmp, env=environ)


def test_site_playbook_from_the_installed_tarball_changes_then_does_not(collection_tarball: Path, empty_fake_tree,
                                                                       tmp_path: Path):
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    collections = install_collection(collection_tarball, tmp_path)
    installed = collections / "ansible_collections" / "tunectl" / "tunectl"
    manifest = json.loads((installed / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["license"]) == ("tunectl", "tunectl", ["GPL-3.0-or-later"])

    wrapper = tmp_path / "bin" / "tunectl"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m tunectl \"$@\"\n")
    wrapper.chmod(0o755)
    extra = {"tunectl_executable": str(wrapper), "tunectl_profile": "from-tarball",
             "tunectl_profile_dir": str(tmp_path / "profiles"),
             "tunectl_profile_content": {"name": "from-tarball", "classes": {"ssd": {"read_ahead_kb": 2048}}},
             "tunectl_env": {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
                             "TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}}
    first = site_playbook(collections, tmp_path, extra, ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    assert recap(first.stdout)["changed"] >= 2, first.stdout  # the profile shipped, the value written
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "2048"
    second = site_playbook(collections, tmp_path, extra, ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    assert recap(second.stdout)["changed"] == 0 and recap(second.stdout)["failed"] == 0, second.stdout


def test_role_installs_the_deb_on_debian_then_tunes_changed_then_not(deb: Deb, bookworm: Path,
                                                                     collection_tarball: Path, tmp_path: Path):
    """The role against a clean bookworm root: Ansible's interpreter there is `chroot ROOT python3`.

    Modules arrive on stdin (pipelining); the files Ansible stages, and the fake sysfs tree, are in a
    directory mounted at the same path inside the root, so both sides see the same paths.
    """
    root = bookworm
    shared = tmp_path / "shared"
    inside = root / shared.relative_to("/")
    shared.mkdir()
    inside.mkdir(parents=True)
    run(["mount", "--bind", str(shared), str(inside)])
    try:
        tree = FakeTree.create(shared / "fake")
        tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
        python = shared / "python3-in-root"
        python.write_text(f"#!/bin/sh\nexec chroot {root} /usr/bin/python3 \"$@\"\n")
        python.chmod(0o755)
        collections = install_collection(collection_tarball, tmp_path)
        extra = {"tunectl_deb": str(deb.deb), "tunectl_source": "/nonexistent/wheel-not-used-on-debian.whl",
                 "tunectl_profile": "deb-route",
                 "tunectl_profile_content": {"name": "deb-route", "classes": {"ssd": {"read_ahead_kb": 4096}}},
                 "tunectl_env": {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
                                 "TUNECTL_STATE_DIR": str(shared / "state")}}
        env = {"ANSIBLE_PIPELINING": "1", "ANSIBLE_REMOTE_TEMP": str(shared / "remote-tmp"),
               "ANSIBLE_PYTHON_INTERPRETER": str(python)}
        first = site_playbook(collections, tmp_path, extra, **env)
        assert re.search(r"Install the tunectl package\] \*+\nchanged:", first.stdout), first.stdout
        assert re.search(r"Install tunectl with pip\] \*+\nskipping:", first.stdout), first.stdout
        assert (root / "usr/sbin/tunectl").exists() and (root / "usr/share/man/man8/tunectl.8.gz").exists()
        assert (root / "etc/tunectl/profiles/deb-route.yaml").exists()
        assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "4096"
        assert recap(first.stdout)["failed"] == 0, first.stdout
        second = site_playbook(collections, tmp_path, extra, **env)
        assert recap(second.stdout)["changed"] == 0 and recap(second.stdout)["failed"] == 0, second.stdout
    finally:
        subprocess.run(["umount", str(inside)], check=False)
