"""The explain pipeline: resolve the stack, read its facts, measure, run the rules, run the experiments."""

from __future__ import annotations

import contextlib
import os

from tunectl.context import Context
from tunectl.errors import NotPermitted, UsageError
from tunectl.explain import facts as reading
from tunectl.explain import measure, rules
from tunectl.explain.compare import compare
from tunectl.explain.model import Case, ColdRead, StackFacts
from tunectl.explain.report import ExplainReport
from tunectl.record import record


@record(frozen=True)
class Request:
    target: str
    cold: bool | None  # None: on for a file, off for anything else
    read_size: int
    limit: int  # bytes read at most
    trace: bool = False
    compare: str | None = None
    experiments: bool = False
    compressors: tuple[str, ...] | None = None  # --try's other compressors (None: xz)


def resolve(ctx: Context, target: str):
    """(resolver, the stack under target); a directory or mountpoint is the stack of its filesystem."""
    from tunectl.devices.resolve import Resolver

    resolver = Resolver(ctx)
    return resolver, resolver.filesystem_stack(target) if os.path.isdir(target) else resolver.stack(target)


def _require_root(what: str, leave: str) -> None:
    """NotPermitted unless root; `leave`: what to change in the command for the facts alone (named: --no-cold
    may be given already)."""
    if os.geteuid() != 0:
        raise NotPermitted(f"{what} needs root (it drops cached pages of block devices)",
                           hint=f"run as root, or {leave}: the facts and findings alone need no root")


def _leave_out(req: Request) -> str:
    """The options of `req` that read cold, in words: what a user without root leaves out."""
    asked = [o for o, on in (("--cold", req.cold), ("--trace", req.trace), ("--compare", req.compare),
                             ("--try", req.experiments)) if on]
    if req.cold is None:  # the default cold read of a file
        return "add --no-cold" + (f" and leave out {' and '.join(asked)}" if asked else "")
    return f"leave out {' and '.join(asked)}"


def _cold(ctx: Context, facts: StackFacts, path: str, req: Request, fd: int | None) -> ColdRead:
    return measure.cold_read(ctx, [la.name for la in facts.blocks], measure.cold_files(facts, path), path,
                             req.read_size, req.limit, fd)


def _open(resolver, stack, strict: bool, opened: contextlib.ExitStack) -> int | None:
    """The target file of `stack` opened once (`facts.open_file`), closed when `opened` ends; None: no file."""
    fd = reading.open_file(resolver, stack, strict)
    if fd is not None:
        opened.callback(os.close, fd)
    return fd


def _other_file(ctx: Context, path: str, opened: contextlib.ExitStack) -> tuple[StackFacts, int | None]:
    """--compare's file and its stack, and the file opened; a UsageError that names --compare when it is none."""
    hint = "compare with the same file elsewhere (the same binary on ext4)"
    try:
        other_resolver, other_stack = resolve(ctx, path)
        fd = _open(other_resolver, other_stack, os.geteuid() == 0, opened)
    except UsageError as e:
        raise UsageError(f"--compare: {e.message}", hint=e.hint or hint, code=e.code, where="--compare") from None
    other = reading.read(ctx, other_resolver, other_stack, path, opened=fd)
    if other.file is None:
        raise UsageError(f"--compare: {path} is not a file", hint=hint, where="--compare")
    return other, fd


def investigate(ctx: Context, req: Request, on_step=lambda text: None) -> ExplainReport:
    """The report on `req.target`. A file is opened once, before anything is read of it (`facts.open_file`):
    its extents and its cold read go through that descriptor, never by its name again."""
    with contextlib.ExitStack() as opened:
        return _investigate(ctx, req, on_step, opened)


def _investigate(ctx: Context, req: Request, on_step, opened: contextlib.ExitStack) -> ExplainReport:
    resolver, stack = resolve(ctx, req.target)
    is_file = stack.file is not None  # the target itself, not a loop's backing file further down
    cold = is_file if req.cold is None else req.cold
    reads = bool(cold or req.trace or req.compare or req.experiments)
    fd = _open(resolver, stack, reads and os.geteuid() == 0, opened)
    facts = reading.read(ctx, resolver, stack, req.target, opened=fd)
    notes: list[str] = []
    if reads and not is_file:
        raise UsageError(f"{req.target} is not a file: --cold, --trace, --compare and --try read a file",
                         hint="name a file on the stack (explain /usr/lib/chromium/chromium)")
    # refused before the target is read
    other, other_fd = _other_file(ctx, req.compare, opened) if req.compare else (None, None)
    measured = None
    timings = None
    if cold or req.trace or req.compare:
        _require_root("the cold read", _leave_out(req))
        on_step("cold read")
        if req.trace:
            measured, timings = measure.traced(ctx, facts, lambda: _cold(ctx, facts, req.target, req, fd))
        else:
            measured = _cold(ctx, facts, req.target, req, fd)
    case = Case(facts, measured, timings)
    comparison = None
    if req.compare:
        on_step(f"cold read of {req.compare}")
        other_cold = _cold(ctx, other, req.compare, req, other_fd)
        kinds = {la.name: la.kind for la in facts.blocks}
        comparison = compare(measured, kinds, facts.disks[0].name, other_cold, other.disks[0].name)
    results = []
    if req.experiments:
        _require_root("--try", "leave out --try")
        from tunectl.explain import experiment

        def read(path: str, names: list[str], files: list[str]) -> ColdRead:
            return measure.cold_read(ctx, names, [path, *files], path, req.read_size, req.limit)

        results, tried = experiment.run(ctx, facts, read, on_variant=lambda v: on_step(f"try {v.label}"),
                                        compressors=req.compressors, veritysetup=experiment.find_veritysetup())
        notes += tried
    if is_file and facts.filesystem is None:
        notes.append("the mount holding the file was not found: filesystem facts are missing")
    case = Case(facts, measured, timings, tuple(r.trial() for r in results))  # --try's measurements rank too
    return ExplainReport(case, rules.findings(case), comparison, results, notes)
