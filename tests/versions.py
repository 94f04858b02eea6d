"""What the suite runs on: printed by scripts/test and in pytest's header (`python -m tests.versions`)."""

from __future__ import annotations

import os
import platform
import sys


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed, or installed without metadata
        return "not installed"


def describe() -> list[str]:
    """One line each: Python, PyYAML and its libyaml, jsonschema, pyudev, the kernel."""
    try:
        import yaml

        libyaml = yaml._yaml.get_version_string() if getattr(yaml, "__with_libyaml__", False) else "none (pure Python)"
        pyyaml = f"{yaml.__version__} (libyaml {libyaml})"
    except ImportError:
        pyyaml = "not installed"
    return [
        f"python: {platform.python_version()} ({sys.executable})",
        f"PyYAML: {pyyaml}",
        f"jsonschema: {_version('jsonschema')}",
        f"pyudev: {_version('pyudev')}",
        f"kernel: {os.uname().release}",
    ]


if __name__ == "__main__":
    print("\n".join(describe()))
