"""The import graph of tunectl, read statically from every import statement (module level and inside functions).

A circle of imports between two packages is a design knot (each needs the other to be understood) and
an import-time failure waiting for the function-level import that hides it to move to the top. The
packages are layered: tuning sits below udev and bench (udev installs rules that run tuning; bench
borrows tuning's apply), so tuning imports neither.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tunectl

ROOT = Path(tunectl.__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "tunectl").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the tunectl modules it imports anywhere in its text (a `from P import name` of a module: that one)."""
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tunectl"):
                targets = [resolve(f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.startswith("tunectl")]
            else:
                continue
            edges[module].update(t for t in targets if t and t != module)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_circle_finder_finds_a_circle_and_no_false_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circle_runs_between_two_packages() -> None:
    across = [c for c in circles(import_graph()) if len({_package(m) for m in c}) > 1]
    assert across == []


def test_no_import_circle_runs_between_two_modules_either() -> None:
    """Inside a package too: the profile reader and its YAML event builder imported each other (the reader from
    inside parse_yaml); parse_yaml now lives with the builder, and the reader imports neither."""
    assert circles(import_graph()) == []


@pytest.mark.parametrize("above", ["tunectl.udev", "tunectl.bench"])
def test_tuning_imports_nothing_of_udev_or_bench(above: str) -> None:
    """rollback --remove-rules and the adoption of the rules' originals reach the rules file through
    tunectl.system.rulesfile, the OS edge udev install uses too; verify learns what a running bench holds
    from its hold record (tunectl.system.hold), not from bench's lock line."""
    edges = import_graph()
    upward = sorted(f"{m} -> {t}" for m, targets in edges.items() if _package(m) == "tunectl.tuning"
                    for t in targets if _package(t) == above)
    assert upward == []
