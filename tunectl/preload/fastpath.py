"""`tunectl preload replay LIST` without argparse or the full Context: its fixed cost is budgeted.

A boot-time replay of an already-resident list should cost little more than
starting Python (#30: at most 30 ms over `python -c pass`). argparse (with
gettext and its help machinery) and `tunectl.context` (the state store, the
module tree, the udev database, none of which a replay touches) cost about as
much again. So the plain shapes of the command line are read here, and
anything else (--help, an abbreviation, `--opt=value`, a value that does not
convert, an option in the wrong place, -vv, a root option) returns None: the
full parser then reads the same words and says what is wrong, as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# global options (anywhere on the line) -> (attribute, value); each given once
GLOBAL_FLAGS = {"-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose", "--json": "json"}
# replay's own options, after `replay` -> attribute, and how a value converts (None: a flag)
REPLAY_OPTIONS = {"--no-metadata": ("no_metadata", None), "--no-io-uring": ("no_io_uring", None),
                  "--threads": ("threads", int), "--settle-timeout": ("settle_timeout", float),
                  "--max-bytes": ("max_bytes", str)}


class ReplayArgs:
    """What `tunectl.preload.cli.run` and `tunectl.cli.main` read of a parsed `preload replay` line."""

    command = "preload"
    preload_command = "replay"
    color = "auto"
    propagate = False
    lean = True

    def __init__(self, list_path: str) -> None:
        self.list = list_path
        self.json = self.quiet = self.no_metadata = self.no_io_uring = False
        self.verbose = 0
        self.threads: int | None = None
        self.settle_timeout = 0.0
        self.max_bytes: str | None = None


def replay_args(argv: Sequence[str]) -> ReplayArgs | None:
    """`argv` read as argparse reads `preload replay`, when it is one of the plain shapes; None otherwise."""
    words: list[str] = []  # the positional words, in order: preload, replay, LIST
    given: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            continue
        if arg in GLOBAL_FLAGS:
            name = GLOBAL_FLAGS[arg]
            if name in given:
                return None  # -v -v is -vv (debug logging); the full path sets that up
            given[name] = True
            continue
        if arg not in REPLAY_OPTIONS or words[:2] != ["preload", "replay"]:
            return None  # unknown here, or before `replay` (argparse refuses it there)
        name, convert = REPLAY_OPTIONS[arg]
        if convert is None:
            given[name] = True
            continue
        if i >= len(argv) or argv[i].startswith("-"):
            return None
        try:
            given[name] = convert(argv[i])
        except ValueError:
            return None  # argparse says which value and why
        i += 1
    if len(words) != 3 or words[:2] != ["preload", "replay"]:
        return None
    args = ReplayArgs(words[2])
    for name, value in given.items():
        setattr(args, name, 1 if name == "verbose" else value)
    return args


class ReplayContext:
    """The part of `tunectl.context.Context` a replay uses: the roots (chosen and checked the same way), sysfs,
    the environment. No state store: a replay writes no journal and takes no lock."""

    state = None

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        from tunectl.system.roots import Roots, check_trusted
        from tunectl.system.sysfs import Sysfs

        self.env = dict(os.environ if env is None else env)
        self.roots = Roots.choose(self.env)
        check_trusted(self.roots)
        self.sysfs = Sysfs(self.roots.sys, confined=not self.roots.real)
