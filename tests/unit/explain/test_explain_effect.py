"""Findings ranked by effect (#29): each rule's estimate from the facts it read, --try's measurement of the change
alone replacing it, ties in the rule table's order. On the recorded browser stack (recorded_stacks.py)."""

from __future__ import annotations

import pytest

from tests.unit.explain import recorded_stacks as stacks
from tunectl.bench.diskstat import StatDelta
from tunectl.explain import dmtable, effect, rules
from tunectl.explain.model import ColdRead
from tunectl.record import replace


def by_id(case) -> dict[str, rules.Finding]:
    return {f.rule: f for f in rules.findings(case)}


def order(case) -> list[str]:
    return [f.rule for f in rules.findings(case)]


def amdahl(share: float, k: float) -> float:
    return 1 / ((1 - share) + share / k)


@pytest.mark.parametrize("share, k, expected", [(0.5, 2, 4 / 3), (0.0, 32, 1.0), (1.0, 32, 32.0), (0.9, 1, 1.0),
                                                (0.75, float("inf"), 4.0), (1.5, 4, 4.0), (0.5, 0.5, 1.0)])
def test_speedup_is_amdahl_on_the_request_count(share, k, expected):
    assert effect.speedup(share, k) == pytest.approx(expected)


def test_each_estimate_on_the_browser_stack_is_its_arithmetic():
    found = by_id(stacks.browser())
    wall = 2183.8  # ms, the cold read
    # EX003: dm-0 (under squashfs) took 1784 ms of the read; 1024 reads of a 4 MiB file become one per 128 KiB: 32
    assert found["EX003"].effect.value == round(amdahl(1784 / wall, 1024 / 32), 2) == 4.79
    # EX004 (and EX002): the card took 1195 ms; its 10608 sectors in 128 KiB requests: 41.4 instead of 1024
    card = amdahl(1195 / wall, 1024 / (10608 * 512 / 131072))
    assert found["EX004"].effect.value == found["EX002"].effect.value == round(card, 2) == 2.11
    # EX009: verity's own time is dm-0's less loop0's (1784 - 1380 ms): at most all of it given back
    assert found["EX009"].effect.value == round(1 / (1 - 404 / wall), 2) == 1.23
    # the change on dm is none, and gzip -> xz leaves the same requests: no effect the model sees
    assert found["EX001"].effect.value == found["EX005"].effect.value == 1.0
    assert all(f.effect.basis == "estimated" for f in found.values())
    # the basis is named in the evidence, with the facts it used
    assert found["EX003"].evidence[-1].startswith("estimated 4.8x: ")
    assert "dm-0's requests took 82% of the read (1784 of 2184 ms)" in found["EX003"].evidence[-1]
    assert "1024 requests of 5.2 KiB as 32 (32.0x fewer)" in found["EX003"].evidence[-1]
    assert "1784 ms less loop0's 1380 ms" in found["EX009"].evidence[-1]


def test_the_order_follows_the_effect_and_ties_keep_the_table_order():
    found = rules.findings(stacks.browser())
    assert [f.rule for f in found] == ["EX003", "EX002", "EX004", "EX009", "EX001", "EX005"]
    values = [f.effect.value for f in found]
    assert values == sorted(values, reverse=True)
    # EX002 and EX004 tie at 2.11 and EX001 and EX005 at 1.0: the table's order decides each tie
    table = [r.id for r in rules.RULES]
    for a, b in zip(found, found[1:]):
        if a.effect.value == b.effect.value:
            assert table.index(a.rule) < table.index(b.rule), (a.rule, b.rule)


def test_without_a_cold_read_the_bounds_rank_and_say_so():
    found = rules.findings(stacks.browser(cold=False))
    assert [f.rule for f in found][:2] == ["EX003", "EX004"]  # 32x each, at most: the table's order
    assert found[0].effect.value == found[1].effect.value == 32.0
    assert all("at most" in f.evidence[-1] for f in found[:2])


def test_a_measurement_replaces_the_estimate_and_reorders():
    found = rules.findings(stacks.tried(stacks.browser()))
    assert [f.rule for f in found] == ["EX003", "EX004", "EX002", "EX009", "EX001", "EX005"]
    ex = {f.rule: f for f in found}
    assert (ex["EX003"].effect.value, ex["EX003"].effect.basis) == (round(15.4 / 1.7, 2), "measured")
    assert (ex["EX004"].effect.value, ex["EX004"].effect.basis) == (round(3.9 / 1.7, 2), "measured")
    # EX002 names no single change --try isolates, nor EX005 without an xz variant: they stay estimated
    assert ex["EX002"].effect.basis == ex["EX005"].effect.basis == "estimated"
    # the estimate stays in the evidence and the JSON, the measurement follows it
    assert ex["EX003"].evidence[-2].startswith("estimated 4.8x: ")
    assert ex["EX003"].evidence[-1].startswith("measured 9.1x: 4K -> 128K blocks alone: 15.4 MB/s "
                                               "(-b 128K -comp gzip, dio on) against 1.7 MB/s")
    assert ex["EX004"].evidence[-1].startswith("measured 2.3x: direct I/O off alone: 3.9 MB/s")
    assert ex["EX003"].to_json()["effect"] == {"value": 9.06, "basis": "measured", "estimate": 4.79}
    assert ex["EX002"].to_json()["effect"] == {"value": 2.11, "basis": "estimated", "estimate": 2.11}


def test_measured_beats_estimated_on_a_tie():
    # direct I/O off alone measured at exactly EX002's estimate (2.11x): the measured finding goes first
    trials = (stacks.trial(4096, "gzip", True, 1.0, as_is=True), stacks.trial(4096, "gzip", False, 2.11))
    assert order(stacks.tried(stacks.browser(), trials))[:3] == ["EX003", "EX004", "EX002"]
    assert order(stacks.browser())[:3] == ["EX003", "EX002", "EX004"]  # estimated both: the table's order


def test_a_measurement_can_sink_a_finding():
    # 128 KiB blocks measured slower than the image as it is: EX003 falls below every estimate above 0.8x
    trials = (stacks.trial(4096, "gzip", True, 10.0, as_is=True), stacks.trial(131072, "gzip", True, 8.0))
    found = rules.findings(stacks.tried(stacks.browser(), trials))
    assert [f.rule for f in found][-1] == "EX003" and found[-1].effect.value == 0.8


def test_only_the_variant_with_the_change_alone_measures_it():
    # 128 KiB blocks were tried only with direct I/O off: two changes at once, so EX003 stays estimated
    trials = (stacks.trial(4096, "gzip", True, 1.7, as_is=True), stacks.trial(131072, "gzip", False, 13.7))
    ex = by_id(stacks.tried(stacks.browser(), trials))
    assert ex["EX003"].effect.basis == "estimated" and ex["EX004"].effect.basis == "estimated"


def test_gzip_to_xz_is_measured_at_the_smallest_block_size_both_were_tried_at():
    trials = stacks.BROWSER_TRIALS + (stacks.trial(131072, "xz", True, 12.0), stacks.trial(1048576, "xz", True, 20.0))
    ex = by_id(stacks.tried(stacks.browser(), trials))["EX005"]
    assert (ex.effect.value, ex.effect.basis) == (round(12.0 / 15.4, 2), "measured")
    assert "gzip -> xz alone, at 128K blocks" in ex.evidence[-1]


def test_read_ahead_estimate_is_bounded_by_the_read_ahead_ratio():
    case = stacks.with_queue(stacks.ext4(), "mmcblk0", read_ahead_kb=16)
    cold = ColdRead("/srv/chrome", 4096, 48 << 20, 2.0,
                    (StatDelta("mmcblk0", reads=3072, sectors_read=98304, read_ms=1500),))
    f = by_id(replace(case, cold=cold))["EX011"]
    # 48 MiB in 16 KiB requests (3072) as 128 KiB ones (384): 8x fewer, over 75% of the read
    assert f.effect.value == round(amdahl(0.75, 8), 2) == 2.91
    assert by_id(stacks.with_queue(stacks.ext4(cold=False), "mmcblk0", read_ahead_kb=16))["EX011"].effect.value == 8.0


def test_a_crypt_layer_is_bounded_by_its_own_share():
    case = stacks.browser()
    table = dmtable.parse("0 100 crypt aes-xts-plain64 :64:logon:k 0 7:0 0")
    layers = tuple(la.with_facts(replace(la.facts, dm_table=tuple(table))) if la.kind == "dm" else la
                   for la in case.stack.layers)
    f = by_id(replace(case, stack=replace(case.stack, layers=layers)))["EX008"]
    assert f.effect.value == 1.23 and "not the decryption" in f.evidence[-1]


def test_the_text_and_json_show_each_effect_and_its_basis():
    import io

    from tunectl.cli import Output
    from tunectl.explain.report import ExplainReport

    case = stacks.tried(stacks.browser())
    report = ExplainReport(case, rules.findings(case))
    stdout = io.StringIO()
    assert Output(stdout, io.StringIO(), False, False, 0, "explain").show(report) == 0
    text = stdout.getvalue()
    assert "1. [9.1x measured] EX003 squashfs blocks are small" in text
    assert "3. [2.1x estimated] EX002 the disk gets small requests" in text
    assert "evidence: measured 2.3x: direct I/O off alone" in text
    assert [f["effect"]["basis"] for f in report.to_json()["findings"]][:3] == ["measured", "measured", "estimated"]


def test_no_read_ahead_below_the_loop_buys_nothing_from_direct_io_off():
    case = stacks.browser(cold=False)
    layers = tuple(la.with_facts(replace(la.facts, loop=replace(la.facts.loop,
                                                                                         backing_read_ahead_kb=0)))
                   if la.kind == "loop" else la for la in case.stack.layers)
    f = by_id(replace(case, stack=replace(case.stack, layers=layers)))["EX004"]
    assert f.effect.value == 1.0  # page-sized reads either way


@pytest.mark.parametrize("seed", range(40))
def test_any_cold_read_gives_finite_ranked_effects(seed):
    """Odd figures (no time, no reads, no bytes, more request time than the read took) never break the ranking."""
    import math
    import random

    rnd = random.Random(seed)

    def delta(name):
        return StatDelta(name, reads=rnd.choice([0, 1, 40, 1024, 10**6]), sectors_read=rnd.choice([0, 8, 10608, 10**9]),
                         read_ms=rnd.choice([0, 1, 1784, 10**7]))

    cold = ColdRead("/opt/browser/chrome", 4096, rnd.choice([0, 4096, 4 << 20]), rnd.choice([0.0, 1e-6, 2.18, 1e4]),
                    tuple(delta(n) for n in ("dm-0", "loop0", "mmcblk0")))
    trials = stacks.BROWSER_TRIALS if rnd.random() < 0.5 else tuple(
        replace(t, mb_s=rnd.choice([0.0, 0.1, 50.0])) for t in stacks.BROWSER_TRIALS)
    found = rules.findings(replace(stacks.browser(), cold=cold, trials=trials))
    values = [f.effect.value for f in found]
    assert all(math.isfinite(v) and v >= 0 for v in values) and values == sorted(values, reverse=True)


def test_a_layers_share_stays_its_part_of_the_wait_when_requests_overlap():
    # Requests in flight together: each one's wait is summed, so dm-0's 6000 ms exceed the 2184 ms read. Its own part
    # is still (6000 - 1380) / 6000 of its wait, and dm-0 was waited on for all of the read: at most 1 / (1 - 0.77).
    # Taken against the read's time instead, 4620 ms of 2184 capped at 100% gave "at most 1.0x" and ranked verity,
    # the layer that took most of the read, with the findings of no effect.
    case = stacks.browser()
    devices = tuple(replace(d, read_ms=6000) if d.device == "dm-0" else d for d in case.cold.devices)
    f = by_id(replace(case, cold=replace(case.cold, devices=devices)))["EX009"]
    assert f.effect.value == round(1 / (1 - 4620 / 6000), 2) == 4.35
    assert "dm-0's own time is 77% of the read" in f.evidence[-1]
    # without overlap the share is the same arithmetic as before: own time over the read's time
    assert by_id(stacks.browser())["EX009"].effect.value == round(1 / (1 - 404 / 2183.8), 2)


def test_requests_waited_on_longer_than_the_read_give_a_bound_and_say_why():
    # the recorded ext4 read: 260 requests whose waits add up to 3000 ms in a 0.2 s read (many in flight at once):
    # their share of the read is taken as all of it, so the estimate is the request-count bound, said as one
    case = stacks.with_queue(stacks.ext4(), "mmcblk0", read_ahead_kb=16)
    f = by_id(case)["EX011"]
    assert f.evidence[-1].startswith("estimated at most ")
    assert "mmcblk0's requests were waited on all through the read (3000 ms of waits in 200 ms" in f.evidence[-1]
    assert "took 100% of the read" not in f.evidence[-1]
