"""Shell completion, run for real: what bash (and zsh) offer after each command word, against the parser.

`bash_probe(script)` and `zsh_probe(script)` are shell programs that source the completion
script and print one line per probe; `check_bash` and `check_zsh` read those lines and return
what is missing. The unit tier runs them on the generated script, the package tier on the
script the .deb installed, in the clean root.
"""

from __future__ import annotations

import argparse
import shlex

from tunectl.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--") and a.help != argparse.SUPPRESS}


def tree() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every parser by its command words: (), ("udev",), ("udev", "render"), ..."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(words: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        out[words] = parser
        for name, sub in _subparsers(parser).items():
            walk(words + (name,), sub)

    walk((), build_parser())
    return out


def bash_cases() -> dict[tuple[str, ...], set[str]]:
    """COMP_WORDS (the last one being completed) -> the words that must be among the replies."""
    cases: dict[tuple[str, ...], set[str]] = {}
    for words, parser in tree().items():
        subs = _subparsers(parser)
        if subs:
            cases[("tunectl", *words, "")] = set(subs)
            for name in subs:
                cases.setdefault(("tunectl", *words, name[:2]), set()).add(name)
        if words:
            cases[("tunectl", *words, "--")] = _long_options(parser)
    return cases


def bash_probe(script: str) -> str:
    lines = ["[ -f /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion",
             f". {shlex.quote(script)}",
             'probe() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _shtab_tunectl; '
             "local IFS=' '; printf '%s\\t%s\\n' \"$*\" \"${COMPREPLY[*]}\"; }"]
    lines += ["probe " + " ".join(shlex.quote(w) for w in words) for words in bash_cases()]
    return "\n".join(lines) + "\n"


def check_bash(output: str) -> list[str]:
    """What each probe missed, one line per probe ([] when every command, action and option completes)."""
    got = {}
    for line in output.splitlines():
        key, _, replies = line.partition("\t")
        got[key] = set(replies.split())
    problems = []
    for words, want in bash_cases().items():
        key = " ".join(words)
        if key not in got:
            problems.append(f"{key!r}: no reply line")
        elif not want <= got[key]:
            problems.append(f"{key!r}: missing {sorted(want - got[key])}, offered {sorted(got[key])}")
    return problems


def _zsh_name(words: tuple[str, ...]) -> str:
    return "_shtab_tunectl" + "".join("_" + "".join(c if c.isalnum() else "_" for c in w) for w in words)


def zsh_probe(script: str) -> str:
    """Source the script with _describe and _arguments recording what they would offer, then list each
    parser's commands (through its _commands function) and options (its _options array)."""
    lines = ["_describe() { print -r -- \"describe ${(j: :)${(@)${(P)2}%%:*}}\" }",
             "_arguments() { : }",
             f"source {shlex.quote(script)}"]
    for words, parser in tree().items():
        key = " ".join(("tunectl", *words))
        if _subparsers(parser):
            lines.append(f"print -rn -- {shlex.quote(key + ' commands')}$'\\t'; {_zsh_name(words)}_commands")
        lines.append(f"print -r -- {shlex.quote(key + ' options')}$'\\t'\"${{(j: :)" + _zsh_name(words)
                     + "_options}\"")
    return "\n".join(lines) + "\n"


def check_zsh(output: str) -> list[str]:
    got = {}
    for line in output.splitlines():
        key, _, rest = line.partition("\t")
        got[key] = rest.removeprefix("describe ")
    problems = []
    for words, parser in tree().items():
        key = " ".join(("tunectl", *words))
        subs = _subparsers(parser)
        if subs and not set(subs) <= set(got.get(key + " commands", "").split()):
            problems.append(f"{key}: commands {sorted(subs)}, offered {got.get(key + ' commands')!r}")
        missing = [o for o in _long_options(parser) if o not in got.get(key + " options", "")]
        if missing:
            problems.append(f"{key}: options {sorted(missing)} not offered")
    return problems
