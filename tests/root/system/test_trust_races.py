"""Issue #34: races between root's check of a path and its open, driven by nobody with inotify.

nobody changes what it owns the moment root opens a file near it (tests/attacker.py);
each test tries a bounded number of times and fails on any success of the attacker:
a secret read, a file opened in the attacker's trap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import attacker
from tests.root.system import test_trust_attacks as attacks
from tests.root.system.test_trust_attacks import Arena, as_nobody, nobody_writes, run_cli, write_list
from tunectl.profile.library import shipped_profile_dir
from tunectl.profile.resolve import resolve_profile

pytestmark = pytest.mark.root

arena = attacks.arena
TRIES = 1000  # before the fix the secret leaked in one run in 20 to 50
PIPE_TRIES = 20000  # ~2 s of reads; before the fix one read the pipe as empty within the first second (3 runs of 3)


def test_extends_flipped_between_a_file_and_a_link_never_reads_the_link(arena: Arena) -> None:
    secret = arena.base / "secret.yaml"
    secret.write_text("name: topsecret\ndescription: s3cr3t-profile\nclasses:\n  ssd: {read_ahead_kb: 512}\n")
    secret.chmod(0o600)
    profiles = arena.open / "prof"
    as_nobody("mkdir", str(profiles))
    nobody_writes(profiles / "p.yaml", "name: p\nextends: ./base.yaml\n")
    nobody_writes(profiles / ".base.yaml.real", "name: base\nclasses:\n  ssd: {read_ahead_kb: 256}\n")
    as_nobody("ln", str(profiles / ".base.yaml.real"), str(profiles / "base.yaml"))
    proc = attacker.start(arena.open, "flip", str(profiles), "p.yaml", "base.yaml", str(secret))
    refused = 0
    try:
        for _ in range(TRIES):
            profile, diags = resolve_profile(profiles / "p.yaml", [shipped_profile_dir()])
            seen = repr(profile) + repr(diags)
            assert "s3cr3t" not in seen and "topsecret" not in seen and "512" not in seen, seen
            refused += profile is None
    finally:
        attacker.stop(proc)
    print(f"{refused} of {TRIES} resolutions refused while the attacker flipped base.yaml")


def list_set(arena: Arena) -> tuple[Path, Path, Path]:
    """nobody's file set (dir a: 30 files, dir sub: 3) and a trap: named pipes under sub's names."""
    root, trap = arena.open / "set", arena.open / "trap"
    as_nobody("mkdir", "-p", str(root / "a"), str(root / "sub"), str(trap))
    script = (f"for i in $(seq 1 30); do head -c 65536 /dev/zero > {root}/a/f$i; done; "
              f"for i in 1 2 3; do head -c 65536 /dev/zero > {root}/sub/s$i; mkfifo {trap}/s$i; done")
    as_nobody("sh", "-c", script)
    return root, root / "sub", trap


def put_back(sub: Path) -> None:
    if sub.is_symlink():
        sub.unlink()
        os.rename(str(sub) + ".old", sub)


@pytest.mark.parametrize("command", ["replay", "replay --no-io-uring", "collect"])
def test_a_directory_swapped_for_a_link_after_the_check_opens_nothing_behind_it(arena: Arena, command: str) -> None:
    root, sub, trap = list_set(arena)
    lst = arena.base / "set.list"
    state = ["--state-dir", str(arena.base / "state")]
    done = run_cli(*state, "preload", "collect", str(root), "-o", str(lst))
    assert done.code == 0, done.err
    assert json.loads(lst.read_text().splitlines()[0])["files"] == 33
    opens = attacker.Opens(trap)
    proc = attacker.start(arena.open, "swap", str(sub), str(sub), str(trap))  # s1 opened: s2, s3 through a link
    try:
        for _ in range(10):
            put_back(sub)
            if command == "collect":
                done = run_cli(*state, "--json", "preload", "collect", str(root), "-o", str(arena.base / "again.list"))
            else:
                done = run_cli(*state, "--json", "preload", *command.split(), str(lst))
            assert done.code in (0, 3), done.err
            assert opens.take() == [], f"root opened the attacker's trap through a swapped directory ({command})"
    finally:
        attacker.stop(proc)
        opens.close()
        put_back(sub)


def test_preload_show_opens_no_device_no_pipe_and_no_link_it_lists(arena: Arena) -> None:
    as_nobody("mkfifo", str(arena.open / "fifo"))
    as_nobody("ln", "-s", str(arena.victim), str(arena.open / "link"))
    regular = arena.base / "data"
    regular.write_bytes(b"x" * 4096)
    lst = write_list(arena.base / "show.list", [regular, arena.open / "fifo", arena.open / "link", Path("/dev/null")])
    opens = attacker.Opens(arena.open)
    try:
        done = run_cli("--json", "preload", "show", str(lst), timeout=30)
        assert done.code in (0, 1, 3), done.err
        assert opens.take() == [], "preload show opened a pipe or a link it lists"
    finally:
        opens.close()
    doc = {e["path"]: e for e in json.loads(done.out)["entries"]}
    assert doc[str(regular)]["status"] != "changed"
    for other in (arena.open / "fifo", arena.open / "link", "/dev/null"):
        assert doc[str(other)]["status"] == "changed", doc[str(other)]


def test_a_rules_file_swapped_for_a_named_pipe_is_never_read_as_empty(arena: Arena) -> None:
    # open_listed looked (lstat) and then opened by name: a named pipe renamed in between was opened without
    # blocking and read as an empty rules file, which `udev check --rules-dir` and doctor took as no rules at all.
    from tunectl.system import rulesfile

    rules = arena.open / "rules"
    as_nobody("mkdir", str(rules))
    text = f"# {rulesfile.HEADER_MARK}\nACTION==\"add\"\n"
    nobody_writes(rules / f".{rulesfile.RULES_FILE}.real", text)
    as_nobody("ln", str(rules / f".{rulesfile.RULES_FILE}.real"), str(rules / rulesfile.RULES_FILE))
    proc = attacker.start(arena.open, "pipe", str(rules), rulesfile.RULES_FILE)
    outcomes = {"read": 0, "refused": 0}
    try:
        for _ in range(PIPE_TRIES):
            try:
                got = rulesfile.read(rules / rulesfile.RULES_FILE)
            except rulesfile.RulesError as e:
                assert "named pipe" in e.message or "changed while" in e.message, e.message
                outcomes["refused"] += 1
                continue
            assert got == text, f"read {got!r} from the swapped name"  # renamed over: the name is never missing
            outcomes["read"] += 1
    finally:
        attacker.stop(proc)
    print(f"{outcomes} of {PIPE_TRIES} reads while nobody swapped the rules file for a named pipe")
