"""Whether the suite runs in CI: the one reading of the `CI` variable for every test helper that asks."""

from __future__ import annotations

from collections.abc import Mapping


def in_ci(environ: Mapping[str, str]) -> bool:
    """`CI` says true: "true" (as CI services set it, and .ci/run) or "1", in any case; unset, empty, "false" or
    "0" is a run outside CI."""
    return environ.get("CI", "").lower() in ("true", "1")
