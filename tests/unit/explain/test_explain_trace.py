"""btt-like figures from trace text: a dm bio remapped onto a loop device whose backing reads hit the disk."""

from __future__ import annotations

import pytest

from tests.harness import DATA
from tunectl.explain import trace


def recorded(kernel: str) -> dict[str, trace.Timing]:
    return trace.timings(trace.parse_events((DATA / "explain" / f"trace-verity-loop-{kernel}.txt").read_text()))


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])  # 6.10 added ioprio to the request events
def test_both_formats_read_the_same(kernel):
    per = recorded(kernel)
    assert list(per) == ["253:0", "7:0", "179:0"]  # the write to 8:0 is not counted
    dm, loop, disk = per["253:0"], per["7:0"], per["179:0"]
    # dm is bio-based: bios queued, no request issued; its two bios became three on the loop
    assert (dm.queued, dm.issued, dm.completed) == (2, 0, 0)
    assert (loop.queued, loop.issued, loop.completed) == (3, 2, 2)
    assert (disk.queued, disk.issued, disk.completed) == (3, 3, 3)


def test_d2c_q2c_q2q():
    per = recorded("6.1")
    dm, loop, disk = (per[d].to_json() for d in ("253:0", "7:0", "179:0"))
    assert disk["d2c_ms"] == pytest.approx((1.0 + 2.0 + 3.0) / 3)
    assert disk["avg_request_kib"] == 4.0
    assert loop["d2c_ms"] == pytest.approx((1.17 + 3.15) / 2)
    # a dm bio completes when its last piece below completes: 1.2 ms and 3.2 ms
    assert dm["q2c_ms"] == pytest.approx((1.2 + 3.2) / 2)
    assert dm["d2c_ms"] is None  # no requests of its own
    assert loop["q2c_ms"] == pytest.approx((1.18 + 3.18 + 3.16) / 3, abs=0.001)
    assert dm["q2q_ms"] == pytest.approx(2.0)
    assert loop["avg_request_kib"] == 6.0


def test_unrelated_lines_and_writes_are_skipped():
    text = ("garbage\n  x-1 [000] 5.0: block_rq_issue: 8,0 W 4096 () 0 + 8 [x]\n"
            "  x-1 [000] 5.1: block_rq_issue: 8,0 R 0 () 0 + 0 [x]\n")
    assert trace.parse_events(text) == []


def test_a_trace_recorded_on_the_sd_card_model_under_verity():
    """Recorded by the VM tier (tests/vm/guest/explain.py, Debian 6.1): dd bs=4k count=32 from squashfs on
    dm-verity (254:0) on a loop device with direct I/O (7:0), its image on ext4 on the SD model (8:16).
    dm-verity submits its bios itself: no block_bio_remap; a dm bio is matched to the loop's by sector."""
    per = trace.timings(trace.parse_events((DATA / "explain" / "trace-browser-sd-6.1-recorded.txt").read_text()))
    dm, loop, card = per["254:0"], per["7:0"], per["8:16"]
    assert dm.issued == 0 and dm.queued > 0
    assert loop.issued == loop.completed > 0 and card.issued >= loop.issued
    assert len(dm.q2c) == dm.queued  # every dm bio completed through the loop below it
    j = {d: per[d].to_json() for d in per}
    assert j["254:0"]["q2c_ms"] >= j["7:0"]["q2c_ms"] >= j["7:0"]["d2c_ms"] > j["8:16"]["d2c_ms"] > 0
    assert 4 <= card.avg_request_kib <= 8  # 4 KiB squashfs blocks, compressed, read through 4 KiB verity blocks
