"""tunectl explain on the browser stack (issue #29): squashfs 4 KiB gzip -> dm-verity -> loop with direct
I/O -> ext4 -> the SD-card model (tests/README.md), on Debian's 6.1 kernel; one boot (guest group `explain`)."""

from __future__ import annotations

import shutil

import pytest

from tests.vm.machine import LOGS


@pytest.fixture(scope="module")
def run(vm_boot) -> dict:
    boot = vm_boot("6.1", "explain", kind="model")
    raw = boot.shared / "trace-browser-6.1.txt"
    if raw.exists():  # kept beside the boot's logs: the trace reader's unit tests take their data from it
        logs = LOGS / boot.kernel.release
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
    assert kinds[-1] == "disk" and doc["layers"][-1]["name"] == run["build"]["sd"]
    sq = doc["layers"][1]["filesystem"]["squashfs"]
    assert (sq["block_size"], sq["compressor"]) == (4096, "gzip")
    verity = doc["layers"][2]["dm"]["table"][0]
    assert verity["type"] == "verity" and verity["hash_algorithm"] == "sha256"
    loops = {la["name"]: la["loop"] for la in doc["layers"] if la["kind"] == "loop"}
    assert loops[run["build"]["loop"]]["direct_io"] is True


def test_dm_has_no_scheduler_and_the_card_decides(run):
    f = findings(run["plain"]["doc"])["EX001"]
    assert "is bio-based" in f["evidence"][0] and run["build"]["sd"] in f["evidence"][0]


def test_the_card_gets_4k_requests_almost_unmerged(run):
    cold = run["plain"]["doc"]["cold"]
    card = next(d for d in cold["devices"] if d["device"] == run["build"]["sd"])
    assert card["avg_request_kib"] <= 4.5 and card["merged_share"] < 0.05, card
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


def test_compare_against_ext4(run):
    assert run["compare"]["code"] == 0, run["compare"]["stderr"]
    ratio = run["compare"]["doc"]["compare"]["ratio"]
    assert 2 <= ratio <= 3.5, run["compare"]["doc"]["compare"]


def test_trace_gives_d2c_and_q2c_per_layer(run):
    trace = {t["device"]: t for t in run["compare"]["doc"]["trace"]}
    dm = next(la["name"] for la in run["compare"]["doc"]["layers"] if la["kind"] == "dm")
    assert trace[dm]["q2c_ms"] is not None and trace[dm]["issued"] == 0  # bio-based: remapped, not issued
    for name in (run["build"]["loop"], run["build"]["sd"]):
        assert trace[name]["d2c_ms"] is not None and trace[name]["q2c_ms"] is not None, trace[name]
