"""tunectl explain on the browser stack (issue #29): squashfs 4 KiB gzip -> dm-verity -> loop with direct
I/O -> ext4 -> the SD-card model (tests/README.md), on Debian's 6.1 kernel; one boot (guest group `explain`)."""

from __future__ import annotations

import shutil

import pytest

from tests.vm.machine import log_dir


@pytest.fixture(scope="module")
def run(vm_boot) -> dict:
    boot = vm_boot("6.1", "explain", kind="model")
    raw = boot.shared / "trace-browser-6.1.txt"
    if raw.exists():  # kept beside the boot's logs: the trace reader's unit tests take their data from it
        logs = log_dir() / boot.kernel.release
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(raw, logs / raw.name)
    assert not boot.results["errors"], boot.results["errors"]
    return boot.results


def findings(doc: dict) -> dict:
    return {f["rule"]: f for f in doc["findings"]}


def test_the_stack_is_read_layer_by_layer(run):
    doc = run["plain"]["doc"]
    assert run["plain"]["code"] == 0, run["plain"]["stderr"]
    kinds = [la["kind"] for la in doc["layers"]]
    assert kinds[:4] == ["file", "filesystem", "dm", "loop"]
    assert ("disk", run["build"]["sd"]) in [(la["kind"], la["name"]) for la in doc["layers"]]
    sq = doc["layers"][1]["filesystem"]["squashfs"]
    assert (sq["block_size"], sq["compressor"]) == (4096, "gzip")
    verity = doc["layers"][2]["dm"]["table"][0]
    assert verity["type"] == "verity" and verity["hash_algorithm"] == "sha256"
    loops = {la["name"]: la["loop"] for la in doc["layers"] if la["kind"] == "loop"}
    assert loops[run["build"]["loop"]]["direct_io"] is True
    # the hash loop's image lies on the same ext4 as the data loop's: each layer is listed once
    named = [(la["kind"], la["name"]) for la in doc["layers"]]
    assert len(named) == len(set(named)) and ("loop", run["build"]["hash_loop"]) in named, named
    assert kinds.count("filesystem") == 2, kinds  # the squashfs, then the card's ext4 (not again under the hash loop)


def test_dm_has_no_scheduler_and_the_card_decides(run):
    f = findings(run["plain"]["doc"])["EX001"]
    assert "is bio-based" in f["evidence"][0] and run["build"]["sd"] in f["evidence"][0]


def test_the_card_gets_4k_requests_almost_unmerged(run):
    cold = run["plain"]["doc"]["cold"]
    card = next(d for d in cold["devices"] if d["device"] == run["build"]["sd"])
    # 4 KiB squashfs blocks, compressed, read through verity's 4 KiB blocks: one or two blocks per request
    assert card["avg_request_kib"] <= 8 and card["merged_share"] < 0.05, card
    assert "EX002" in findings(run["plain"]["doc"])


def test_block_size_and_direct_io_are_named_as_causes(run):
    found = findings(run["plain"]["doc"])
    assert found["EX003"]["change"]["text"].startswith("mksquashfs SOURCE IMAGE -b 128K")
    assert found["EX004"]["change"]["text"] == f"losetup --direct-io=off /dev/{run['build']['loop']}"


def test_try_finds_a_variant_twice_as_fast(run):
    assert run["try"]["code"] == 0, run["try"]["stderr"]
    exps = run["try"]["doc"]["experiments"]
    base = next(e for e in exps if e["as_is"])
    best = max(exps, key=lambda e: e["mb_s"])
    assert best["mb_s"] >= 2 * base["mb_s"], exps


def test_try_reads_every_copy_through_a_scratch_verity_like_the_users(run):
    """#29: the variants measure the stack the user has: each copy through dm-verity built with the user's table."""
    table = next(la for la in run["plain"]["doc"]["layers"] if la["kind"] == "dm")["dm"]["table"][0]
    exps = run["try"]["doc"]["experiments"]
    assert exps and all(e["verity"] == {"hash_algorithm": table["hash_algorithm"], "version": table["version"],
                                        "data_block_size": table["data_block_size"],
                                        "hash_block_size": table["hash_block_size"], "salt": table["salt"]}
                   for e in exps), exps
    assert not any("veritysetup not found" in n for n in run["try"]["doc"]["notes"])
    # the copy "as is" goes through the same stack as the file: the card sees the same requests (without verity
    # the copy's were 2.2 KiB against the file's 5.2 KiB: compressed blocks no longer read in verity's 4 KiB blocks)
    as_is = next(e for e in exps if e["as_is"])
    card = next(d for d in run["plain"]["doc"]["cold"]["devices"] if d["device"] == run["build"]["sd"])
    assert 0.9 <= as_is["disk_reads"] / card["reads"] <= 1.1, (as_is, card)
    assert abs(as_is["disk_avg_request_kib"] - card["avg_request_kib"]) <= 1.0, (as_is, card)
    assert {k: v for k, v in run["try_left"].items() if k != "image"} == {
        "dm": [], "loops": [], "mounts": [], "scratch": []}, run["try_left"]
    assert run["try_left"]["image"] == run["build"]["image"]  # the user's image and hash tree unchanged


def test_ctrl_c_during_try_leaves_no_scratch_device(run):
    stopped = run["interrupted"]
    assert stopped["saw_verity"], stopped  # it was stopped while a scratch verity device was open
    assert stopped["code"] == 130, stopped
    left = dict(stopped["left"])
    assert left.pop("image") == run["build"]["image"]
    assert left == {"dm": [], "loops": [], "mounts": [], "scratch": []}, stopped


def test_compare_against_ext4(run):
    """The issue's card gave 2.6x; under TCG the guest's CPU (sha256 and gzip emulated) adds about 1 ms per
    4 KiB block on top of the card's, so the ratio here is larger (17.8x measured): only the direction and
    the named contributor (the card's request count) are asserted."""
    assert run["compare"]["code"] == 0, run["compare"]["stderr"]
    cmp = run["compare"]["doc"]["compare"]
    assert cmp["ratio"] >= 2, cmp
    assert cmp["largest"].startswith(f"{run['build']['sd']}: ") and cmp["disk_reads_ratio"] >= 4, cmp


def test_trace_gives_d2c_and_q2c_per_layer(run):
    trace = {t["device"]: t for t in run["compare"]["doc"]["trace"]}
    dm = next(la["name"] for la in run["compare"]["doc"]["layers"] if la["kind"] == "dm")
    assert trace[dm]["q2c_ms"] is not None and trace[dm]["issued"] == 0  # bio-based: remapped, not issued
    for name in (run["build"]["loop"], run["build"]["sd"]):
        assert trace[name]["d2c_ms"] is not None and trace[name]["q2c_ms"] is not None, trace[name]


def test_findings_rank_by_effect_estimated_then_measured_by_try(run):
    """#29: the findings are ranked by the cold read's expected speedup. Without --try each is estimated from the
    facts (the block size first: its reads at the top of the stack take most of the read); with --try the block
    size and the loop's direct I/O are each measured alone (9.1x and 2.3x in one run, 12.6x and 2.4x in another,
    3.88x and 2.37x on a host at load 8, 7.03x and 1.93x in a whole CI run)."""
    for step in ("plain", "try"):
        doc = run[step]["doc"]
        values = [f["effect"]["value"] for f in doc["findings"]]
        assert values == sorted(values, reverse=True), (step, values)
        assert all(f["evidence"][-1].startswith(("estimated ", "measured ")) for f in doc["findings"]), step
    plain, tried = findings(run["plain"]["doc"]), findings(run["try"]["doc"])
    assert all(f["effect"]["basis"] == "estimated" for f in plain.values())
    assert plain["EX003"]["effect"]["value"] > plain["EX004"]["effect"]["value"] > 1, plain
    assert tried["EX003"]["effect"]["basis"] == tried["EX004"]["effect"]["basis"] == "measured", tried
    # The ranking, not a margin: both are measured in a TCG guest against the model disk's real time, and a host
    # busy with other work shrinks the block size's gain (CPU-bound decompression) more than direct I/O's: one CI
    # run at load 8 beside a second qemu measured 3.88x against 2.37x, where quiet runs measure 9-12x against 2.3x.
    # Direct I/O's own gain is no target of #29 (the variant at least 2x faster is: test_try_finds_...); it measured
    # 1.93x in one whole CI run, so it is asserted a gain measured (over 1.5x), ranked after the block size's.
    assert tried["EX003"]["effect"]["value"] > tried["EX004"]["effect"]["value"] > 1.5, tried
    order = [f["rule"] for f in run["try"]["doc"]["findings"]]
    assert order[0] == "EX003" and order.index("EX003") < order.index("EX004"), order
