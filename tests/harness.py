"""The one way tests run tunectl: the real `main` in-process, one result type, never an internal error."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunectl.cli import main

REPO = Path(__file__).resolve().parent.parent  # the checkout: tests may live at any depth below tests/
DATA = REPO / "tests" / "data"


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> Any:
        """stdout as the one JSON document of --json."""
        return json.loads(self.out)

    @property
    def text(self) -> str:
        """stdout and stderr, for assertions that do not care which."""
        return self.out + self.err

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()


def run_cli(*argv: str, env: Mapping[str, str] | None = None, context: Any = None,
            propagate: bool = False) -> CliResult:
    """`tunectl ARGV` with `env` (None: this process's) or a ready Context; `propagate`: exceptions escape.

    Fails the test on a traceback or an "internal error": every error a person can meet is a one-line message.
    """
    out, err = io.StringIO(), io.StringIO()
    code = main([*(["--propagate"] if propagate else []), *argv], env=env, stdout=out, stderr=err, context=context)
    result = CliResult(int(code), out.getvalue(), err.getvalue())
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    return result
