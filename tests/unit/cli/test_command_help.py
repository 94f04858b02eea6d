"""A command's --help: its own arguments, one line naming the global options, and a DEV that says what it takes."""

from __future__ import annotations

import pytest

from tests.completion_helpers import tree
from tests.harness import run_cli


@pytest.mark.parametrize("words", [w for w in tree() if w], ids=" ".join)
def test_command_help_names_the_global_options_once_instead_of_repeating_them(words: tuple[str, ...]) -> None:
    r = run_cli(*words, "--help")
    assert r.code == 0, r.err
    assert "sysfs root (default /sys" not in r.out and "journal and lock directory" not in r.out, r.out
    assert "global options, before or after the command: --json --sysfs-root DIR" in r.out.replace("\n", " "), r.out
    assert len(r.out.splitlines()) < 60 or words[0] in ("bench", "preload", "align", "explain"), len(r.out.splitlines())


def test_global_options_still_parse_after_the_command(tmp_path) -> None:
    r = run_cli("status", "--sysfs-root", str(tmp_path), "--json", "--state-dir", str(tmp_path / "s"))
    assert r.code == 0 and r.doc["devices"] == [], r.err


def test_the_top_level_help_still_explains_them() -> None:
    r = run_cli("--help")
    assert "sysfs root (default /sys" in r.out


@pytest.mark.parametrize("command", ["status", "plan", "apply", "verify", "rollback"])
def test_dev_says_it_takes_tags_and_mountpoints(command: str) -> None:
    text = " ".join(run_cli(command, "--help").out.split())
    assert "UUID=" in text and "LABEL=" in text and "mountpoint" in text, text


@pytest.mark.parametrize("words", [w for w, p in tree().items() if w and not p._subparsers], ids=" ".join)
def test_every_command_help_shows_an_example_of_itself(words: tuple[str, ...]) -> None:
    """A --help that teaches: an `examples:` block with at least one line running this very command."""
    out = run_cli(*words, "--help").out
    assert "\nexamples:\n" in out, out
    examples = out.split("\nexamples:\n", 1)[1]
    assert any(line.split()[:len(words) + 1] == ["tunectl", *words] for line in examples.splitlines()), examples


@pytest.mark.parametrize("words", list(tree()), ids=lambda w: " ".join(w) or "tunectl")
def test_help_fits_an_80_column_terminal(words: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Prose (a description, an epilog's paragraph) is wrapped at the terminal's width; only an example's line,
    kept whole so it can be copied, may run past it, and never past 100 columns (`preload replay`'s description
    was one line of 232)."""
    monkeypatch.setenv("COLUMNS", "80")
    out = run_cli(*words, "--help").out
    long = [line for line in out.splitlines() if len(line) > 100 or len(line) > 78 and not line[:1].isspace()]
    assert not long, long


@pytest.mark.parametrize("words", [w for w, p in tree().items() if w and not p._subparsers], ids=" ".join)
def test_a_command_help_shows_only_examples_of_itself(words: tuple[str, ...]) -> None:
    """`mounts check --help` listed fix's and rollback's examples too (each action took its group's whole
    epilog): a person reading one action's help copies a line that runs another."""
    out = run_cli(*words, "--help").out
    examples = out.split("\nexamples:\n", 1)[1]
    others = [line for line in examples.splitlines()
              if line[:1].isspace() and line.split()[:1] == ["tunectl"] and line.split()[:len(words) + 1] != ["tunectl", *words]]
    assert not others, others
