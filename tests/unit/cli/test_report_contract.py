"""The one report contract (tunectl.report.Report): `Output.show` does the --json/text switch once, and every
report class that has moved onto it keeps `exit_code` a property worked out from its own facts."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import json
from pathlib import Path

import pytest

from tunectl.cli import Output
from tunectl.record import fields as record_fields
from tunectl.report import Report

PACKAGE = Path(__file__).resolve().parents[3] / "tunectl"

# Report classes on the contract; each renders itself, and `Output.show` prints it.
ON_THE_CONTRACT = {
    "tunectl.align.verdict": "AlignReport",
    "tunectl.owners.doctor": "DoctorReport",
    "tunectl.explain.report": "ExplainReport",
    "tunectl.mounts.operations": "CheckReport",
    "tunectl.profile.reports": "ProfileListReport",
    "tunectl.profile.reports:": "ProfileShowReport",
    "tunectl.profile.reports::": "ValidateReport",
    "tunectl.profile.tuned_import": "TunedImport",
    "tunectl.udev.install": "RenderReport",
    "tunectl.udev.install:": "InstallReport",
    "tunectl.udev.install::": "RemoveReport",
    "tunectl.udev.install:::": "RulesCheckReport",
    "tunectl.mounts.operations:": "FixReport",
    "tunectl.bench.report": "BenchReport",
    "tunectl.tuning.changes": "ApplyReport",
    "tunectl.tuning.operations:": "PlanReport",
    "tunectl.tuning.operations::": "NothingAppliedReport",
    "tunectl.mounts.operations::": "RollbackReport",
    "tunectl.preload.collect": "CollectReport",
    "tunectl.preload.record": "RecordReport",
    "tunectl.preload.replay": "ReplayReport",
    "tunectl.preload.show": "ShowReport",
    "tunectl.udev.monitor": "EventReport",
}
# Classes with `to_json` by convention still rendered by their command's cli: none is left, and none may come back.
# (A part of a report is not a report: align's DiskResult, PartitionResult, monitor's BlockEvent are not named *Report.)
NOT_YET: set[str] = set()


_ARGS = {"ReplayReport": ("LIST",)}  # plain classes (no dataclass import at boot): their attributes, made


@pytest.mark.parametrize("module,name", sorted(ON_THE_CONTRACT.items()))
def test_a_report_on_the_contract_renders_itself_and_works_out_its_exit_code(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module.rstrip(":")), name)
    assert issubclass(cls, Report)
    assert cls.to_json is not Report.to_json and cls.print_text is not Report.print_text, name
    assert isinstance(cls.__dict__.get("exit_code"), property), f"{name}.exit_code is not a property of its own"
    fields = {f.name for f in record_fields(cls)} if hasattr(cls, "__record_fields__") else set(vars(cls(*_ARGS.get(name, ()))))
    assert "exit_code" not in fields, f"{name}.exit_code is assignable"


def _report_classes() -> dict[str, ast.ClassDef]:
    """Every class named *Report (or TunedImport) with a `to_json`, or deriving from such a class."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or not node.name.endswith(("Report", "Import")) or node.name == "Report":
                continue
            methods = {b.name for b in node.body if isinstance(b, ast.FunctionDef)}
            bases = [ast.unparse(b) for b in node.bases]
            if "to_json" in methods or any(b.endswith("Report") for b in bases):
                found[f"{path.relative_to(PACKAGE.parent)}:{node.name}"] = node
    return found


def _on_the_contract(node: ast.ClassDef, classes: dict[str, ast.ClassDef] | None = None) -> bool:
    """Derives from Report, or from a report class that does (RecordReport from CollectReport)."""
    bases = [ast.unparse(b) for b in node.bases]
    classes = classes if classes is not None else _report_classes()
    return "Report" in bases or any(_on_the_contract(n, classes) for k, n in classes.items() if k.split(":")[1] in bases)


def test_the_report_classes_off_the_contract_only_get_fewer() -> None:
    off = {name for name, node in _report_classes().items() if not _on_the_contract(node)}
    assert off <= NOT_YET, f"a report class outside the contract: {sorted(off - NOT_YET)} (derive from tunectl.report.Report)"
    assert off >= NOT_YET, f"moved onto the contract (take it out of NOT_YET): {sorted(NOT_YET - off)}"


def test_every_report_works_out_its_exit_code_in_a_property_never_a_field_set_later() -> None:
    for name, node in _report_classes().items():
        fields = {b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)}
        assert "exit_code" not in fields, f"{name}: exit_code is a field (assigned after the fact); make it a property"
        own = {b.name: b for b in node.body if isinstance(b, ast.FunctionDef)}
        if "exit_code" in own:
            assert any(ast.unparse(d) == "property" for d in own["exit_code"].decorator_list), name
        if "Report" in [ast.unparse(b) for b in node.bases]:  # a derived one may inherit to_json/print_text
            assert {"exit_code", "to_json", "print_text"} <= set(own), f"{name}: the contract is to_json, exit_code, print_text"


@dataclasses.dataclass
class _Result(Report):
    drift: int

    @property
    def exit_code(self) -> int:
        return 1 if self.drift else 0

    def to_json(self) -> dict:
        return {"profile": "p", "in_sync": not self.drift}

    def print_text(self, out) -> None:
        out.print(f"{self.drift} setting(s) differ")


def _output(as_json: bool) -> tuple[Output, io.StringIO]:
    stdout = io.StringIO()
    return Output(stdout, io.StringIO(), as_json, False, 0, "verify"), stdout


def test_show_prints_the_text_or_the_document_and_returns_the_exit_code() -> None:
    out, stdout = _output(as_json=False)
    assert out.show(_Result(2)) == 1
    assert stdout.getvalue() == "2 setting(s) differ\n"
    out, stdout = _output(as_json=True)
    assert out.show(_Result(0)) == 0
    doc = json.loads(stdout.getvalue())
    assert doc["format"] == "tunectl-verify" and doc["in_sync"] is True and doc["profile"] == "p"


def test_verify_with_nothing_applied_and_mounts_rollback_are_reports_with_exit_0() -> None:
    from tests.harness import check_documents
    from tunectl.mounts.operations import RollbackReport
    from tunectl.tuning.operations import NothingAppliedReport

    for report, document, text in [
        (NothingAppliedReport("/var/lib/tunectl"), "verify", "nothing applied: no profile is recorded in /var/lib/tunectl"),
        (RollbackReport("/etc/fstab: restored", "/etc/fstab.tunectl-1", False), "mounts-rollback", "/etc/fstab: restored"),
    ]:
        assert report.exit_code == 0
        stdout = io.StringIO()
        assert Output(stdout, io.StringIO(), False, False, 0, document).show(report) == 0
        assert stdout.getvalue().startswith(text)
        stdout = io.StringIO()
        assert Output(stdout, io.StringIO(), True, False, 0, document).show(report) == 0
        (doc,) = check_documents(stdout.getvalue())
        assert doc["format"] == f"tunectl-{document}"
    assert json.loads(stdout.getvalue())["backup"] == "/etc/fstab.tunectl-1"


def test_align_works_out_its_exit_code_from_its_disks_parts_that_are_not_reports() -> None:
    from tunectl.align.verdict import AlignReport, DiskResult, Topology

    assert not issubclass(DiskResult, Report)  # a part: printed only inside align's report
    clean = DiskResult("sda", "gpt", Topology())
    assert AlignReport("p", [clean]).exit_code == 0
    assert AlignReport("p", [clean, DiskResult("sdb", None, Topology(), unreadable=True)]).exit_code == 1
    assert AlignReport("p", [DiskResult("sdc", None, Topology(), named=True)]).exit_code == 1  # named, no table
    assert AlignReport("p", [DiskResult("sdd", None, Topology())]).exit_code == 0  # found, unpartitioned: nothing off
