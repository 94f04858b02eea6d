# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Running the tunectl command line through its `--json` interface, for the tunectl modules."""

from __future__ import annotations

import json
import os
import shlex


class StepFailed(Exception):
    """tunectl said no: its own message (file:line:col lines for a profile) and hint."""


def find_executable(module, name: str) -> str:
    """The tunectl command to run: `name` on PATH (and the sbin directories) or a path; fails the task otherwise."""
    if os.sep not in name:
        found = module.get_bin_path(name, required=False, opt_dirs=["/usr/local/sbin", "/usr/local/bin"])
        if found is None:
            module.fail_json(msg=f"{name} not found on PATH or in the sbin directories; install tunectl "
                                 "(the tunectl.tunectl.tunectl role can) or set executable to its path")
        return found
    if not os.access(name, os.X_OK):
        module.fail_json(msg=f"executable {name} does not exist or is not executable")
    return name


def error_text(doc: dict) -> str:
    """tunectl's error document (tunectl-error) as the lines it prints: `file:line:col: path: message`, then the hint."""
    error = doc.get("error") or {}
    lines = []
    for e in error.get("diagnostics") or [{"message": error.get("message") or "unknown error"}]:
        where = ":".join(str(e[k]) for k in ("file", "line", "column") if e.get(k) is not None)
        parts = [p for p in (where, e.get("path"), e.get("message")) if p]
        lines.append(": ".join(parts))
    if error.get("hint"):
        lines.append(f"hint: {error['hint']}")
    return "\n".join(lines)


class Tunectl:
    """Runs `tunectl ... --json` and returns its document; collects stderr lines as warnings."""

    def __init__(self, module, executable: str, reads: dict[str, int]) -> None:
        self.module = module
        self.reads = reads  # the --json formats the calling module reads, at their versions
        self.executable = executable
        self.commands: list[str] = []
        self.warnings: list[str] = []
        self.environ: dict[str, str] = {"LC_ALL": "C"}
        if os.path.isabs(executable) and "TUNECTL_EXECUTABLE" not in os.environ:
            self.environ["TUNECTL_EXECUTABLE"] = executable

    def warn(self, text: str) -> None:
        if text and text not in self.warnings:
            self.warnings.append(text)

    def run(self, args: list[str], ok_codes: tuple[int, ...]) -> dict:
        cut = args.index("--") if "--" in args else len(args)  # after --: operands only (device names)
        argv = [self.executable] + args[:cut] + ["--json"] + args[cut:]
        self.commands.append(shlex.join(argv))
        rc, stdout, stderr = self.module.run_command(argv, environ_update=self.environ)
        try:
            doc = json.loads(stdout)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            detail = (stderr or stdout).strip() or "no output"
            raise StepFailed(f"`{shlex.join(argv)}` exited {rc} without a JSON report: {detail}")
        kind, version = doc.get("format"), doc.get("version")
        if kind not in self.reads or self.reads[kind] != version:
            reads = f"version {self.reads[kind]}" if kind in self.reads else "no such format"
            raise StepFailed(f"`{shlex.join(argv)}` printed {kind} version {version}; this module reads {reads}: "
                             "use the module and the tunectl of one release")
        if kind == "tunectl-error":
            raise StepFailed(error_text(doc))
        if rc not in ok_codes:
            raise StepFailed(f"`{shlex.join(argv)}` exited {rc}: {(stderr or '').strip() or json.dumps(doc)}")
        for line in (stderr or "").splitlines():
            self.warn(line.strip())
        return doc
