"""benchmarks/profiles.py's verdict on a row: a win or a loss only outside the runs' spread and beyond 5%."""

from __future__ import annotations

from benchmarks.profiles import Row


def row(better: str, kernel: tuple[float, float, float], profile: tuple[float, float, float]) -> Row:
    return Row("p", "hdd", "streams", "m", better, sorted(kernel)[1], sorted(profile)[1], 1.0, 1.0, 3,
               (min(profile), max(profile)), (min(kernel), max(kernel)), ())


def test_a_win_or_a_loss_needs_every_run_on_one_side_and_more_than_five_percent() -> None:
    assert row("higher", (17.9, 20.6, 22.8), (80.9, 90.0, 96.4)).verdict == "better"
    assert row("higher", (17.9, 20.6, 22.8), (10.0, 11.0, 12.0)).verdict == "worse"
    assert row("lower", (36.2, 43.1, 47.3), (20.0, 21.0, 22.0)).verdict == "better"
    assert row("lower", (36.2, 43.1, 47.3), (60.0, 61.0, 62.0)).verdict == "worse"
    assert row("lower", (36.2, 43.1, 47.3), (30.0, 38.0, 50.0)).verdict == "equal"  # the spreads overlap
    assert row("higher", (179.1, 179.1, 179.1), (175.7, 175.7, 178.2)).verdict == "equal"  # 2% apart
    assert row("higher", (20.0, 20.6, 22.8), (80.9, 90.0, 96.4)).ratio == 90.0 / 20.6
