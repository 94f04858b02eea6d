"""The reports of `tunectl profile list|show|validate`: what each found, as one JSON document and an exit code."""

from __future__ import annotations

from pathlib import Path

from tunectl.errors import ExitCode
from tunectl.profile.reader import Diagnostic, json_path
from tunectl.profile.resolve import Profile
from tunectl.record import field, record
from tunectl.report import Report
from tunectl.units import counted

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any


@record
class ProfileListReport(Report):
    entries: list[tuple[str, Path, str]]  # name, file, one-line description

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def to_json(self) -> dict:
        return {"profiles": [{"name": n, "file": str(p), "description": d} for n, p, d in self.entries]}

    def print_text(self, out) -> None:
        """A row per profile: its name, description and file."""
        out.print(out.table(["NAME", "DESCRIPTION", "FILE"], [(n, d, p) for n, p, d in self.entries], middle=("FILE",),
                            keep=("NAME",)))


@record
class ProfileShowReport(Report):
    profile: Profile
    explain: bool = False

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK

    def to_json(self) -> dict:
        profile = self.profile
        doc: dict[str, Any] = {"name": profile.name, "files": profile.files, "profile": profile.data}
        if self.explain:
            doc["origins"] = {json_path(p): {"file": f, "line": profile.positions.get(p, (1, 1))[0],
                                             "column": profile.positions.get(p, (1, 1))[1]}
                              for p, f in sorted(profile.origins.items(), key=lambda kv: [str(k) for k in kv[0]])}
        return doc

    def print_text(self, out) -> None:
        """The resolved profile as YAML; with --explain, a header and each value's file:line."""
        from tunectl.profile.yaml_text import render_profile_yaml
        from tunectl.report import shown

        profile = self.profile
        if self.explain:
            out.print(f"# {shown(profile.name)}: {' <- '.join(map(shown, profile.files))}")
            out.print("# each value is followed by the file and line it comes from; later files in the")
            out.print("# extends: chain override earlier ones key by key, a list or a range {min, max} replaces the "
                      "whole value")
        out.print(render_profile_yaml(profile, explain=self.explain))


@record
class FileVerdict:
    ref: str
    profile: Profile | None
    diagnostics: list

    @property
    def errors(self) -> list:
        return [d for d in self.diagnostics if not isinstance(d, Diagnostic) or d.severity == "error"]

    def to_json(self) -> dict:
        return {"file": self.ref, "ok": not self.errors, "name": self.profile.name if self.profile else None,
                "diagnostics": [d.to_json() if isinstance(d, Diagnostic) else {"message": str(d), "severity": "error"}
                                for d in self.diagnostics]}


@record
class ValidateReport(Report):
    files: list[FileVerdict] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.USAGE if any(f.errors for f in self.files) else ExitCode.OK

    def to_json(self) -> dict:
        return {"ok": self.exit_code == ExitCode.OK, "files": [f.to_json() for f in self.files]}

    def print_text(self, out) -> None:
        """Each file's problems (file:line:col lines, on stderr), or `FILE: ok` with its count of warnings."""
        from tunectl.report import error_lines, shown

        for verdict in self.files:
            diags = verdict.diagnostics
            for line in error_lines(diags):
                out.warn(line)
            if not verdict.errors:
                warned = f" ({counted(len(diags), 'warning')})" if diags else ""
                out.print(f"{shown(verdict.ref)}: ok{warned}")
