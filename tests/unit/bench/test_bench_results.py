"""tunectl bench, pure parts: stat deltas, sweep points, statistics, recommendation, chart, CSV, fio JSON."""

from __future__ import annotations

import csv
import io

import pytest

from tunectl.bench import chart
from tunectl.bench.diskstat import StatDelta, delta, parse_stat
from tunectl.bench.export import CSV_FIELDS, runs_csv
from tunectl.bench.fio import fio_argv, parse_fio_json
from tunectl.bench.results import Placement, RandomRead, Run, Summary, profile_fragment, recommend, summarise
from tunectl.bench.sweep import Point, parse_read_ahead, parse_schedulers, plan_points
from tunectl.errors import TunectlError, UsageError

# A real line from a 6.x kernel (17 fields, padded): a virtio disk after boot.
STAT_LINE = ("   12034     3456   987654    23456     7890     1234   567890    34567        2    45678    67890"
             "        0        0        0        0      321      123")


def test_stat_fields_in_kernel_order():
    s = parse_stat(STAT_LINE)
    assert (s.reads, s.reads_merged, s.sectors_read, s.read_ms, s.writes) == (12034, 3456, 987654, 23456, 7890)
    assert (s.io_ticks_ms, s.time_in_queue_ms) == (45678, 67890)
    # an old kernel's 11 fields are enough
    assert parse_stat(" ".join(STAT_LINE.split()[:11])) == s


@pytest.mark.parametrize("text", ["", "1 2 3", "a b c d e f g h i j k"])
def test_stat_garbage_is_an_error(text):
    with pytest.raises(ValueError):
        parse_stat(text)


def test_delta_is_iostat_arithmetic():
    before = parse_stat("100 10 8000 50 0 0 0 0 0 40 60")
    after = parse_stat("300 110 108000 250 5 0 0 0 0 140 460")
    d = delta("sda", before, after)
    assert (d.reads, d.reads_merged, d.sectors_read, d.writes) == (200, 100, 100000, 5)
    assert d.merged_share == pytest.approx(100 / 300)  # iostat %rrqm
    assert d.avg_request_kib == pytest.approx(250.0)  # 100000 sectors * 512 B / 200 reads
    assert d.read_await_ms == pytest.approx(1.0)
    assert d.time_in_queue_ms == 400
    # counters never run backwards over one point; if they seem to (a wrap), no nonsense
    assert delta("sda", after, before).reads == 0
    assert StatDelta("dm-0").merged_share == 0 and StatDelta("dm-0").avg_request_kib == 0


def test_read_ahead_lists():
    assert parse_read_ahead("4..8192") == [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert parse_read_ahead("1 MiB,128,16") == [16, 128, 1024]
    assert parse_read_ahead("0,4..16,12") == [0, 4, 8, 12, 16]
    assert parse_read_ahead("100..300") == [100, 200, 300]  # a range ends on its last value


@pytest.mark.parametrize("text", ["fast", "4,,8", "4..", "8..4", "0..16", "70000", "1.5", "-4", "4 KB/s"])
def test_read_ahead_garbage(text):
    with pytest.raises(UsageError) as e:
        parse_read_ahead(text)
    assert "--read-ahead" in e.value.message


def test_scheduler_lists():
    assert parse_schedulers("deadline,none,mq-deadline") == ["mq-deadline", "none"]
    with pytest.raises(UsageError) as e:
        parse_schedulers("mq-deadline,cfqq")
    assert "cfqq" in e.value.message and "kyber" in e.value.hint


def test_points_shuffled_reproducibly():
    a = plan_points([4, 64, 1024], ["none", "mq-deadline"], 3, seed=7)
    assert len(a) == 18 and len(set(a)) == 18
    assert a == plan_points([4, 64, 1024], ["none", "mq-deadline"], 3, seed=7)
    assert a != plan_points([4, 64, 1024], ["none", "mq-deadline"], 3, seed=8)
    ordered = sorted(a, key=lambda p: (p.run, p.scheduler, p.read_ahead_kb))
    assert a != ordered  # shuffled, not in sweep order
    assert {p.run for p in a} == {1, 2, 3}


def _run(sched, ra, run, mb_s, order=1, reads=100, merged=0, sectors_per_read=None):
    # As on a plain disk: the read-ahead window sets the request size (2 sectors per KiB), unless a layer above decides.
    sectors = reads * (sectors_per_read or 2 * ra)
    stats = (StatDelta("dm-0", reads=reads, sectors_read=sectors),
             StatDelta("mmcblk0", reads=reads // 2, reads_merged=merged, sectors_read=sectors))
    return Run(Point(sched, ra, run), order, int(mb_s * 1e6), 1.0, stats)


def test_summary_median_spread_and_summed_stats():
    runs = [_run("none", 64, 1, 80.0), _run("none", 64, 2, 100.0), _run("none", 64, 3, 90.0, merged=50)]
    (s,) = summarise(runs)
    assert (s.mb_s, s.mb_s_min, s.mb_s_max, s.runs) == (90.0, 80.0, 100.0, 3)
    assert s.spread_pct == pytest.approx(20 / 90 * 100)
    top, low = s.stats
    assert (top.device, top.reads, low.reads_merged) == ("dm-0", 300, 50)
    assert s.to_json()["devices"][0]["reads_per_run"] == 100


# The hdparm -t sweep of the source study: 40 MB/s at 4 KiB, 90 MB/s from 64 KiB on, flat after.
HDPARM = {4: 40, 8: 55, 16: 70, 32: 82, 64: 90, 128: 90.5, 256: 89, 512: 91, 1024: 90, 2048: 91.5, 4096: 90, 8192: 91}


def _summaries(figures: dict[str, dict[int, float]]) -> list[Summary]:
    runs = [_run(sched, ra, 1, mb) for sched, by_ra in figures.items() for ra, mb in by_ra.items()]
    return summarise(runs)


def test_recommendation_is_the_smallest_read_ahead_within_5_percent():
    rec = recommend(_summaries({"mq-deadline": HDPARM}), Placement("sda", "rotational", stacked=False))
    assert rec.read_ahead_kb == 64 and rec.best.read_ahead_kb == 2048
    assert rec.scheduler is None  # one scheduler swept: nothing to choose, nothing said
    assert rec.caution == ""
    assert rec.fragment == ("# tunectl bench sda: 90 MB/s at read_ahead_kb 64 with mq-deadline: the smallest read-ahead "
                            "within 5% of the best, 92 MB/s at 2048 KiB with mq-deadline\n"
                            "classes:\n  rotational:\n    read_ahead_kb: 64\n")


def test_recommendation_picks_the_scheduler_that_did_best_there():
    figures = {"none": {16: 60, 128: 95, 1024: 100}, "mq-deadline": {16: 70, 128: 97, 1024: 99}, "bfq": {16: 50, 128: 96}}
    rec = recommend(_summaries(figures), Placement("sdb", "ssd", stacked=False))
    assert (rec.read_ahead_kb, rec.scheduler) == (128, "mq-deadline")
    assert "    scheduler: mq-deadline\n    read_ahead_kb: 128\n" in rec.fragment
    # 5% is a boundary: 95 of 100 is in
    assert recommend(_summaries({"none": {16: 94.9, 32: 95.0, 64: 100}}), Placement("x", "ssd", False)).read_ahead_kb == 32


def test_noisy_runs_come_with_a_caution():
    runs = [_run("none", 64, 1, 50.0), _run("none", 64, 2, 100.0), _run("none", 64, 3, 90.0), _run("none", 8, 1, 20.0)]
    rec = recommend(summarise(runs), Placement("sda", "rotational", stacked=False))
    assert rec.read_ahead_kb == 64 and "disagree by up to 56%" in rec.caution
    assert rec.to_json()["caution"] == rec.caution


def test_stacked_target_gets_below():
    figures = {"none": {128: 92, 2048: 240}, "mq-deadline": {128: 90, 2048: 242}}
    rec = recommend(_summaries(figures), Placement("dm-1", "dm", stacked=True, lower=("mmcblk0",)))
    assert (rec.read_ahead_kb, rec.scheduler) == (2048, "mq-deadline")
    assert rec.fragment.endswith("classes:\n  dm:\n    read_ahead_kb: 2048\n"
                                 "    below: {scheduler: mq-deadline}   # on mmcblk0\n")
    assert recommend([], Placement("dm-1", "dm", True)) is None


def test_fragment_is_a_valid_profile(tmp_path):
    from tunectl.profile.library import shipped_profile_dir
    from tunectl.profile.resolve import load_profile

    for placement, sched in ((Placement("dm-1", "dm", True, ("mmcblk0",)), "mq-deadline"),
                             (Placement("loop0", "loop", False), "bfq"), (Placement("zram0", "zram", False), None)):
        text = profile_fragment(placement, 2048, sched, "recorded")
        path = tmp_path / f"{placement.cls}.yaml"
        path.write_text("name: from-bench\ndescription: pasted from tunectl bench\n" + text)
        profile = load_profile(str(path), [shipped_profile_dir()], None)
        block = profile.classes[placement.cls]
        assert block["read_ahead_kb"] == 2048
        if sched and placement.stacked:
            assert block["below"]["scheduler"] == [sched]
        elif sched:
            assert block["scheduler"] == [sched]


CHART = """\
MB/s
100 |                     o     o
    |               o     *     *
    |         o     *
    |   o     *
    |   *
 50 |
    |
    |
    |
    |
  0 |
    +------------------------------
       4K   64K   128K   1M    8M  read_ahead_kb
     * mq-deadline  o none  # several"""


def test_chart_on_recorded_figures():
    figures = {"mq-deadline": {4: 60, 64: 70, 128: 80, 1024: 90, 8192: 90},
               "none": {4: 70, 64: 80, 128: 90, 1024: 100, 8192: 100}}
    assert chart.render(_summaries(figures)) == CHART
    # equal values of two schedulers share a cell, marked as several; the axis is linear from 0
    lines = chart.render(_summaries({"a": {4: 10, 8: 20}, "b": {4: 10, 8: 5}})).splitlines()
    assert lines[1] == "20 |         *"
    assert lines[6] == "10 |   #"
    assert lines[9] == "   |         o"


def test_chart_without_points_or_scheduler():
    assert chart.render([]) == "(no points)"
    text = chart.render(_summaries({None: {128: 10}}))
    assert "no scheduler" in text and "several" not in text


def test_csv_has_a_row_per_run_and_device():
    runs = [_run("none", 64, 1, 80.0, order=2), _run("bfq", 8, 1, 50.0, order=1)]
    runs[0] = Run(runs[0].point, 2, runs[0].bytes_read, 1.0, runs[0].stats, RandomRead(2500.0, 10.24, 390.5))
    rows = list(csv.DictReader(io.StringIO(runs_csv(runs))))
    assert list(rows[0]) == list(CSV_FIELDS)
    assert [(r["order"], r["scheduler"], r["device"]) for r in rows] == [
        ("1", "bfq", "dm-0"), ("1", "bfq", "mmcblk0"), ("2", "none", "dm-0"), ("2", "none", "mmcblk0")]
    assert rows[2]["mb_s"] == "80.00" and rows[2]["random_iops"] == "2500.0" and rows[0]["random_iops"] == ""
    assert rows[1]["avg_request_kib"] == "16.0"  # 100 reads x 16 sectors on dm-0, in 50 requests below


# Trimmed from `fio --output-format=json` 3.33 (a note line first, as fio prints for some options).
FIO_JSON = """note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "tunectl-bench",
      "read" : {"io_bytes" : 16777216, "bw_bytes" : 10485760, "iops" : 2560.0,
                "clat_ns" : {"min" : 1000, "max" : 9000000, "mean" : 389500.5}}
    }
  ]
}
"""


def test_fio_json_and_argv():
    r = parse_fio_json(FIO_JSON)
    assert (r.iops, r.mb_s, r.mean_latency_us) == (2560.0, 10.48576, pytest.approx(389.5005))
    argv = fio_argv("/mnt/a:b.img", 1 << 20, 3)
    assert "--readonly" in argv and "--filename=/mnt/a\\:b.img" in argv and "--rw=randread" in argv
    assert not any(a.startswith(("--rw=write", "--rw=randwrite", "--rw=rw", "--verify")) for a in argv)
    for bad in ("", "fio: engine psync not loadable", '{"jobs": []}', '{"jobs": [{"read": {}}]}'):
        with pytest.raises(TunectlError):
            parse_fio_json(bad)


def test_no_read_ahead_when_it_does_not_change_the_requests():
    """squashfs on dm-verity: 8 KiB requests at every read-ahead; say so, recommend no read_ahead_kb."""
    runs = [_run(sched, ra, 1, mb_s, sectors_per_read=16)
            for sched, ra, mb_s in (("none", 16, 20.0), ("none", 1024, 21.0), ("bfq", 16, 19.0), ("bfq", 1024, 20.0))]
    rec = recommend(summarise(runs), Placement("dm-0", "dm", True, ("mmcblk0",)))
    assert rec.read_ahead_kb is None and "read_ahead_kb:" not in rec.fragment
    assert "did not change the requests" in rec.reason and "squashfs" in rec.reason
    assert rec.scheduler == "none" and "below: {scheduler: none}" in rec.fragment


def test_both_kinds_of_recommendation_follow_the_bench_schema():
    """The recommendation of `bench --json` (unit tests reach no real sweep): with and without a read_ahead_kb."""
    import jsonschema

    from tunectl import schema

    part = schema.load("bench")["properties"]["recommendation"]
    placement = Placement("dm-0", "dm", True, ("mmcblk0",))
    for sectors in (16, None):  # request sizes fixed by a layer above, or set by the read-ahead window
        runs = [_run(sched, ra, 1, mb_s, sectors_per_read=sectors)
                for sched, ra, mb_s in (("none", 16, 20.0), ("none", 1024, 30.0), ("bfq", 16, 19.0), ("bfq", 1024, 29.0))]
        rec = recommend(summarise(runs), placement).to_json()
        assert (rec["read_ahead_kb"] is None) == (sectors == 16), rec
        jsonschema.validate(rec, part, cls=jsonschema.Draft202012Validator)


def test_no_recommendation_when_no_read_reached_the_devices():
    """squashfs on a 4 KiB dm-verity from 6.5: after the warm read its own cache served every point; the timings
    differ (decompression, noise) but no request was shaped: neither read-ahead nor a scheduler is recommended, and the
    cache bench could not drop is said in the caution."""
    runs = [_run(sched, ra, 1, mb_s, reads=0)
            for sched, ra, mb_s in (("none", 16, 21.0), ("none", 1024, 14.0), ("bfq", 16, 19.8), ("bfq", 1024, 3.5))]
    rec = recommend(summarise(runs), Placement("dm-0", "dm", True, ("mmcblk0",)), "squashfs keeps them")
    assert (rec.read_ahead_kb, rec.scheduler) == (None, None)
    assert "no read reached the devices" in rec.reason and rec.caution == "squashfs keeps them"
    assert rec.fragment is None  # not a `classes:` block with an empty class in it
    doc = rec.to_json()
    assert doc["fragment"] is None and doc["reason"] == rec.reason
    import jsonschema

    from tunectl import schema

    jsonschema.validate(doc, schema.load("bench")["properties"]["recommendation"], cls=jsonschema.Draft202012Validator)
    some = [_run("none", 16, 1, 20.0, reads=0), _run("none", 1024, 1, 20.0, reads=4, sectors_per_read=16)]
    assert "no read reached" not in recommend(summarise(some), Placement("dm-0", "dm", True)).reason


def test_the_squashfs_caution_is_one_plain_sentence_what_why_what_to_do():
    from tunectl.bench.stack import kept_cache
    from tunectl.devices.model import Device
    from tunectl.devices.stack import BlockLayer, MountLayer, Stack

    verity = Device("dm-0", "dm", "dm:vroot", logical_block_size=4096)
    stack = Stack((MountLayer("/opt/browser", "squashfs", "/dev/mapper/vroot"), BlockLayer(verity)), verity)
    said = kept_cache(stack, "6.12.38+deb13-amd64")
    assert said.startswith("these points were not cold reads: squashfs on dm-0 (kernel 6.12.38+deb13-amd64, "
                           "4096-byte blocks) keeps"), said
    assert "vm.drop_caches" in said and said.endswith("to measure cold reads, bench the device (dm-0) instead")
    assert said.count(":") == 1 and said.count(";") == 1  # what, then why; then what to do
    assert kept_cache(stack, "6.1.0-30-amd64") == ""


def test_squashfs_keeps_partial_blocks_from_6_5_on_page_sized_device_blocks():
    from tunectl.explain.squashfs import caches_partial_blocks

    assert caches_partial_blocks((6, 12), 4096) and caches_partial_blocks((6, 5), 4096)
    assert not caches_partial_blocks((6, 1), 4096)  # no such cache before 6.5
    assert not caches_partial_blocks((6, 12), 512) and not caches_partial_blocks((6, 12), None)  # 1 KiB device blocks
