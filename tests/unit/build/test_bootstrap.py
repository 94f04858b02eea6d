"""What scripts/bootstrap leaves on the machine: tuned's profiles for the tests, never tuned's service."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tuned_profiles import REPO, tuned_profile_dir

SYSTEMD_DIRS = (Path("/etc/systemd/system"), Path("/lib/systemd/system"), Path("/usr/lib/systemd/system"))


def enabled_tuned_units() -> list[str]:
    """tuned units linked into any target's .wants/ (what `systemctl enable` creates)."""
    return sorted(str(link) for d in SYSTEMD_DIRS if d.is_dir() for link in d.glob("*.wants/tuned*"))


@pytest.mark.skipif(not (REPO / ".cache" / "tuned").is_dir(), reason="scripts/bootstrap --test has not run here")
def test_tuned_profiles_come_unpacked_and_no_tuned_unit_is_enabled() -> None:
    profiles = tuned_profile_dir()
    assert (profiles / "throughput-performance" / "tuned.conf").is_file()
    assert REPO / ".cache" / "tuned" in profiles.parents
    # tuned at boot would rewrite the scheduler and read-ahead that tunectl manages.
    assert enabled_tuned_units() == []
