"""The profiles guest group's plans (tests/vm/guest/evidence.py, read as data: it runs only in the guest): the VM
tier's short plan has a row for every shipped profile, so a new profile cannot ship without one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def plan(name: str) -> list[tuple[str, str, str]]:
    tree = ast.parse((ROOT / "tests/vm/guest/evidence.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} in evidence.py")


def test_the_short_plan_runs_every_shipped_profile_on_a_row_of_the_full_plan_or_of_its_disks() -> None:
    shipped = {p.stem for p in (ROOT / "profiles").glob("*.yaml")}
    short = plan("SHORT")
    assert {p for p, _, _ in short} == shipped
    workloads = {w for _, _, w in plan("PLAN")}
    assert all(disk in ("hdd", "sd") and workload in workloads for _, disk, workload in short), short
    assert len(set(short)) == len(short)
