"""The shapes of tunectl's machine output: one versioned format per `--json` document.

Every document a command prints under `--json` starts with `"format":
"tunectl-<name>"` and `"version": N` and follows `tunectl-<name>.schema.json`
beside this file. A change to a shape is a new version here and a line in
CHANGELOG.md; readers check `format` and `version` before trusting a key.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False  # typing costs start-up every command pays (each --json document is enveloped here)
if TYPE_CHECKING:
    from typing import Any

HERE = Path(__file__).parent

# format name (after "tunectl-") -> the version of its shape that this tunectl prints
VERSIONS: dict[str, int] = {
    "status": 3, "plan": 2, "verify": 3, "apply": 2, "rollback": 2, "doctor": 1,
    "profile-list": 1, "profile-show": 1, "profile-validate": 1, "profile-import-tuned": 1,
    "udev-render": 2, "udev-install": 2, "udev-remove": 1, "udev-check": 2, "udev-monitor": 1,
    "align": 1,
    "mounts-check": 2, "mounts-fix": 2, "mounts-rollback": 1,
    "preload-collect": 3, "preload-record": 3, "preload-replay": 10, "preload-show": 4,
    "bench": 4,
    "explain": 5,
    "version": 1,
    "error": 1,
}


def envelope(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the document of format `tunectl-<name>`: format and version first, then its own keys."""
    return {"format": f"tunectl-{name}", "version": VERSIONS[name], **body}


def schema_path(name: str) -> Path:
    return HERE / f"tunectl-{name}.schema.json"


def load(name: str) -> dict[str, Any]:
    import json

    return json.loads(schema_path(name).read_text())
