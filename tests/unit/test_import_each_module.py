"""Every tunectl module imports on its own, first, in a fresh interpreter: an import circle fails here, at once.

`test_import_graph` reads the imports statically and forbids circles between packages; this test runs
them. A circle inside a package, or one hidden by a function-level import that later moves to the top,
breaks only when its modules are imported in one order, so each module is imported first, in a child
forked from an interpreter that has imported no tunectl module (the standard library and the third-party
modules it preloads are shared: only tunectl's own import order is under test).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tunectl

ROOT = Path(tunectl.__file__).resolve().parent.parent

CHILDREN = r"""
import os, sys
import argparse, dataclasses, json, pathlib, re, typing, yaml  # shared by the children: loaded once
bad = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException as e:
            sys.stdout.write(f"{name}: {type(e).__name__}: {e}\n")
            sys.stdout.flush()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        bad.append(name)
sys.exit(1 if bad else 0)
"""


def modules() -> list[str]:
    out = []
    for path in sorted((ROOT / "tunectl").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if not name.endswith("__main__"):  # running the program is not importing it
            out.append(name)
    return out


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    names = modules()
    assert len(names) > 100 and "tunectl.tuning.operations" in names
    done = subprocess.run([sys.executable, "-c", CHILDREN, *names], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_circle_at_import_time_is_caught(tmp_path: Path) -> None:
    """The check itself: two modules importing each other's names at the top fail when either comes first."""
    pkg = tmp_path / "circle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circle.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from circle.a import A\nB = 2\n")
    done = subprocess.run([sys.executable, "-c", CHILDREN, "circle.a", "circle.b"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "circle.a: ImportError" in done.stdout and "circle.b: ImportError" in done.stdout
