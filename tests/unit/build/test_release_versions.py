"""Every release artifact says the version tunectl/__init__.py says (the README's Release section)."""

from __future__ import annotations

import re

import yaml

import tunectl
from tests.harness import REPO


def test_deb_rpm_and_collection_repeat_the_package_version() -> None:
    changelog = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    spec = (REPO / "packaging" / "rpm" / "tunectl.spec").read_text()
    galaxy = yaml.safe_load((REPO / "ansible" / "galaxy.yml").read_text())
    versions = {
        "debian/changelog": re.match(r"tunectl \((?P<v>[^)-]+)-\d+\)", changelog)["v"],
        "packaging/rpm/tunectl.spec": re.search(r"^Version:\s+(?P<v>\S+)$", spec, re.M)["v"],
        "ansible/galaxy.yml": galaxy["version"],
    }
    assert versions == dict.fromkeys(versions, tunectl.__version__)
