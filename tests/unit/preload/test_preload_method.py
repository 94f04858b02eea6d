"""Pure parts of preload's method: time bins, metadata range coalescing, the order chosen by the disk,
the memory-pressure guard and the numbers (floor, WILLNEED calls, hit rate)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunectl.preload import order, stats
from tunectl.preload.listfile import batches, header
from tunectl.preload.listing import Entry, ListError, metadata_of, mounts_of, parse, parse_header, render, renumber
from tunectl.preload.pressure import PressureGuard, some_total_us

MiB = 1 << 20


def entry(path: str, physical: int | None, size: int = 4096, inode: int = 1, device: str = "8:1") -> Entry:
    return Entry(path, device, inode, size, 0, ((0, size),), physical)


# ---------------------------------------------------------------- time bins

def test_time_bins_keep_what_was_read_first_first_and_sort_within_a_bin() -> None:
    # recorded (time) order: a b c | d e f with bins of 3 files' bytes; physical offsets scrambled
    entries = [entry("a", 900), entry("b", 100), entry("c", 500), entry("d", 50), entry("e", 990), entry("f", 10)]
    got = [entries[i].path for i in order.binned_indices(entries, 3 * 4096)]
    assert got == ["b", "c", "a", "f", "d", "e"]  # the second bin's f (offset 10) waits for the first bin


def test_one_bin_is_plain_physical_order_and_tiny_bins_are_recorded_order() -> None:
    entries = [entry("a", 900), entry("b", 100), entry("c", None, inode=5), entry("d", 500)]
    assert order.binned_indices(entries, 1 << 40) == order.physical_indices(entries)
    assert order.binned_indices(entries, 1) == [0, 1, 2, 3]


def test_a_large_file_closes_its_bin() -> None:
    entries = [entry("big", 800, size=40 * MiB), entry("x", 700), entry("y", 100)]
    assert [entries[i].path for i in order.binned_indices(entries, 32 * MiB)] == ["big", "y", "x"]


@pytest.mark.parametrize("seed", range(6))
def test_a_list_cut_into_chunks_is_binned_as_the_whole_list(seed: int) -> None:
    # One bin cutter serves the whole-list order and the streamed replay, which cuts bins chunk by chunk
    # carrying the unended bin's bytes: the same bins, and binned_indices is the sort by (bin, physical key).
    import random

    rng = random.Random(seed)
    entries = [entry(f"/f{i}", rng.choice([None, rng.randrange(10_000)]), size=rng.randrange(1, 9000),
                     inode=rng.randrange(50), device=rng.choice(["8:1", "8:1", "8:2"])) for i in range(400)]
    whole, _ = order.bin_ends(entries, 20_000)
    cuts = sorted({0, len(entries), *rng.sample(range(1, len(entries)), 7)})
    streamed, filled = [], 0
    for start, end in zip(cuts, cuts[1:]):
        ends, filled = order.bin_ends(entries[start:end], 20_000, filled)
        streamed += [start + n for n in ends]
    assert streamed == whole and len(whole) > 20
    bins = [sum(1 for end in whole if end <= i) for i in range(len(entries))]
    keys = [(bins[i], *order._physical_key(e)) for i, e in enumerate(entries)]
    assert order.binned_indices(entries, 20_000) == sorted(range(len(entries)), key=keys.__getitem__)


@pytest.mark.parametrize("rotational, time_order, expected", [
    (True, False, "physical"), (True, True, "time-bins"), (None, False, "physical"), (None, True, "time-bins"),
    (False, False, "list"), (False, True, "list"),
])
def test_the_method_follows_the_disk(rotational: bool | None, time_order: bool, expected: str) -> None:
    assert order.method(rotational, time_order) == expected


def test_flash_keeps_the_lists_order_and_rotational_sorts() -> None:
    entries = [entry("a", 900), entry("b", 100), entry("c", 500)]
    assert order.indices_for("list", entries) == [0, 1, 2]
    assert order.indices_for("physical", entries) == [1, 2, 0]


# ---------------------------------------------------------------- metadata ranges

def test_coalescing_joins_across_small_holes_only() -> None:
    ranges = [(8192, 4096), (0, 4096), (4096, 4096), (65536 + 12288, 4096), (1 << 30, 4096)]
    assert order.coalesce(ranges, 0) == [(0, 12288), (77824, 4096), (1 << 30, 4096)]
    assert order.coalesce(ranges, 65536) == [(0, 81920), (1 << 30, 4096)]  # hole of 65536 joined
    assert order.coalesce(ranges, 65535) == [(0, 12288), (77824, 4096), (1 << 30, 4096)]
    assert order.coalesce([], 4096) == []


def test_coalesced_ranges_cover_every_recorded_byte() -> None:
    ranges = [(i * 40960, 4096) for i in range(50)] + [(7, 3)]
    for gap in (0, 4096, 40960, 1 << 20):
        out = order.coalesce(ranges, gap)
        assert order.overlap_bytes(out, ranges) == sum(n for _, n in order.merge_ranges(ranges))
        assert all(a[0] + a[1] < b[0] for a, b in zip(out, out[1:]))  # sorted, disjoint


def test_overlap_bytes() -> None:
    assert order.overlap_bytes([(0, 100), (200, 100)], [(50, 200)]) == 100
    assert order.overlap_bytes([(0, 10)], [(10, 10)]) == 0
    assert order.overlap_bytes([], [(0, 10)]) == 0


def test_metadata_round_trips_in_the_header_and_a_version_1_reader_ignores_it() -> None:
    text = render([entry("/a", 4096)], "now", {"8:1": [(0, 8192), (1 << 20, 4096)]}, time_order=True)
    head = json.loads(text.splitlines()[0])
    assert head["version"] == 1 and head["order"] == "time"
    assert metadata_of(head, "l") == {"8:1": ((0, 8192), (1 << 20, 4096))}
    assert parse(text, "l").entries == [entry("/a", 4096)]
    assert metadata_of(parse_header(render([], "now"), "l"), "l") == {}


def test_a_list_follows_its_file_system_to_the_device_number_it_has_at_this_boot(tmp_path) -> None:
    # Boot 1 collected on 8:16; at boot 2 the disks were probed in another order. "/" is always a mount:
    # the list says its file system was 4095:4095 then, so entries and metadata move to /'s number now.
    import os

    root = os.stat("/").st_dev
    now = f"{os.major(root)}:{os.minor(root)}"
    listed = [entry("/a", 4096, device="4095:4095"), entry("/b", 8192, device="7:1")]
    path = tmp_path / "boot.list"
    path.write_text(render(listed, "now", {"4095:4095": [(0, 4096)]}, mounts={"4095:4095": "/", "7:1": "/nowhere"}))
    (_, got), = batches(str(path))
    assert [e.device for e in got] == [now, "7:1"]  # /nowhere is no mount: its files stay (and are skipped)
    assert got[0][2:] == listed[0][2:]
    head = header(str(path))
    assert head["moved"] == {"4095:4095": now} and metadata_of(head, "l") == {now: ((0, 4096),)}
    assert head["mounts_ignored"] is False
    # Review 2, finding 4: a list others may write names no paths to stat (shown here; a user replaying another's
    # list is read the same way, and root refuses to replay it at all: tests/unit/preload/test_preload_owner.py).
    path.chmod(0o666)
    (_, got), = batches(str(path), replayed=False)
    assert [e.device for e in got] == ["4095:4095", "7:1"]
    head = header(str(path), replayed=False)
    assert head["moved"] == {} and head["mounts_ignored"] is True
    # Nor device ranges to read as they are (a file entry is checked against the file; a range is not).
    assert head["metadata_ignored"] is True and metadata_of(head, "l") == {}
    path.chmod(0o644)
    assert header(str(path))["metadata_ignored"] is False


def test_two_listed_devices_on_one_number_now_lose_their_metadata_ranges(tmp_path) -> None:
    # Review 2 (listfile.py): 4095:4095 moved onto /'s number, which another listed device still has in the list.
    # Whose ranges that number holds now is unknown: both are dropped (never the wrong device's), the rest stay.
    import os

    root = os.stat("/").st_dev
    now = f"{os.major(root)}:{os.minor(root)}"
    path = tmp_path / "boot.list"
    path.write_text(render([entry("/a", 4096, device="4095:4095")], "now",
                           {"4095:4095": [(0, 4096)], now: [(8192, 4096)], "7:1": [(0, 512)]},
                           mounts={"4095:4095": "/"}))
    head = header(str(path))
    assert head["moved"] == {"4095:4095": now}
    assert metadata_of(head, "l") == {"7:1": ((0, 512),)} and head["metadata_dropped"] == [now]


def test_renumber_is_free_when_nothing_moved() -> None:
    entries = [entry("/a", 1)]
    assert renumber(entries, {}) is entries
    assert renumber(entries, {"8:1": "8:17"})[0] == entry("/a", 1, device="8:17")


@pytest.mark.parametrize("bad, words", [
    ({"mounts": []}, "expected an object"),
    ({"mounts": {"sda": "/"}}, "is not MAJ:MIN"),
    ({"mounts": {"8:1": "relative"}}, "expected an absolute path"),
    ({"mounts": {"8:1": 5}}, "expected an absolute path"),
])
def test_bad_mounts_are_refused_at_line_1(bad: dict, words: str) -> None:
    with pytest.raises(ListError) as e:
        mounts_of(bad, "boot.list")
    assert str(e.value).startswith("boot.list:1: mounts") and words in str(e.value)


@pytest.mark.parametrize("bad, words", [
    ({"metadata": []}, "expected an object"),
    ({"metadata": {"sda": [[0, 1]]}}, "is not MAJ:MIN"),
    ({"metadata": {"8:1": [[0, 0]]}}, "[offset, length] pairs"),
    ({"metadata": {"8:1": [[-1, 5]]}}, "[offset, length] pairs"),
    ({"metadata": {"8:1": "0-5"}}, "[offset, length] pairs"),
])
def test_bad_metadata_is_refused_at_line_1(bad: dict, words: str) -> None:
    with pytest.raises(ListError) as e:
        metadata_of(bad, "boot.list")
    assert str(e.value).startswith("boot.list:1: metadata") and words in str(e.value)


# ---------------------------------------------------------------- memory pressure

PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def test_pressure_total_is_read_from_the_some_line() -> None:
    assert some_total_us(PSI.format(12345)) == 12345
    assert some_total_us(None) is None and some_total_us("garbage") is None
    # str.isdigit takes "²", which int() refuses: a ValueError out of the guard (exit 70); the kernel writes ASCII
    assert some_total_us(PSI.format("\u00b2")) is None and some_total_us(PSI.format("\u0661")) is None


def test_a_pressure_file_that_is_not_ascii_is_no_total(monkeypatch: pytest.MonkeyPatch) -> None:
    # A file mounted over /proc/pressure/memory holding "total=\u00b2" in UTF-8: the replay's read of it raised
    # UnicodeDecodeError out of the guard, exit 70 ("internal error") after the first chunk.
    import io

    from tunectl.preload import replay as replay_module

    monkeypatch.setattr(replay_module, "open", lambda path, mode: io.BytesIO(PSI.format("\u00b2").encode()),
                        raising=False)
    assert some_total_us(replay_module._memory_pressure()) is None
    guard = PressureGuard(replay_module._memory_pressure, now=0.0)
    assert not guard.stop(1.0)


def test_the_guard_stops_when_the_stall_share_passes_the_limit() -> None:
    totals = iter([0, 50_000, 100_000, 400_000])  # microseconds stalled, read at t=0, 1, 2, 3 s
    guard = PressureGuard(lambda: PSI.format(next(totals)), now=0.0, limit=0.10)
    assert not guard.stop(1.0) and guard.share == pytest.approx(0.05)
    assert not guard.stop(2.0)  # 5% again
    assert guard.stop(3.0) and guard.share == pytest.approx(0.30)


def test_without_psi_the_guard_never_stops() -> None:
    guard = PressureGuard(lambda: None, now=0.0)
    assert not guard.stop(1.0) and not guard.stop(100.0)


# ---------------------------------------------------------------- numbers

def test_floor_arithmetic() -> None:
    assert stats.floor_seconds(100 * MiB, 50 * MiB) == 2.0
    assert stats.floor_seconds(1, None) is None and stats.floor_seconds(1, 0) is None
    assert stats.times_floor(5.0, 2.0) == 2.5 and stats.times_floor(5.0, None) is None
    floor = stats.Floor(100e6, 250_000_000)
    assert floor.seconds == 2.5 and floor.to_json() == {"sequential_mb_s": 100.0, "seconds": 2.5}


def test_willneed_calls_per_window() -> None:
    entries = [entry("/a", 0, size=100), entry("/b", 0, size=300 * 1024, inode=2),
               Entry("/c", "8:2", 3, 1 << 20, 0, ((0, 4096), (8192, 4096)), None)]
    assert stats.requests(entries, {"8:1": 128 * 1024, "8:2": 4096}) == 1 + 3 + 2


def test_hit_rate_by_page_and_by_file_identity() -> None:
    listed = [entry("/a", 0, size=8192, inode=1), entry("/b", 0, size=4096, inode=2)]
    read = [Entry("/a", "8:1", 1, 8192, 0, ((0, 100),), 0),  # one page of a's two
            entry("/renamed", 0, size=4096, inode=2),  # the same inode: counted
            entry("/c", 0, size=4096, inode=3)]  # not on the list: missed
    hit = stats.hit_rate(listed, read)
    assert (hit.listed, hit.read, hit.shared) == (12288, 12288, 8192)
    assert hit.used == pytest.approx(2 / 3) and hit.missed == pytest.approx(1 / 3)
    assert hit.recollect  # used below 70% and missed above 20%
    assert not stats.hit_rate(listed, listed).recollect
    assert stats.hit_rate([], []).used == 1.0 and stats.hit_rate([], []).missed == 0.0


def test_in_physical_order_agrees_with_the_sort_on_every_shape() -> None:
    import random

    rng = random.Random(7)
    for devices in (["8:1"], ["8:1", "8:2"]):
        for unknown in (0.0, 0.3):
            entries = [entry(f"/f{i}", None if rng.random() < unknown else rng.randrange(50) * 4096,
                             inode=rng.randrange(20), device=rng.choice(devices)) for i in range(60)]
            ordered = order.physical_order(entries)
            assert order.in_physical_order(ordered)[0]
            head, tail = ordered[:30], ordered[30:]
            ok, last = order.in_physical_order(head)
            assert ok and order.in_physical_order(tail, last)[0]
            assert not order.in_physical_order(head, order._physical_key(tail[-1]))[0] \
                or order._physical_key(tail[-1]) == order._physical_key(head[0])
            shuffled = ordered[:]
            while shuffled == ordered or order.physical_order(shuffled) == shuffled:
                rng.shuffle(shuffled)
            assert not order.in_physical_order(shuffled)[0]


ROWS = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 6)), st.integers(0, 6), st.sampled_from(["8:1", "8:2"])),
                max_size=12)


@settings(max_examples=500, deadline=None)
@given(ROWS, st.one_of(st.none(), ROWS.filter(bool)), st.booleans())
def test_in_physical_order_is_the_full_keys_comparison(rows: list, before: list | None, one_device: bool) -> None:
    """The C-level judgement of a chunk (offsets, then inodes where offsets repeat, then the ones without an
    offset by inode) says what comparing every entry's full sort key says, ties and a previous chunk included."""
    def made(found: list) -> list[Entry]:
        return [entry(f"/f{i}", p, inode=n, device="8:1" if one_device else d) for i, (p, n, d) in enumerate(found)]

    entries = made(rows)
    after = order._physical_key(made(before)[-1]) if before else None
    keys = [order._physical_key(e) for e in entries]
    expected = keys == sorted(keys) and (after is None or not keys or after <= keys[0])
    assert order.in_physical_order(entries, after) == (expected, keys[-1] if keys else after)
    assert order.order_name(entries) == ("physical" if all(p is not None for p, _, _ in rows) else
                                         "inode" if all(p is None for p, _, _ in rows) else "mixed")


def test_the_metadata_planned_is_what_the_pass_reads_coalesced_once() -> None:
    from tunectl.preload.metadata import GAP, planned

    ranges = [(i * 65536, 1) for i in range(100)] + [(10 << 20, 4096), (10 << 20, 100)]  # a hole < GAP each; a dup
    runs, total = planned({"8:1": ranges})
    assert runs == {"8:1": [(0, 99 * 65536 + 1), (10 << 20, 4096)]}
    assert order.coalesce(runs["8:1"], GAP) == runs["8:1"]  # the pass, given these, joins nothing more
    assert total == 1585 * 4096 + 4096  # whole pages: 6488065 bytes are 1585 pages
