"""The one way tests run tunectl: the real `main` in-process, one result type, never an internal error."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
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
    if "--json" in argv and "--help" not in argv and "-h" not in argv:
        check_documents(result.out, code=result.code)
    return result


def run_process(*argv: str, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
                timeout: float = 300) -> CliResult:
    """`tunectl ARGV` as its own process (`python -m tunectl` from this checkout), after `prefix` (setpriv,
    runuser ...: another user, fewer capabilities): for what in-process `run_cli` cannot be. The same checks as
    run_cli: no traceback or "internal error", and every --json document valid against its schema."""
    import os
    import subprocess
    import sys

    full_env = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*prefix, sys.executable, "-m", "tunectl", *argv], capture_output=True, text=True, errors="replace",
                          cwd=REPO, env=full_env, timeout=timeout, check=False)
    result = CliResult(proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    if "--json" in argv and "--help" not in argv and "-h" not in argv:
        check_documents(result.out, code=result.code)
    return result


def documents(text: str) -> list[Any]:
    """The --json output: one document, or one per line (`udev monitor --json`)."""
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def check_documents(text: str, code: int | None = None) -> list[Any]:
    """Every --json document of the suite follows the schema its `format` and `version` name.

    The shipped schemas are the contract scripts and the Ansible module rely on; validating every real
    document here (fake trees, loop devices, errors) is what keeps a shape from drifting unnoticed. An
    error document's exit_code is the process's.
    """
    docs = documents(text)
    assert docs, "--json printed no document"
    for doc in docs:
        validate_document(doc)
        if doc["format"] == "tunectl-error" and code is not None:
            assert doc["error"]["exit_code"] == code, (doc, code)
    return docs


_VALIDATORS: dict[str, Any] = {}


def validate_document(doc: Any) -> None:
    import jsonschema

    from tunectl import schema

    assert isinstance(doc, dict) and isinstance(doc.get("format"), str), doc
    name = doc["format"].removeprefix("tunectl-")
    assert name in schema.VERSIONS, f"unknown format {doc['format']!r}"
    assert doc.get("version") == schema.VERSIONS[name], (doc["format"], doc.get("version"))
    if name not in _VALIDATORS:
        document_schema = schema.load(name)
        jsonschema.Draft202012Validator.check_schema(document_schema)
        _VALIDATORS[name] = jsonschema.Draft202012Validator(document_schema)
    errors = sorted(_VALIDATORS[name].iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{doc['format']}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                                 for e in errors[:5])
