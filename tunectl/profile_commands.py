"""`tunectl profile list|show|validate|import-tuned`."""

from __future__ import annotations

from pathlib import Path

import yaml

from tunectl.errors import ExitCode, ProfileError
from tunectl.profile import Diagnostic, find_profile, list_profiles, load_profile
from tunectl.report import emit_json, table


def run(ctx, args, out) -> int:
    actions = {"list": _list, "show": _show, "validate": _validate, "import-tuned": _import_tuned}
    return actions[args.profile_command](ctx, args, out)


def _describe(path: Path) -> str:
    try:
        data = yaml.safe_load(path.read_text())
        return str(data.get("description", "")) if isinstance(data, dict) else ""
    except (OSError, yaml.YAMLError):
        return "(unreadable)"


def _list(ctx, args, out) -> int:
    entries = [(name, path, _describe(path)) for name, path in list_profiles(ctx.search_path)]
    if out.json:
        emit_json({"profiles": [{"name": n, "file": str(p), "description": d} for n, p, d in entries]}, out.stdout)
    else:
        out.print(table(["NAME", "DESCRIPTION", "FILE"], [(n, d, p) for n, p, d in entries]))
    return ExitCode.OK


def _show(ctx, args, out) -> int:
    profile = load_profile(args.name, ctx.search_path)
    for w in profile.warnings:
        out.warn(str(w))
    if out.json:
        doc = {"name": profile.name, "files": profile.files, "profile": profile.data}
        if args.explain:
            doc["origins"] = {".".join(map(str, k)) or "$": v for k, v in sorted(profile.origins.items(), key=str)}
        emit_json(doc, out.stdout)
        return ExitCode.OK
    text = yaml.safe_dump(profile.data, sort_keys=False, default_flow_style=False)
    if args.explain:
        out.print(f"# {profile.name}: resolved from {' <- '.join(profile.files)}")
        for key, file in sorted(profile.origins.items(), key=lambda kv: [str(p) for p in kv[0]]):
            out.print(f"# {'.'.join(map(str, key))}: {file}")
    out.print(text.rstrip())
    return ExitCode.OK


def _validate(ctx, args, out) -> int:
    results = []
    worst = ExitCode.OK
    for ref in args.files:
        path = find_profile(ref, ctx.search_path) or Path(ref)
        diags: list = []
        try:
            profile = load_profile(str(path) if path.exists() else ref, ctx.search_path)
            diags = list(profile.warnings)
        except ProfileError as e:
            diags = e.diagnostics
        errors = [d for d in diags if not isinstance(d, Diagnostic) or d.severity == "error"]
        if errors:
            worst = ExitCode.USAGE
        results.append({"file": str(path), "ok": not errors,
                        "diagnostics": [d.to_json() if isinstance(d, Diagnostic) else {"message": str(d)} for d in diags]})
        if not out.json:
            for d in diags:
                out.warn(str(d))
            if not errors:
                out.print(f"{path}: ok")
    if out.json:
        emit_json({"ok": worst == ExitCode.OK, "files": results}, out.stdout)
    return worst


def _import_tuned(ctx, args, out) -> int:
    from tunectl.tuned_import import import_tuned, render_yaml

    result = import_tuned(args.ref)
    if out.json:
        emit_json({"name": result.name, "profile": result.profile, "unconverted": result.unconverted,
                   "notes": result.notes}, out.stdout)
    else:
        out.stdout.write(render_yaml(result))
    return ExitCode.OK
