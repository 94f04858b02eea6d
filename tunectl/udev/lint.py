"""A lint of generated udev rules: syntax, known keys and operators, quoting, and tunectl's own invariants.

udev 252 has no `udevadm verify` (new in systemd 254) and accepts some
mistakes silently (a missing comma), so the rendered text is checked here.
"""

from __future__ import annotations

import re

from tunectl.record import record
from tunectl.system.rulesfile import ORIG_PREFIX
from tunectl.udev.lines import logical_lines

MATCH_OPS = frozenset({"==", "!="})
_ASSIGN = frozenset({"=", "+=", ":="})
# key -> (operators, attribute: "required" | "optional" | "none")
KNOWN_KEYS: dict[str, tuple[frozenset, str]] = {
    "ACTION": (MATCH_OPS, "none"), "DEVPATH": (MATCH_OPS, "none"), "KERNEL": (MATCH_OPS, "none"),
    "KERNELS": (MATCH_OPS, "none"), "SUBSYSTEM": (MATCH_OPS, "none"), "SUBSYSTEMS": (MATCH_OPS, "none"),
    "DRIVER": (MATCH_OPS, "none"), "DRIVERS": (MATCH_OPS, "none"), "TAGS": (MATCH_OPS, "none"),
    "RESULT": (MATCH_OPS, "none"), "PROGRAM": (MATCH_OPS, "none"),
    "ATTRS": (MATCH_OPS, "required"), "CONST": (MATCH_OPS, "required"), "TEST": (MATCH_OPS, "optional"),
    "ATTR": (MATCH_OPS | {"="}, "required"), "SYSCTL": (MATCH_OPS | {"="}, "required"),
    "ENV": (MATCH_OPS | {"=", "+="}, "required"), "TAG": (MATCH_OPS | _ASSIGN | {"-="}, "none"),
    "NAME": (MATCH_OPS | _ASSIGN, "none"), "SYMLINK": (MATCH_OPS | _ASSIGN | {"-="}, "none"),
    "IMPORT": (MATCH_OPS | _ASSIGN, "required"),
    "OWNER": (_ASSIGN, "none"), "GROUP": (_ASSIGN, "none"), "MODE": (_ASSIGN, "none"),
    "SECLABEL": (_ASSIGN, "required"), "RUN": (_ASSIGN, "optional"), "OPTIONS": (_ASSIGN, "none"),
    "LABEL": (frozenset({"="}), "none"), "GOTO": (frozenset({"="}), "none"),
}
# A pattern compiled at first use (re keeps it): most runs never need it.
_TOKEN = r'\s*([A-Z_]+)(?:\{([^{}"]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*'


@record(frozen=True)
class LintProblem:
    """One problem in a rules text, at its line."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@record(frozen=True)
class _Token:
    """One key of a rule: KEY{attr} op "value"."""

    key: str
    attr: str | None
    op: str
    value: str


def parse_rule(text: str) -> tuple[list[_Token], str | None]:
    """One rule line -> tokens, or the reason it cannot be parsed."""
    tokens = []
    pos = 0
    token = re.compile(_TOKEN)
    while pos < len(text):
        m = token.match(text, pos)
        if not m:
            return tokens, f"cannot parse at column {pos + 1}: {text[pos:pos + 30]!r}"
        tokens.append(_Token(m.group(1), m.group(2), m.group(3), m.group(4)))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                return tokens, f"missing ',' at column {pos + 1} (udev 252 silently accepts this)"
            pos += 1
            if not text[pos:].strip():
                return tokens, "trailing ','"
    if not tokens:
        return tokens, "empty rule"
    return tokens, None


def lint(text: str) -> list[LintProblem]:
    """Problems in a rules text: syntax, known keys and operators, quoting, and tunectl's own invariants.

    udev 252 has no `udevadm verify` (new in systemd 254) and accepts some
    mistakes silently (a missing comma), so the rendered text is checked here.
    """
    problems: list[LintProblem] = []
    labels: dict[str, int] = {}
    gotos: list[tuple[int, str]] = []
    knob_write_at: int | None = None
    guards: set[str] = set()
    if text and not text.endswith("\n"):
        problems.append(LintProblem(text.count("\n") + 1, "file does not end with a newline"))
    for n, line in logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if any(ord(c) < 0x20 and c != "\t" for c in line):
                problems.append(LintProblem(n, "control character in a comment"))
            continue
        if any(ord(c) < 0x20 or ord(c) > 0x7E for c in line):
            problems.append(LintProblem(n, "non-printable or non-ASCII character in a rule"))
        tokens, error = parse_rule(stripped)
        if error:
            problems.append(LintProblem(n, error))
            continue
        has_action = False
        for t in tokens:
            spec = KNOWN_KEYS.get(t.key)
            if spec is None:
                problems.append(LintProblem(n, f"unknown key {t.key}"))
                continue
            ops, attr_rule = spec
            if t.op not in ops:
                problems.append(LintProblem(n, f"operator {t.op} is not valid for {t.key}"))
            if attr_rule == "required" and not t.attr:
                problems.append(LintProblem(n, f"{t.key} needs an attribute, e.g. {t.key}{{name}}"))
            if attr_rule == "none" and t.attr is not None:
                problems.append(LintProblem(n, f"{t.key} takes no {{attribute}}"))
            problems.extend(_value_problems(n, t))
            if t.op not in MATCH_OPS:
                has_action = True
            if t.key == "ATTRS" and (t.attr or "").startswith("queue/"):
                problems.append(LintProblem(n, "ATTRS{queue/...} walks up to parent devices; use ATTR{} on the disk"))
            if t.key == "LABEL":
                if t.value in labels:
                    problems.append(LintProblem(n, f"LABEL {t.value!r} already defined at line {labels[t.value]}"))
                labels.setdefault(t.value, n)
            if t.key == "GOTO":
                gotos.append((n, t.value))
            if t.op in MATCH_OPS and (t.key in ("SUBSYSTEM", "ACTION") or (t.key == "ENV" and t.attr == "DEVTYPE")):
                guards.add(t.key if t.key != "ENV" else "DEVTYPE")
            if t.key == "ATTR" and t.op == "=":
                target = t.attr or ""
                if not guards >= {"SUBSYSTEM", "ACTION", "DEVTYPE"}:
                    problems.append(LintProblem(n, f"ATTR{{{target}}} is written before the SUBSYSTEM, ACTION and "
                                                   "ENV{DEVTYPE} guards"))
                if target == "queue/scheduler":
                    if knob_write_at is not None:
                        problems.append(LintProblem(n, f"scheduler written after an iosched knob (line {knob_write_at}); "
                                                       "the knob is lost when the scheduler switches"))
                elif target.startswith("queue/iosched/"):
                    knob_write_at = knob_write_at or n
        if not has_action:
            problems.append(LintProblem(n, "rule has only match keys and no effect"))
    for n, target in gotos:
        where = labels.get(target)
        if where is None:
            problems.append(LintProblem(n, f"GOTO {target!r} has no LABEL (udev ignores the rule)"))
        elif where < n:
            problems.append(LintProblem(n, f"GOTO {target!r} jumps backwards to line {where}; udev only jumps forward"))
    return sorted(problems, key=lambda p: (p.line, p.message))


def _value_problems(n: int, t: _Token) -> list[LintProblem]:
    out = []
    if "\\" in t.value:
        out.append(LintProblem(n, f"{t.key}: backslash in a value"))
    value = t.value
    if t.key == "ENV" and (t.attr or "").startswith(ORIG_PREFIX) and t.op == "=" \
            and re.fullmatch(r"\$attr\{queue/[a-z0-9_]+(/[a-z0-9_]+)?\}", value):
        value = ""  # the one other substitution: an original value read for the journal (tunectl.udev.scope)
    if t.key == "RUN":
        value = value.replace("$kernel", "")
        if "'" in value:
            out.append(LintProblem(n, "RUN: quote in the command"))
    if "%" in value or "$" in value:
        out.append(LintProblem(n, f"{t.key}: substitution character (% or $) in a value"))
    if t.attr is not None and not re.fullmatch(r"[A-Za-z0-9_./*-]*", t.attr):
        out.append(LintProblem(n, f"{t.key}{{{t.attr}}}: unexpected characters in the attribute name"))
    if t.key == "ATTR" and t.attr and (t.attr.startswith("/") or ".." in t.attr.split("/")):
        out.append(LintProblem(n, f"ATTR{{{t.attr}}}: must be relative to the device, without .."))
    return out
