"""UUID= and LABEL= as DEV before udev has probed the filesystem: blkid reads the superblock; else the error says so."""

from __future__ import annotations

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl
from tunectl.devices.resolve import Resolver
from tunectl.system.runner import Completed


class Blkid:
    def __init__(self, answer: str, code: int = 0) -> None:
        self.answer, self.code, self.calls = answer, code, []

    def __call__(self, argv, timeout=60, check=True, input_text=None):
        self.calls.append(tuple(argv))
        return Completed(tuple(argv), self.code, self.answer, "")


@pytest.fixture
def t(empty_fake_tree: FakeTree, tmp_path) -> Tunectl:
    empty_fake_tree.add_loop("loop3", "/tmp/fresh.img")  # mkfs just ran: no udev record, no by-uuid link
    return Tunectl(empty_fake_tree, tmp_path / "state")


def test_a_tag_udev_does_not_know_yet_is_found_by_blkid_on_the_real_machine(t: Tunectl) -> None:
    t.ctx.roots = t.ctx.roots._replace(real=True)
    t.ctx.run = blkid = Blkid("/dev/loop3\n")
    assert Resolver(t.ctx).source("UUID=0b1c-77aa").name == "loop3"
    assert blkid.calls == [("blkid", "-t", "UUID=0b1c-77aa", "-o", "device")]
    assert Resolver(t.ctx).whole_devices(["LABEL=fresh"]) == ["loop3"]
    # blkid knows none (exit 2): the error names every place looked in
    t.ctx.run = Blkid("", code=2)
    found = Resolver(t.ctx).source("LABEL=gone")
    assert found.name is None and "neither udev's database, /dev/disk/by-label nor blkid knows it" in found.problem


def test_an_unknown_tag_as_dev_says_which_tag_was_not_found(t: Tunectl) -> None:
    r = t("plan", "-p", "default", "UUID=0b1c-77aa")
    assert r.code == 2 and "no device with UUID '0b1c-77aa'" in r.err and "no block device under" not in r.err, r.err
    assert "blkid" in r.err
