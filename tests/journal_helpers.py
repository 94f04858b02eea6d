"""Two fake disks and one state directory for the journal tests (fixture `pair`, registered in conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakesys import FakeTree, sata_hdd, sata_ssd
from tests.tuning_helpers import Tunectl, snapshot

# P1 changes sda only; P2 changes sda again (another scheduler) and sdb for the first time.
P1 = "name: p1\nclasses:\n  rotational: {scheduler: bfq, read_ahead_kb: 1024}\n"
P2 = ("name: p2\nclasses:\n  rotational: {scheduler: mq-deadline, iosched: {read_expire: 150}}\n"
      "  ssd: {read_ahead_kb: 64, queue: {nr_requests: 32}}\n")


class Pair:
    """Two disks (sda rotational, sdb ssd), two profiles, one state directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.tree = FakeTree.create(base)
        sata_hdd(self.tree)
        sata_ssd(self.tree)
        self.state = base / "state"
        (base / "profiles").mkdir()
        (base / "profiles" / "p1.yaml").write_text(P1)
        (base / "profiles" / "p2.yaml").write_text(P2)
        self.run = Tunectl(self.tree, self.state, [base / "profiles"])
        self.originals = self.snap()

    def snap(self) -> dict[str, dict[str, str]]:
        return {name: snapshot(self.tree, name) for name in ("sda", "sdb")}

    def fresh(self) -> Tunectl:
        """A new process's view: a StateStore that has read nothing yet."""
        return Tunectl(self.tree, self.state, [self.base / "profiles"])

    def queue_dirs(self) -> list[Path]:
        return [(self.tree.root / "block" / name / "queue").resolve() for name in ("sda", "sdb")]


@pytest.fixture
def pair(fake_root: Path) -> Pair:
    return Pair(fake_root)


def assert_state_error(r, *fragments: str) -> None:
    """Exit 5, one error line and one hint line, never an internal error."""
    assert r.code == 5, (r.code, r.err)
    assert "internal error" not in r.err and "Traceback" not in r.err
    lines = r.err.splitlines()
    errors = [line for line in lines if line.startswith("tunectl: error: ")]
    assert len(errors) == 1 and any(line.startswith("hint: ") for line in lines), r.err
    for fragment in fragments:
        assert fragment in r.err, r.err
