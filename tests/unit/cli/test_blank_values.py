"""An option given an empty or blank value (an unset shell variable: `--state-dir "$DIR"`) is a usage error that
says what to give, never taken as not given: `--state-dir ''` used the real state directory, `-p ''` the default
profile, `record --scope ''` recorded nothing, `--fstab ''` read /etc/fstab."""

from __future__ import annotations

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
    assert error["hint"].startswith("`tunectl"), error
    assert not (tmp_path / "state").exists() and not (tmp_path / "r.list").exists()


def test_an_empty_value_after_the_end_of_options_is_the_commands_own(tmp_path: Path) -> None:
    """After `--`, record's command takes its own arguments, empty ones too; only option values are checked."""
    r = run_cli("preload", "record", "--method", "diff", "--scope", str(tmp_path), "-o", str(tmp_path / "r.list"),
                "--", "sh", "-c", "",
                env={"TUNECTL_STATE_DIR": str(tmp_path / "state")})
    assert r.code == 0, r.err
