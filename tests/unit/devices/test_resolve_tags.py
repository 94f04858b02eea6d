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
    t.ctx.run = blkid = Blkid("DEVNAME=/dev/loop3\nUUID=0b1c-77aa\nLABEL=fresh\nTYPE=ext4\n")
    assert Resolver(t.ctx).source("UUID=0b1c-77aa").name == "loop3"
    assert blkid.calls == [("blkid", "-o", "export")]
    assert Resolver(t.ctx).whole_devices(["LABEL=fresh"]) == ["loop3"]
    # blkid knows none (exit 2): the error names every place looked in
    t.ctx.run = Blkid("", code=2)
    found = Resolver(t.ctx).source("LABEL=gone")
    assert found.name is None and "neither udev's database, /dev/disk/by-label nor blkid knows it" in found.problem


def test_an_unknown_tag_as_dev_says_which_tag_was_not_found(t: Tunectl) -> None:
    r = t("plan", "-p", "default", "UUID=0b1c-77aa")
    assert r.code == 2 and "no device with UUID '0b1c-77aa'" in r.err and "no block device under" not in r.err, r.err
    assert "blkid" in r.err


def test_one_blkid_run_answers_every_tag_of_a_run(t: Tunectl) -> None:
    """200 labels udev does not know cost one blkid, not 200; a tag on two devices, or on none, is no answer."""
    t.ctx.roots = t.ctx.roots._replace(real=True)
    t.ctx.run = blkid = Blkid("DEVNAME=/dev/loop3\nUUID=0b1c-77aa\nLABEL=my\\ disk\\$1\nTYPE=ext4\n\n"
                              "DEVNAME=/dev/loop4\nUUID=twin\nTYPE=ext4\n\nDEVNAME=/dev/loop5\nUUID=twin\n")
    r = Resolver(t.ctx)
    assert [r.source(f"LABEL=l{i}").name for i in range(200)] == [None] * 200
    assert r.source("LABEL=my disk$1").name == "loop3"  # blkid -o export escapes shell characters
    assert r.source('UUID="0b1c-77aa"').name == "loop3"
    assert r.source("UUID=twin").name is None
    assert blkid.calls == [("blkid", "-o", "export")]


class BlkidByArgs(Blkid):
    """blkid -o export answers `answer`; blkid -t TAG=VALUE -o device answers `devices[TAG=VALUE]`."""

    def __init__(self, answer: str, devices: dict[str, str]) -> None:
        super().__init__(answer)
        self.devices = devices

    def __call__(self, argv, timeout=60, check=True, input_text=None):
        done = super().__call__(argv, timeout, check, input_text)
        if "-t" not in argv:
            return done
        found = self.devices.get(argv[argv.index("-t") + 1], "")
        return Completed(tuple(argv), 0 if found else 2, found, "")


def test_a_label_blkid_export_cannot_print_as_itself_is_asked_of_blkid_by_its_bytes(t: Tunectl) -> None:
    """`blkid -o export` prints a byte of 128 or more as M- and its low 7 bits, a control character as ^ and its
    letter (util-linux safe_print; the text below is its print of an ext4 made with -L 'dön $x'): that label was
    never found in the one export, and the print of 0xC1 and of a literal "M-A" are one. Such a value, and one
    holding "M-" or "^", is asked of blkid alone (-t, bytes compared); the export answers the others."""
    t.ctx.roots = t.ctx.roots._replace(real=True)
    export = ("DEVNAME=/dev/loop3\nLABEL=dM-CM-6n\\ \\$x\nUUID=4e2552a3-67cb-45d9-b518-0df22c635e2f\n"
              "BLOCK_SIZE=1024\nTYPE=ext4\n")
    t.ctx.run = blkid = BlkidByArgs(export, {"LABEL=dön $x": "/dev/loop3\n"})
    r = Resolver(t.ctx)
    assert r.source("LABEL=dön $x").name == "loop3"
    assert r.source("LABEL=dM-CM-6n $x").name is None  # the print, as a label of its own: not loop3's
    assert r.source("LABEL=tab\there").name is None
    assert r.source("UUID=4e2552a3-67cb-45d9-b518-0df22c635e2f").name == "loop3"
    assert r.source("LABEL=plain").name is None
    assert blkid.calls == [("blkid", "-t", "LABEL=dön $x", "-o", "device"),
                           ("blkid", "-t", "LABEL=dM-CM-6n $x", "-o", "device"),
                           ("blkid", "-t", "LABEL=tab\there", "-o", "device"), ("blkid", "-o", "export")]


def test_blkid_missing_or_failing_is_no_answer(t: Tunectl) -> None:
    t.ctx.roots = t.ctx.roots._replace(real=True)
    t.ctx.run = blkid = Blkid("garbage", code=4)
    r = Resolver(t.ctx)
    assert r.source("UUID=0b1c-77aa").name is None and r.source("LABEL=x").name is None
    assert len(blkid.calls) == 1


def test_a_by_link_directory_is_read_once_a_run(t: Tunectl, monkeypatch) -> None:
    """Links under one /dev/disk/by-* directory: the directory is walked once, a name not in it is missing
    without a walk of its own, and each name is judged once however often it is asked for."""
    from tunectl.system import devnode, roots

    walked: list[str] = []
    real_follow = devnode.follow

    def follow(name: str, dev_root: str):
        walked.append(name)
        return real_follow(name, dev_root)

    monkeypatch.setattr(devnode, "follow", follow)
    t.ctx.roots = t.ctx.roots._replace(real=True, dev=roots.DEV)
    r = Resolver(t.ctx)
    names = [f"/dev/disk/by-uuid/tunectl-test-none-{i}" for i in range(50)] * 2
    before = {n: None for n in names}
    monkeypatch.setattr(devnode, "follow", real_follow)
    for n in before:  # the answers of one walk a name, as before
        before[n] = Resolver(t.ctx).lookup(n)
    monkeypatch.setattr(devnode, "follow", follow)
    after = {n: r.lookup(n) for n in names}
    assert after == before
    assert all(f.name is None and f.missing for f in after.values())
    assert walked == ["/dev/disk/by-uuid"], walked
