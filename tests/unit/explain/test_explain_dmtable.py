"""dm table parsers on `dmsetup table` lines (tests/data/explain/dmsetup-table.txt)."""

from __future__ import annotations

import pytest

from tests.harness import DATA
from tunectl.explain import dmtable


def tables() -> dict[str, list[dmtable.Target]]:
    lines = (DATA / "explain" / "dmsetup-table.txt").read_text().splitlines()
    out = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, table = line.split(":", 1)
            out[name] = dmtable.parse(table)
    return out


def test_verity():
    (t,) = tables()["vroot"]
    assert (t.type, t.devices, t.length) == ("verity", ("7:0", "7:0"), 409600)
    assert t.facts["data_block_size"] == 4096 and t.facts["hash_block_size"] == 4096
    assert t.facts["hash_algorithm"] == "sha256" and t.facts["hash_start"] == 51201
    assert t.facts["options"] == []
    assert t.facts["salt"] == "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"  # --try's copies use it
    (salted,) = tables()["vsalted"]
    assert salted.facts["salt"] == "-"  # none
    assert salted.facts["hash_algorithm"] == "sha1"
    assert salted.facts["options"] == ["ignore_corruption", "check_at_most_once"]


def test_verity_as_recorded_in_the_guest():
    (t,) = tables()["mbrowser"]
    assert (t.devices, t.length) == (("7:0", "7:1"), 2432)  # data and hash tree on two loop devices
    assert (t.facts["data_blocks"], t.facts["hash_start"], t.facts["hash_algorithm"]) == (304, 1, "sha256")


def test_crypt():
    (luks,) = tables()["luksc"]
    assert luks.devices == ("259:0",)
    assert luks.facts["cipher"] == "aes-xts-plain64" and luks.facts["sector_size"] == 4096
    assert luks.facts["flags"] == ["no_read_workqueue", "no_write_workqueue"]
    assert luks.facts["offset"] == 32768
    assert "key" not in luks.to_json() and ":64:logon" not in str(luks.to_json())
    (plain,) = tables()["plainc"]
    assert plain.facts["sector_size"] == 512 and plain.facts["flags"] == []
    assert "0000000000" not in str(plain.to_json())


def test_linear_and_striped():
    (lin,) = tables()["vg-lv"]
    assert (lin.devices, lin.facts) == (("8:2",), {"offset": 2048})
    (stripe,) = tables()["vg-stripe"]
    assert stripe.devices == ("8:16", "8:32")
    assert stripe.facts == {"stripes": 2, "chunk_sectors": 128}


def test_unknown_target_types_keep_their_name():
    (t,) = dmtable.parse("0 100 thin-pool 253:1 253:2 128 0 1 skip_block_zeroing")
    assert (t.type, t.devices, t.facts) == ("thin-pool", (), {})


@pytest.mark.parametrize("line, message", [
    ("0 100 verity 1 7:0 7:0 4096", "verity needs 10"),
    ("0 100 crypt aes 00 0 8:1 0 2 no_read_workqueue", "2 optional parameters announced, 1 given"),
    ("0 100 striped 2 128 8:16 0", "2 stripes announced"),
    ("x 100 linear 8:1 0", "two sector counts"),
    ("0 100", "not a dm table line"),
    ("0 100 linear 8:1 zero", "linear"),
])
def test_bad_lines_say_what_is_wrong(line, message):
    with pytest.raises(dmtable.BadTable, match=message):
        dmtable.parse_line(line)
