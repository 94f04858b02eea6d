"""The kernel's read-ahead re-derivation as data (attributes.READ_AHEAD_GENERATIONS) against the fake kernel's two
generations: a queue-limit write on 6.17+ raises read_ahead_kb to a floor that counts max_sectors_kb on a rotational
disk, on 6.11-6.16 to one that does not, and before 6.11 leaves it (6.12 and 6.1 measured in the VM tier)."""

from __future__ import annotations

import itertools

import pytest

from tests.fakesys import FakeKernel, FakeTree
from tests.tuning_helpers import Tunectl
from tunectl.attributes import LIMIT_ATTRS, read_ahead_after_limits, read_ahead_generation, side_effects, write_order

RELEASE = {"6.18": "6.18.44", "6.12": "6.12.117+deb12-amd64"}


@pytest.mark.parametrize("generation", FakeKernel.GENERATIONS)
def test_a_limit_write_rederives_read_ahead_as_the_table_says(tmp_path, generation) -> None:
    tree = FakeTree.create(tmp_path)
    tree.sysfs.generation = generation
    cases = itertools.product((True, False), (0, 1 << 20), (512, 1280), (16, 128, 4000))
    for i, (rotational, io_opt, max_sectors_kb, before) in enumerate(cases):
        name = tree.add_disk(f"sd{chr(97 + i % 26)}{i // 26 or ''}", rotational=rotational, optimal_io_size=io_opt,
                             max_hw_sectors_kb=max_sectors_kb, lean=True)
        q = f"block/{name}/queue"
        tree.sysfs.write(f"{q}/read_ahead_kb", str(before))
        tree.sysfs.write(f"{q}/rotational", "1" if rotational else "0")  # a limit write, same value
        got = int(tree.sysfs.read(f"{q}/read_ahead_kb"))
        want = read_ahead_after_limits(RELEASE[generation], before, rotational, io_opt, max_sectors_kb)
        assert got == want, (generation, rotational, io_opt, max_sectors_kb, before)


def test_the_generations_differ_where_the_kernel_changed() -> None:
    assert read_ahead_generation("6.18.44").on_limit_write == "raise"
    assert read_ahead_generation("6.12.1").on_limit_write == "raise"
    assert read_ahead_generation("6.1.0-56-amd64").on_limit_write == "keep"
    assert read_ahead_after_limits("6.18", 4000, True, 0, 1280) == 4000
    assert read_ahead_after_limits("6.12", 4000, True, 0, 1280) == 4000  # measured: a larger value stays
    assert read_ahead_after_limits("6.18", 64, True, 0, 1280) == 2560
    assert read_ahead_after_limits("6.12", 64, True, 0, 1280) == 128  # measured: no max_sectors_kb rule on 6.12
    assert read_ahead_after_limits("6.12", 64, False, 65536, 1280) == 128
    assert read_ahead_after_limits("6.1", 64, True, 0, 1280) == 64
    assert all(side_effects(a) == {"read_ahead_kb"} for a in LIMIT_ATTRS)
    assert write_order("read_ahead_kb") > max(write_order(a) for a in LIMIT_ATTRS)


@pytest.mark.parametrize("generation", FakeKernel.GENERATIONS)
def test_apply_keeps_read_ahead_last_on_both_generations(tmp_path, generation) -> None:
    tree = FakeTree.create(tmp_path / "tree")
    tree.sysfs.generation = generation
    tree.add_disk("sda", rotational=True, max_hw_sectors_kb=1280)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "ra.yaml").write_text("name: ra\nclasses:\n  rotational: {read_ahead_kb: 64, queue: {rotational: 0}}\n")
    t = Tunectl(tree, tmp_path / "state", [tmp_path / "p"])
    assert t("apply", "-p", "ra", "--json").code == 0
    assert tree.sysfs.read("block/sda/queue/read_ahead_kb").strip() == "64"
    assert t("verify", "-p", "ra", "--json").code == 0
    assert t("rollback", "--json").code == 0
    assert tree.sysfs.read("block/sda/queue/read_ahead_kb").strip() == "2560"
