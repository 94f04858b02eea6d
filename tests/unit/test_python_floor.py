"""The declared floor is Python 3.9 (setup.cfg python_requires; RHEL 9 and Debian 11 ship it), and every test runs
on a newer one. vermin checks the syntax and the library calls, not this: `int | str` evaluated at run time — a
type alias at module level, an isinstance() argument, a default — is a TypeError before 3.10, while the same text in
an annotation is never evaluated (every module has `from __future__ import annotations`). A union of types outside
annotations broke 18 modules on 3.9 once (plan, apply, verify and status ended in "internal error")."""

from __future__ import annotations

import ast
import builtins
import os
import subprocess
from pathlib import Path

import pytest

import tunectl

_BUILTIN_TYPES = {name for name in dir(builtins) if isinstance(getattr(builtins, name), type)}


def _type_like(node: ast.AST) -> bool:
    """A name that reads as a type: None, a built-in type, a CamelCase class (not an ALL_CAPS constant), a[...]."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Subscript):
        return _type_like(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_like(node.left) and _type_like(node.right)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return bool(name) and (name in _BUILTIN_TYPES or (name[0].isupper() and not name.isupper()))


def _evaluated_unions(tree: ast.AST) -> list[int]:
    """Lines of `X | Y` between types outside annotations and outside `if TYPE_CHECKING:` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None and a.annotation is not None:
                    skip.update(id(n) for n in ast.walk(a.annotation))
            if node.returns is not None:
                skip.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            skip.update(id(n) for n in ast.walk(node.annotation))
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) and id(n) not in skip and _type_like(n))


def test_no_union_of_types_is_evaluated_at_run_time():
    root = Path(tunectl.__file__).parent
    found = {str(p.relative_to(root.parent)): lines for p in sorted(root.rglob("*.py"))
             if (lines := _evaluated_unions(ast.parse(p.read_text(), str(p))))}
    assert found == {}, f"a union of types evaluated at run time is a TypeError on Python 3.9: {found}"


def test_the_check_sees_the_forms_that_break_and_passes_the_ones_that_do_not():
    bad = ["Value = int | str | None", "ok = isinstance(x, int | str)", "def f(x=Path | None): pass",
           "class A:\n    Ref = str | Path"]
    good = ["x: int | None = None", "def f(a: int | str) -> Path | None: pass", "FLAGS = O_A | O_B",
            "s = KEYS | set('ab')", "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    Value = int | str",
            "n = a | b"]
    assert all(_evaluated_unions(ast.parse(text)) for text in bad)
    assert not any(_evaluated_unions(ast.parse(text)) for text in good)


def _python39() -> str | None:
    """A Python 3.9 here: on PATH, or one pyenv installed (scripts/test-collection uses the same ones)."""
    import glob
    import shutil

    # pyenv's own build first: its shim on PATH answers "command not found" unless a 3.9 is selected
    found = [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9.*/bin/python3.9"))), shutil.which("python3.9")]
    for path in found:
        if path and subprocess.run([path, "-c", "pass"], capture_output=True, timeout=120).returncode == 0:
            return path
    return None


def test_every_module_imports_on_python_3_9():
    """The real interpreter, where one is installed: every module imports (the third-party libraries a bare 3.9
    lacks aside), and `plan --help` runs."""
    python = _python39()
    if python is None:
        pytest.skip("no Python 3.9 here (PATH or ~/.pyenv/versions/3.9.*): the AST check above still runs")
    source = Path(tunectl.__file__).parent.parent
    script = (
        "import importlib, pkgutil, tunectl\n"
        "for m in pkgutil.walk_packages(tunectl.__path__, 'tunectl.'):\n"
        "    if m.name.endswith('__main__'):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if e.name.split('.')[0] not in ('yaml', 'jsonschema', 'pyudev'):\n"
        "            raise\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(source), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([python, "-m", "tunectl", "plan", "--help"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "usage: tunectl plan" in done.stdout, done.stderr
