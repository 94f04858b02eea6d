"""An option given an empty or blank value (an unset shell variable: `--state-dir "$DIR"`) is a usage error that
says what to give, never taken as not given: `--state-dir ''` used the real state directory, `-p ''` the default
profile, `record --scope ''` recorded nothing, `--fstab ''` read /etc/fstab."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.harness import run_cli


@pytest.mark.parametrize(("argv", "option", "metavar"), [
    (["preload", "record", "--scope", "", "-o", "{tmp}/r.list", "--", "true"], "--scope", "DIR"),
    (["plan", "--state-dir", ""], "--state-dir", "DIR"),
    (["--state-dir=", "plan"], "--state-dir", "DIR"),
    (["plan", "-p", ""], "--profile", "PROFILE"),
    (["plan", "--profile", "  "], "--profile", "PROFILE"),
    (["mounts", "check", "--fstab", ""], "--fstab", "PATH"),
    (["status", "--sysfs-root", ""], "--sysfs-root", "DIR"),
    (["status", "--udev-root", "\t"], "--udev-root", "DIR"),
    (["preload", "collect", "{tmp}", "-o", ""], "--output", "LIST"),
])
def test_an_empty_or_blank_option_value_is_a_usage_error(tmp_path: Path, argv: list[str], option: str,
                                                         metavar: str) -> None:
    r = run_cli("--json", *(a.replace("{tmp}", str(tmp_path)) for a in argv),
                env={"TUNECTL_STATE_DIR": str(tmp_path / "state")})
    assert r.code == 2, r.out + r.err
    error = r.doc["error"]
    assert error["code"] == "usage"
    assert f"{option}: the value is " in error["message"], error
    assert f"give {option} {metavar}, or leave {option} out for its default" in error["message"], error
    assert error["hint"].startswith(f"{option} takes {metavar}; `tunectl"), error
    assert not (tmp_path / "state").exists() and not (tmp_path / "r.list").exists()


def test_an_empty_value_after_the_end_of_options_is_the_commands_own(tmp_path: Path) -> None:
    """After `--`, record's command takes its own arguments, empty ones too; only option values are checked."""
    r = run_cli("preload", "record", "--method", "diff", "--scope", str(tmp_path), "-o", str(tmp_path / "r.list"),
                "--", "sh", "-c", "",
                env={"TUNECTL_STATE_DIR": str(tmp_path / "state")})
    assert r.code == 0, r.err


def valued_options() -> list[tuple[tuple[str, ...], str, object]]:
    """(command words, --option, its action) for every option of every command that takes a value."""
    from tests.completion_helpers import tree

    return [(words, next(o for o in a.option_strings if o.startswith("--")), a)
            for words, parser in tree().items() for a in parser._actions
            if a.option_strings and a.nargs != 0 and any(o.startswith("--") for o in a.option_strings)
            and not getattr(a, "empty_is_a_value", False) and a.help != argparse.SUPPRESS]


def test_the_hint_of_an_empty_value_says_what_the_option_takes_not_its_whole_help() -> None:
    """The hint named the --help and pasted the option's help text after it: for --state-dir "`tunectl --help`
    (journal and lock directory (default /var/lib/tunectl, env TUNECTL_STATE_DIR))", for --color 120 columns.
    Now the option and what it takes (its METAVAR, or its choices)."""
    options = valued_options()
    assert len(options) > 100 and any(o == "--color" for _, o, _ in options)
    for words, option, action in options:
        r = run_cli("--json", *words, f"{option}=")
        assert r.code == 2, (words, option, r.out + r.err)
        hint = r.doc["error"]["hint"]
        metavar = action.metavar or action.dest.upper()
        takes = "one of " + ", ".join(action.choices) if action.choices else \
            " ".join(metavar) if isinstance(metavar, tuple) else metavar
        assert hint == f"{option} takes {takes}; `{' '.join(['tunectl', *words])} --help` says more", (words, hint)
        assert len(hint) <= 100 and (action.help or "(") not in hint, (words, hint)
