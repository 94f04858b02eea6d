"""Where the tests read tuned's own profiles: unpacked by scripts/bootstrap --test, never installed."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tuned_profile_dir() -> Path:
    """TUNECTL_TEST_TUNED_DIR, else the newest tuned unpacked under .cache/tuned, else /usr/lib/tuned."""
    chosen = os.environ.get("TUNECTL_TEST_TUNED_DIR")
    if chosen:
        return Path(chosen)
    unpacked = sorted((REPO / ".cache" / "tuned").glob("*/usr/lib/tuned"))
    return unpacked[-1] if unpacked else Path("/usr/lib/tuned")
