"""The man pages: clean under man --warnings and mandoc -Tlint at 80 columns; tunectl(8) names every command
and every --json format."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.harness import REPO
from tunectl import schema
from tunectl.cli import COMMANDS

PAGES = sorted((REPO / "man").glob("tunectl*.[58]"))


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db is not installed")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_man_renders_without_warnings_in_80_columns(page) -> None:
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "", "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", str(page)], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    wide = [line for line in done.stdout.splitlines() if len(line) > 80]  # examples too: no wrap in a terminal
    assert not wide, wide


@pytest.mark.skipif(shutil.which("mandoc") is None, reason="mandoc is not installed (apt: mandoc)")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_mandoc_lint_is_clean(page) -> None:
    done = subprocess.run(["mandoc", "-Tlint", "-Wwarning", str(page)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def _section(text: str, name: str) -> str:
    return text.split(f"\n.SH {name}\n", 1)[1].split("\n.SH ", 1)[0]


def test_tunectl_8_documents_every_command_with_its_format() -> None:
    page = (REPO / "man" / "tunectl.8").read_text()
    commands = _section(page, "COMMANDS")
    tags = re.findall(r"^\.TP\n\.B (\S+)", commands, re.M)
    assert set(tags) == set(COMMANDS), set(COMMANDS) ^ set(tags)
    plain = commands.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    json_section = _section(page, "JSON OUTPUT").replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    for name in schema.VERSIONS:
        if name not in ("version", "error"):
            short = name.split("-", 1)[1] if "-" in name else name
            assert f"tunectl-{name}" in plain or re.search(rf"(?<![\w-])-{re.escape(short)}\b", plain), name
        assert f"tunectl-{name}" in json_section or f"-{name}" in json_section, name


def test_every_page_is_installed() -> None:
    setup = (REPO / "setup.cfg").read_text()
    for page in PAGES:
        assert f"man/{page.name}" in setup, page.name


GROUP_PAGES = {"udev": "tunectl-udev.8", "align": "tunectl-align.8", "mounts": "tunectl-mounts.8",
               "preload": "tunectl-preload.8", "bench": "tunectl-bench.8", "explain": "tunectl-explain.8"}


def _plain(page: str) -> str:
    """A page's text with roff's escapes for a hyphen and the font changes taken out: `\\fB\\-\\-all\\fR` is --all."""
    text = (REPO / "man" / page).read_text().replace("\\-", "-")
    return re.sub(r"\\f[BIRP]", "", text)


def _names(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def _help_options() -> list[tuple[tuple[str, ...], str]]:
    """(command words, option) for every option a command's --help shows, the global ones under ()."""
    import argparse

    from tests.completion_helpers import tree

    parsers = tree()
    top = {o for a in parsers[()]._actions for o in a.option_strings}
    found = []
    for words, parser in parsers.items():
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:
                found += [(words, o) for o in action.option_strings
                          if o not in ("-h", "--help") and (o not in top) == bool(words)]
    return found


@pytest.mark.parametrize("words, option", _help_options(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_every_option_help_shows_is_in_the_man_page(words: tuple[str, ...], option: str) -> None:
    """Each option of a command's --help, in both spellings, in that command's page (the global options and the
    commands without a page of their own: tunectl(8)); a new option must reach the page."""
    page = GROUP_PAGES.get(words[0], "tunectl.8") if words else "tunectl.8"
    text = _plain(page)
    if not words:
        text = _section(text, "GLOBAL OPTIONS")
    assert option in _names(text), f"`tunectl {' '.join(words)} --help` shows {option}; man/{page} does not"


def test_a_page_names_no_option_tunectl_does_not_have() -> None:
    """The reverse: every --option a page sets in bold is one tunectl takes (other tools' options are named in
    the same sentence as their tool, and listed here)."""
    from tests.completion_helpers import tree

    known = {o for p in tree().values() for a in p._actions for o in a.option_strings}
    others = {"--readonly", "--direct-io", "--salt", "--tab-file", "--verify", "--action", "--property-match",
              "--query", "--reload", "--setra", "--subsystem-match", "--sysname-match", "--list-columns"}
    for page in PAGES:
        bold = re.findall(r"\\fB(\\-\\-(?:\w|\\-)+)|^\.B[IR]? (\\-\\-(?:\w|\\-)+)", page.read_text(), re.M)
        names = {(a or b).replace("\\-", "-") for a, b in bold}
        assert names - known - others == set(), page.name


def test_every_error_code_is_named_in_tunectl_8_and_the_readme() -> None:
    """A script branches on `error.code`: each code tunectl can print is in tunectl(8) JSON OUTPUT and the README."""
    codes = {"internal", "interrupted", "terminated"}  # made in cli.py, not by an error class
    for path in (REPO / "tunectl").rglob("*.py"):
        codes |= set(re.findall(r'\bcode(?:: str)? ?= ?"([a-z-]+)"', path.read_text()))
    codes.discard("error")  # TunectlError's own default: every error raised is one of its subclasses
    man = set(re.findall(r"[a-z-]+", _section(_plain("tunectl.8"), "JSON OUTPUT")))
    readme = (REPO / "README.md").read_text().split("### Machine output", 1)[1].split("\n### ", 1)[0]
    assert codes - man == set() and {c for c in codes if f"`{c}`" not in readme} == set()


def test_a_document_a_page_shows_is_at_its_current_version() -> None:
    """`{"format": "tunectl-align", "version": 1` in a page, or "one document (tunectl-bench version 3)", is the
    version tunectl prints now: a reader copies it into a check."""
    texts = {page.name: _plain(page.name) for page in PAGES} | {"README.md": (REPO / "README.md").read_text()}
    stale = []
    for name, text in texts.items():
        shown = re.findall(r'"format": "tunectl-([\w-]+)", "version": (\d+)', text)
        shown += re.findall(r"one document \(tunectl-([\w-]+) version (\d+)", text)
        stale += [f"{name}: tunectl-{fmt} {v}" for fmt, v in shown if fmt in schema.VERSIONS
                  and int(v) != schema.VERSIONS[fmt]]
    assert not stale, stale


def test_every_file_of_this_tree_the_readme_and_the_pages_name_exists() -> None:
    """`tests/unit/build/test_requirements_lock.py`, `benchmarks/preload.py`, ...: a path a reader is sent to is
    there (a placeholder such as `<package>` or `COMMAND` stands for any name)."""
    import glob

    tops = "tests|tunectl|scripts|benchmarks|man|ansible|debian|packaging|requirements|profiles|bin|\\.ci"
    texts = [(REPO / "README.md").read_text()] + [_plain(page.name) for page in PAGES]
    named = {p.rstrip(".,:;)") for text in texts for p in re.findall(rf"(?<![\w/.-])(?:{tops})/[\w./*<>-]*", text)}
    missing = []
    for path in sorted(named):
        pattern = re.sub(r"<[^>]+>|\b[A-Z]{2,}\b", "*", path)  # <package>, COMMAND: any name
        if not glob.glob(str(REPO / pattern)):
            missing.append(path)
    assert not missing, missing


def _example_lines() -> list[tuple[str, str]]:
    """(where, line) for every `tunectl ...` line of an example: the README's sh blocks, the pages' .nf/.EX blocks,
    and every command's --help `examples:`."""
    from tests.completion_helpers import tree
    from tests.harness import run_cli

    found = []
    for words in tree():
        out = run_cli(*words, "--help").out
        for line in out.split("\nexamples:\n", 1)[1].splitlines() if "\nexamples:\n" in out else []:
            found.append((f"tunectl {' '.join(words)} --help", line.strip()))
    for page in PAGES:
        text = page.read_text().replace("\\-", "-").replace("\\e\n", " ").replace("\\(aq", "'")
        for block in re.findall(r"^\.(?:nf|EX)\n(.*?)^\.(?:fi|EE)", text, re.M | re.S):
            found += [(page.name, re.sub(r"\\f[BIRP]", "", line).strip()) for line in block.splitlines()]
    for block in re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S):
        found += [("README.md", line.strip()) for line in block.replace("\\\n", " ").splitlines()]
    return [(where, line.removeprefix("sudo ")) for where, line in found
            if line.startswith(("tunectl ", "sudo tunectl "))]


def test_every_example_parses_as_a_tunectl_command_line() -> None:
    """An example a reader copies has only options and actions tunectl takes: each one, up to its first pipe,
    redirection or comment, is parsed by the real parser (what it does is the other tests' business)."""
    import contextlib
    import io
    import shlex

    from tunectl.cli import build_parser
    from tunectl.errors import TunectlError

    examples = _example_lines()
    assert len(examples) > 100, len(examples)
    wrong = []
    for where, line in examples:
        argv = shlex.split(re.split(r"\s+#|\s\|\|?\s|\s&&\s|\s>\s", line)[0].replace("$LOOP", "/dev/loop7"))[1:]
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                build_parser(argv).parse_args(argv)
        except (SystemExit, TunectlError) as e:
            if not isinstance(e, SystemExit) or e.code:
                wrong.append(f"{where}: {line}: {e}")
    assert not wrong, wrong
