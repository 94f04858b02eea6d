"""Sizes in profiles: SI units (KB, MB, GB: powers of 1000) and IEC units (KiB, MiB, GiB: of 1024) as each is defined,
and a device a `size` match left out is told so, not that its class is not named."""

from __future__ import annotations

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl
from tunectl.units import counted, parse_bytes, parse_kib


@pytest.mark.parametrize("text, size", [("300 MB", 300 * 10**6), ("300MB", 300 * 10**6), ("2 GB", 2 * 10**9),
                                        ("1 TB", 10**12), ("4 kB", 4000), ("300 MiB", 300 * 2**20),
                                        ("2 GiB", 2 * 2**30), ("4 K", 4096), ("4 M", 4 * 2**20), ("512", 512)])
def test_si_and_iec_units_mean_what_they_are_defined_to(text: str, size: int) -> None:
    assert parse_bytes(text) == size


def test_a_read_ahead_in_si_units_that_is_not_whole_kib_says_which_unit_was_meant() -> None:
    assert parse_kib("4 MiB") == 4096 and parse_kib("1024 KB") == 1000
    with pytest.raises(ValueError, match=r"MB is an SI unit: 10\^6 bytes.*did you mean \"4 MiB\""):
        parse_kib("4 MB")


def test_profile_check_reports_the_si_read_ahead_with_its_fix(empty_fake_tree: FakeTree, tmp_path) -> None:
    (tmp_path / "ra.yaml").write_text('name: ra\nclasses:\n  ssd: {read_ahead_kb: "4 MB"}\n')
    r = Tunectl(empty_fake_tree, tmp_path / "state")("profile", "validate", str(tmp_path / "ra.yaml"))
    assert r.code == 2 and 'did you mean "4 MiB"' in r.text, r.text


def test_a_size_match_that_fails_is_the_reason_given(empty_fake_tree: FakeTree, tmp_path) -> None:
    empty_fake_tree.add_loop("loop3", "/srv/img", size_sectors=2 * 1024 * 1024)  # 1 GiB
    (tmp_path / "big.yaml").write_text('name: big\ndevices:\n  - match: {kernel: "loop*", size: {min: "2 GB"}}\n'
                                       '    read_ahead_kb: 1024\n')
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    r = t("plan", "-p", str(tmp_path / "big.yaml"), "-v")
    assert r.code == 0, r.err
    assert "matches it but for its size" in r.text and "at least 1.9 GiB (2000000000 bytes)" in r.text, r.text
    assert "tuned only by a profile that names it" not in r.text and "sets nothing for class" not in r.text, r.text


def test_a_count_of_one_takes_the_singular() -> None:
    assert [counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert counted(1, "fragment block") == "1 fragment block" and counted(3, "process", "processes") == "3 processes"


def test_outputs_say_1_file_not_1_files(tmp_path) -> None:
    """Where a count of one read "1 files": `preload show` of a one-file list, its numbers line, a table."""
    from tunectl.explain import dmtable
    from tunectl.preload.listing import Entry, parse, render
    from tunectl.preload.show import show
    from tunectl.preload.text import numbers, shown

    one = tmp_path / "one"
    one.write_bytes(b"x" * 10)
    text = render([Entry(str(one), "8:1", 1, 10, 1, ((0, 10),), None)], "now")
    lines = shown(show(parse(text, "l"), "l", None))
    assert "(1 file)" in lines[-2] and lines[-1].startswith("l: 1 file, 10 B, ")
    assert numbers(10, 1, 1, "WILLNEED call", None, None).startswith("numbers: 10 B, 1 file, 1 WILLNEED call, ")
    with pytest.raises(dmtable.BadTable, match="1 stripe announced, 0 devices given"):
        dmtable.parse("0 100 striped 1 128")

