"""The findings table on recorded stacks (tests/unit/explain/recorded_stacks.py)."""

from __future__ import annotations

import pytest

from tests.unit.explain import recorded_stacks as stacks
from tunectl.explain import dmtable, rules
from tunectl.record import replace


def ids(case) -> list[str]:
    return [f.rule for f in rules.findings(case)]


def test_the_browser_stack_names_its_causes_ranked():
    found = rules.findings(stacks.browser())
    by_id = {f.rule: f for f in found}
    assert set(by_id) >= {"EX001", "EX002", "EX003", "EX004", "EX005"}
    # the block size first (4.8x estimated), then the symptom and the loop (2.1x each, in the table's order)
    assert [f.rule for f in found[:3]] == ["EX003", "EX002", "EX004"]
    assert by_id["EX003"].change.text == "mksquashfs SOURCE IMAGE -b 128K -comp gzip"  # the compressor is EX005's
    assert by_id["EX005"].change.text == "mksquashfs SOURCE IMAGE -b 4K -comp xz"
    assert by_id["EX004"].change.text == "losetup --direct-io=off /dev/loop0"
    assert "EX003, EX004" in by_id["EX002"].change.text
    assert any("mmcblk0: 1024 read requests of 5.2 KiB on average, 0% merged" in e for e in by_id["EX002"].evidence)
    assert any("dm-0 (verity) is bio-based" in e and "mmcblk0 (mq-deadline)" in e for e in by_id["EX001"].evidence)
    assert by_id["EX001"].change.kind == "none"  # the card has a scheduler: nothing to set on dm


def test_fixing_the_causes_silences_them():
    fixed = stacks.browser(sb_block=131072, compressor="xz", dio=False)
    assert not {"EX003", "EX004", "EX005"} & set(ids(fixed))


def test_ext4_has_no_stack_findings():
    assert ids(stacks.ext4()) == []


def test_without_a_cold_read_the_facts_still_speak():
    found = ids(stacks.browser(cold=False))
    assert "EX002" not in found
    assert {"EX003", "EX004"} <= set(found)
    loop = next(f for f in rules.findings(stacks.browser(cold=False)) if f.rule == "EX004")
    # without a cold read: the bound (all of the time assumed to be the requests'), and it says so
    assert loop.effect.basis == "estimated" and loop.effect.value == 32.0
    assert "estimated at most 32.0x" in loop.evidence[-1] and "no cold read" in loop.evidence[-1]


@pytest.mark.parametrize("kernel, expected", [((5, 15), True), ((5, 19), False), ((6, 1), False)])
def test_squashfs_readahead_only_before_5_19(kernel, expected):
    assert ("EX007" in ids(stacks.browser(kernel=kernel))) is expected


def test_partial_block_cache_from_6_5_and_only_off_page_size():
    case = stacks.with_queue(stacks.browser(kernel=(6, 12)), "dm-0", logical_block_size=512)
    assert "EX006" in ids(case)
    assert "EX006" not in ids(stacks.with_queue(stacks.browser(kernel=(6, 1)), "dm-0", logical_block_size=512))
    assert "EX006" not in ids(stacks.browser(kernel=(6, 12)))  # verity's 4096-byte blocks: equal


def test_verity_tasklets_from_6_0():
    assert "EX009" in ids(stacks.browser(kernel=(6, 1)))
    assert "EX009" not in ids(stacks.browser(kernel=(5, 15)))


def test_dm_over_a_rotational_disk_without_scheduler_gets_a_below_fragment():
    case = stacks.with_queue(stacks.browser(), "mmcblk0", scheduler="none", rotational=True)
    f = next(f for f in rules.findings(case) if f.rule == "EX001")
    assert f.change.kind == "profile" and "below:" in f.change.text and f.effect.value == 1.0
    assert "one stream of requests" in f.evidence[-1]  # a scheduler orders concurrent readers: not this read
    assert "EX010" not in ids(case)  # said once, by EX001
    assert "EX010" in ids(stacks.with_queue(stacks.ext4(), "mmcblk0", scheduler="none", rotational=True))


def test_crypt_workqueue():
    case = stacks.browser()
    table = tuple(dmtable.parse("0 100 crypt aes-xts-plain64 :64:logon:k 0 7:0 0"))
    layers = tuple(replace(la, device=replace(la.device, dm_type="crypt")).with_facts(
        replace(la.facts, dm_table=table)) if la.kind == "dm" else la for la in case.stack.layers)
    crypt = replace(case, stack=replace(case.stack, layers=layers))
    f = next(f for f in rules.findings(crypt) if f.rule == "EX008")
    assert "--perf-no_read_workqueue" in f.change.text and "dm-0" in f.change.text
    assert "EX008" not in ids(replace(crypt, stack=replace(crypt.stack, kernel=(5, 4))))


def test_small_read_ahead():
    assert "EX011" in ids(stacks.with_queue(stacks.ext4(), "mmcblk0", read_ahead_kb=16))


def test_every_rule_names_facts_and_kernels():
    assert len({r.id for r in rules.RULES}) == len(rules.RULES)
    for r in rules.RULES:
        assert r.reads and r.kernels()
        assert r.to_json()["id"] == r.id
