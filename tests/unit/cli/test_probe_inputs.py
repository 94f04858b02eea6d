"""Careless and hostile inputs to the commands added in #29-#34: each error says what it met and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, sata_hdd
from tests.harness import run_cli
from tests.preload_helpers import make_files, tunectl
from tests.tuning_helpers import Tunectl
from tunectl.errors import ExitCode


@pytest.fixture
def odd_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    directory = tmp_path / "dir"
    directory.mkdir()
    return {"fifo": fifo, "directory": directory, "device": Path("/dev/null")}


@pytest.mark.parametrize("what", ["fifo", "device"])
def test_explain_on_a_fifo_or_a_device_node_speaks_of_explain_not_bench(empty_fake_tree: FakeTree, tmp_path: Path,
                                                                       odd_files: dict[str, Path], what: str) -> None:
    sata_hdd(empty_fake_tree, "sda")
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    r = t("explain", str(odd_files[what]), "--json")
    assert r.code == ExitCode.USAGE
    error = r.doc["error"]
    assert "neither a block device nor a regular file" in error["message"]
    assert "bench" not in error["message"] + error["hint"], error
    assert "block device" in error["hint"] and "file" in error["hint"]


@pytest.mark.parametrize(("what", "said"), [("fifo", "a named pipe"), ("directory", "a directory"),
                                            ("device", "a character device")])
def test_a_profile_path_that_is_not_a_regular_file_is_named_for_what_it_is(empty_fake_tree: FakeTree, tmp_path: Path,
                                                                         odd_files: dict[str, Path], what: str,
                                                                         said: str) -> None:
    sata_hdd(empty_fake_tree, "sda")
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    for command in ("doctor", "plan"):
        r = t(command, "-p", str(odd_files[what]), "--json")
        assert r.code == ExitCode.USAGE
        message = r.doc["error"]["message"]
        assert f"{odd_files[what]}: {said}, not a profile file" in message, message
        assert "no such" not in message
    r = t("plan", "-p", str(tmp_path / "missing.yaml"))
    assert r.code == ExitCode.USAGE and "missing.yaml: no such profile file" in r.err


def test_show_does_not_call_files_it_cannot_see_cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mincore hides the page cache of another user's file: show says so instead of "0 B resident (0.0%)"."""
    from tunectl.system import pagecache

    files = make_files(tmp_path / "data", {"a": 8192, "b": 4096})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    for p in files:
        p.read_bytes()
    seen = tunectl("preload", "show", str(lst), "--stats")
    assert "resident (100.0%)" in seen.out, seen.out
    monkeypatch.setattr(pagecache, "residency_observable", lambda path, st: False)
    hidden = tunectl("preload", "show", str(lst), "--stats")
    assert hidden.code == 0, hidden.err
    assert "residency unknown for all 2 (run as root to see it)" in hidden.out, hidden.out
    assert "0 B resident" not in hidden.out


def _on_fake_sda(tree: FakeTree, tmp_path: Path) -> Tunectl:
    """A fake machine whose sda stands for the disk tmp_path is on (files there resolve to it)."""
    sata_hdd(tree, "sda")
    st = os.stat(tmp_path)
    link = tree.root / "dev" / "block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if not link.exists():
        link.symlink_to(tree.devdir("sda"))
    return Tunectl(tree, tmp_path / "state")


def test_explain_prints_a_file_name_with_a_newline_or_bidi_override_on_one_escaped_line(empty_fake_tree: FakeTree,
                                                                                        tmp_path: Path) -> None:
    """A name is data: its newline must not start a line of the report, its U+202E not reorder the terminal."""
    t = _on_fake_sda(empty_fake_tree, tmp_path)
    for name in ("x\nfindings: none", "evil\u202etxt.exe"):
        target = tmp_path / name
        target.write_bytes(b"x")
        r = t("explain", str(target), "--no-cold")
        assert r.code == 0, r.err
        head = r.out.splitlines()[0]
        assert head.startswith("explain ") and head.endswith(")"), head
        assert "\u202e" not in r.out, r.out
        assert [line for line in r.out.splitlines() if line.startswith("findings")] == [
            "findings: none (no rule of the table fired on this stack)"], r.out


@pytest.mark.parametrize(("target", "other", "said"), [(100.0, 310.0, "3.10x slower here"),
                                                       (200.0, 100.0, "2.00x faster here"),
                                                       (0.0, 5.0, "no ratio: a read too short to time"),
                                                       (5.0, 0.0, "no ratio: a read too short to time")])
def test_explain_compare_says_faster_when_the_target_is_faster(target: float, other: float, said: str) -> None:
    """`--compare` printed "0.01x slower here" for a target 100x faster; the ratio now reads the right way round."""
    from tunectl.explain.compare import Comparison

    c = Comparison(target, other, "/srv/other", (), None, (4.0, 4.0), "vda")
    assert c.verdict().startswith(said), c.verdict()


@pytest.mark.parametrize("what", ["fifo", "directory", "missing"])
def test_explain_refuses_a_bad_compare_file_first_and_names_the_option(empty_fake_tree: FakeTree, tmp_path: Path,
                                                                      odd_files: dict[str, Path], what: str) -> None:
    """Before: the target was read cold first (up to --size), then "cannot stat X" without saying it was --compare's;
    as a non-root user, "needs root" hid the real mistake."""
    t = _on_fake_sda(empty_fake_tree, tmp_path)
    target = tmp_path / "app"
    target.write_bytes(b"x" * 4096)
    other = odd_files.get(what, tmp_path / "missing")
    r = t("explain", str(target), "--compare", str(other), "--json")
    assert r.code == ExitCode.USAGE, r.doc
    assert r.doc["error"]["message"].startswith("--compare: "), r.doc
    assert r.doc["error"]["where"] == "--compare"


def test_collect_says_what_it_passed_over_among_the_paths_named(tmp_path: Path, odd_files: dict[str, Path]) -> None:
    """`collect FIFO -o L` wrote an empty list and said nothing: the named FIFO and device are now skips, with why."""
    lst = tmp_path / "set.list"
    kept = make_files(tmp_path / "data", {"a": 4096})
    r = tunectl("preload", "collect", str(odd_files["fifo"]), str(odd_files["device"]), str(kept[0]), "-o", str(lst),
                "--json")
    assert r.code == 3, r.err  # named, not listed: unreadable, a partial failure as in replay
    assert r.doc["files"] == 1
    skipped = {s["path"]: s["reason"] for s in r.doc["skipped"]}
    assert skipped == {str(odd_files["fifo"]): "a named pipe, not a regular file: collect lists regular files",
                       str(odd_files["device"]): "a character device, not a regular file: collect lists regular files"}
    text = tunectl("preload", "collect", str(odd_files["fifo"]), "-o", str(lst))
    assert "a named pipe, not a regular file" in text.out + text.err
    assert text.code == 3 and text.out.splitlines()[-1] == "exit 3 (partial): 1 file unreadable, not in the list"


def test_show_stats_says_why_the_floor_is_unknown_as_the_user_it_runs_as(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, "measured as root" sent people to run as root again; root is told the disk could not be measured."""
    from tunectl.preload.text import floor_unknown
    from tunectl.system import pagecache

    assert "measured as root" in floor_unknown(False)
    assert "measured as root" not in floor_unknown(True) and "could not be measured" in floor_unknown(True)
    monkeypatch.setattr(pagecache, "sequential_rate", lambda *a, **k: None)
    make_files(tmp_path / "data", {"a": 4096})
    lst = tmp_path / "set.list"
    assert tunectl("preload", "collect", str(tmp_path / "data"), "-o", str(lst)).code == 0
    r = tunectl("preload", "show", str(lst), "--stats")
    assert r.code == 0 and floor_unknown(os.geteuid() == 0) in r.out, r.out


@pytest.mark.parametrize("argv", [["explain", "sda\0"], ["preload", "show", "--stats", "x\0"],
                                  ["preload", "replay", "-v", "x\0"]])
def test_an_argument_with_a_nul_byte_is_a_usage_error(argv: list[str]) -> None:
    """main() called in-process (not through exec) can be given one: it was a ValueError, "internal error"."""
    r = run_cli(*argv, "--json", env={})
    assert r.code == ExitCode.USAGE and "NUL byte" in r.doc["error"]["message"], r.doc


@pytest.mark.parametrize("argv", [["explain", "--bogus"], ["explain", "--bogus=3"], ["preload", "show", "--nope"]])
def test_a_mistyped_option_is_named_even_when_a_positional_is_missing(argv: list[str]) -> None:
    """`explain --bogus` said only "TARGET is required": the option nobody knows is the mistake to show."""
    r = run_cli(*argv, "--json", env={})
    assert r.code == ExitCode.USAGE
    message = r.doc["error"]["message"]
    assert f"unrecognized arguments: {argv[-1].split('=')[0]}" in message and "required" in message, message


def test_a_known_option_or_its_abbreviation_is_not_called_unrecognized() -> None:
    for argv in (["explain", "--cold"], ["explain", "--no-c"]):
        r = run_cli(*argv, env={})
        assert r.code == ExitCode.USAGE and "unrecognized" not in r.err and "required: TARGET" in r.err, r.err
