"""The hash-locked environments (requirements/*.txt) agree with the ranges setup.cfg declares."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.harness import REPO

LOCKS = {name: REPO / "requirements" / f"{name}.txt"
         for name in ("runtime", "test", "collection", "ansible-test-sanity", "ansible-test-units")}
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def read_lock(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, its hashes), from a pip requirements file with continuation lines."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    for entry in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        match = _PIN.match(entry)
        assert match, f"{path.name}: not an exact pin: {entry!r}"
        pins[canonicalize_name(match["name"])] = (Version(match["version"]), re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return pins


def declared(*extras: str) -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in extras:
        lines += cfg["options.extras_require"][extra].splitlines()
    return [Requirement(line) for line in lines if line.strip()]


@pytest.mark.parametrize("lock, extras", [("runtime", ()), ("test", ("test",))])
def test_every_declared_requirement_is_locked_inside_its_range(lock: str, extras: tuple[str, ...]) -> None:
    pins = read_lock(LOCKS[lock])
    for req in declared(*extras):
        name = canonicalize_name(req.name)
        assert name in pins, f"{LOCKS[lock].name} does not pin {req.name}, which setup.cfg requires"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"{LOCKS[lock].name} pins {req.name}=={version}, outside setup.cfg's {req}")


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pin_carries_hashes(lock: str) -> None:
    pins = read_lock(LOCKS[lock])
    assert pins
    assert [name for name, (_, hashes) in pins.items() if not hashes] == []


def test_the_two_locks_agree_where_they_overlap() -> None:
    runtime, test = read_lock(LOCKS["runtime"]), read_lock(LOCKS["test"])
    assert {n: runtime[n][0] for n in runtime if n in test and runtime[n][0] != test[n][0]} == {}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_each_lock_says_how_it_is_refreshed(lock: str) -> None:
    source = LOCKS[lock].with_suffix(".in").read_text()
    assert f"-o requirements/{lock}.txt" in source
    assert "uv pip compile --generate-hashes" in LOCKS[lock].read_text().splitlines()[1]


def test_the_checker_sees_a_pin_outside_the_range(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("pyyaml==5.3 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    version, hashes = read_lock(bad)["pyyaml"]
    (req,) = [r for r in declared() if canonicalize_name(r.name) == "pyyaml"]
    assert not req.specifier.contains(version) and hashes == ["0" * 64]


def test_collection_tools_use_the_test_environment_s_ansible_core() -> None:
    collection, test = read_lock(LOCKS["collection"]), read_lock(LOCKS["test"])
    assert collection["ansible-core"][0] == test["ansible-core"][0]


def test_the_sanity_lock_is_exactly_ansible_test_s_own_pins() -> None:
    """scripts/test-collection gives ansible-test only these wheels: a bump of ansible-core must bring its pins here."""
    ansible_test = pytest.importorskip("ansible_test")
    pins: dict[str, Version] = {}
    for path in (Path(ansible_test.__file__).parent / "_data" / "requirements").glob("sanity.*.txt"):
        for line in path.read_text().splitlines():
            match = _PIN.match(line.split("#", 1)[0].strip())
            if match:
                pins[canonicalize_name(match["name"])] = Version(match["version"])
    locked = {name: version for name, (version, _) in read_lock(LOCKS["ansible-test-sanity"]).items() if name != "pip"}
    assert locked == pins


def test_the_units_lock_pins_everything_ansible_test_units_installs() -> None:
    """ansible-test units installs units.txt into its virtualenvs from the wheelhouse: each name must be there."""
    ansible_test = pytest.importorskip("ansible_test")
    units = Path(ansible_test.__file__).parent / "_data" / "requirements" / "units.txt"
    wanted = {canonicalize_name(Requirement(line.split("#", 1)[0]).name)
              for line in units.read_text().splitlines() if line.split("#", 1)[0].strip()}
    assert wanted - set(read_lock(LOCKS["ansible-test-units"])) == set()
