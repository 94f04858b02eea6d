"""The journal survives damage: generations with a checksum, fallbacks that say so, exit 5 for state it cannot use."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.harness import REPO, run_process
from tests.journal_helpers import Pair, assert_state_error
from tunectl import __version__
from tunectl.system import state as state_module
from tunectl.system.state import JOURNAL_VERSION, unseal

# --- generations ---------------------------------------------------------------------------------

def test_every_save_keeps_the_previous_generation_with_a_checksum(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    first = (pair.state / "journal.json").read_bytes()
    assert pair.fresh()("apply", "-p", "p2").code == 0
    assert (pair.state / "journal.json.1").read_bytes() == first
    current = unseal((pair.state / "journal.json").read_bytes())
    previous = unseal(first)
    assert (current["version"], current["generation"], previous["generation"]) == (JOURNAL_VERSION, 2, 1)
    sda, sdb = sorted(current["devices"].values(), key=lambda e: e["name"])
    # Who changed each value: the profile and the tunectl version of the run that set it, for every
    # journalled attribute, those the kernel changed as a side effect of another write included.
    # Knobs are journalled per scheduler (entry["iosched"]), not among the attributes.
    for entry in (sda, sdb):
        knobs = {f"iosched/{k}" for per in entry.get("iosched", {}).values() for k in per}
        assert set(entry["attributes"]) <= set(entry["changed_by"]) <= set(entry["attributes"]) | knobs, entry
    assert sda["changed_by"]["nr_requests"]["via"] == "scheduler"
    assert sda["changed_by"]["read_ahead_kb"]["profile"] == "p1"
    assert sda["changed_by"]["scheduler"]["profile"] == "p2"
    assert sdb["changed_by"]["read_ahead_kb"] == {"profile": "p2", "tunectl": __version__,
                                                  "at": sdb["changed_by"]["read_ahead_kb"]["at"]}
    # A re-apply that changes nothing saves nothing; a third save pushes generation 1 to .2.
    assert pair.fresh()("apply", "-p", "p2").code == 0
    assert unseal((pair.state / "journal.json").read_bytes())["generation"] == 2
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals
    assert unseal((pair.state / "journal.json.2").read_bytes())["generation"] == 1
    assert unseal((pair.state / "journal.json").read_bytes())["devices"] == {}


def _offsets(size: int) -> list[int]:
    """Every offset near both ends (where JSON stays almost valid), every fifth in between."""
    if os.environ.get("TUNECTL_TRUNCATE_EVERY_OFFSET"):
        return list(range(size + 1))
    return sorted(set(range(0, 64)) | set(range(size - 64, size + 1)) | set(range(64, size - 64, 5)))


def _files(top: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in top.rglob("*") if p.is_file()}


def _put_back(top: Path, files: dict[Path, bytes]) -> None:
    """Make a fake queue directory hold exactly `files` again (the fake kernel swaps iosched/ on a switch)."""
    for p in list(top.rglob("*")):
        if p.is_file() and p not in files:
            p.unlink()
    for p, data in files.items():
        if not p.exists() or p.read_bytes() != data:
            p.parent.mkdir(exist_ok=True)
            p.write_bytes(data)


def test_temp_files_of_a_killed_writer_go_at_the_next_lock_even_without_a_save(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("rollback").code == 0
    leftovers = [".journal.json.0123456789ab", ".active.json.00ff00ff00ff"]  # atomic_write's temp names
    for name in leftovers:
        (pair.state / name).write_text("torn")
    # A writer killed in a rotation, between linking NAME as .NAME.1.link and renaming that over NAME.1 (a CI
    # run: a SIGKILLed apply left one, and the rollback after it had nothing to save, so nothing took it away).
    for name in ("journal.json", "active.json"):
        os.link(pair.state / name, pair.state / f".{name}.1.link")
        leftovers.append(f".{name}.1.link")
    # The one sweep of temp files (trust.sweep_temps): only those names, regular files of this user, no link.
    kept = [".journal.json.notes", ".journal.json.abcdefabcdef", ".active.json.123456123456"]
    (pair.state / kept[0]).write_text("mine")
    (pair.state / kept[1]).symlink_to(pair.state / "journal.json")
    (pair.state / kept[2]).mkdir()
    if os.geteuid() == 0:  # another user's file of a like name (as root only: chown)
        kept.append(".active.json.fedcbafedcba")
        (pair.state / kept[-1]).write_text("theirs")
        os.chown(pair.state / kept[-1], 65534, 65534)
    r = pair.fresh()("rollback", "--json")  # nothing left to restore: no save happens
    assert r.code == 0 and r.doc["changed"] is False
    assert not [f for f in os.listdir(pair.state) if f in leftovers]
    assert all(os.path.lexists(pair.state / name) for name in kept)


def test_a_rotation_link_that_is_the_only_copy_stays(pair: Pair) -> None:
    """The sweep takes .NAME.1.link only as a second name of a generation: a lone copy is not removed unseen."""
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("rollback").code == 0
    lone = pair.state / ".active.json.1.link"
    lone.write_bytes((pair.state / "active.json").read_bytes())  # the same bytes, but its only name
    r = pair.fresh()("rollback", "--json")  # nothing left to restore: the lock's sweep, no save (no `_rotate`)
    assert r.code == 0 and r.doc["changed"] is False
    assert lone.exists() and os.stat(lone).st_nlink == 1


def test_a_save_over_generations_that_are_one_file_moves_them_and_leaves_no_link(pair: Pair) -> None:
    """A save killed after its rotation, before NAME is written anew, leaves NAME and NAME.1 one file; two such kills
    NAME, NAME.1 and NAME.2. rename(2) of one name of a file over another does nothing, so the next rotation kept
    NAME.1 where it was and left its .NAME.1.link (the root kill test's final rollback left one)."""
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    journal = pair.state / "journal.json"
    newest = journal.read_bytes()
    for older in ("journal.json.1", "journal.json.2"):
        (pair.state / older).unlink(missing_ok=True)
        os.link(journal, pair.state / older)
    assert pair.fresh()("rollback").code == 0  # restores, so it saves the journal
    assert not [f for f in os.listdir(pair.state) if f.startswith(".journal.json.")], os.listdir(pair.state)
    assert (pair.state / "journal.json.1").read_bytes() == newest  # the generation before this save
    assert os.stat(pair.state / "journal.json.1").st_nlink == 2  # NAME.2 holds the same one, no third name
    assert unseal(journal.read_bytes())["devices"] == {}
    assert pair.snap() == pair.originals


@pytest.mark.slow
def test_journal_truncated_at_every_offset_still_rolls_back(pair: Pair) -> None:
    """A save cut short at any byte: rollback restores every original recorded before that save, each time."""
    assert pair.run("apply", "-p", "p1").code == 0
    after_p1 = pair.snap()
    assert pair.fresh()("apply", "-p", "p2").code == 0
    damaged_save = (pair.state / "journal.json").read_bytes()
    first_save = (pair.state / "journal.json.1").read_bytes()
    saved_queues = [_files(q) for q in pair.queue_dirs()]
    after_p2 = pair.snap()
    assert after_p2["sdb"] != pair.originals["sdb"] and after_p1["sdb"] == pair.originals["sdb"]

    fell_back = 0
    for offset in _offsets(len(damaged_save)):
        for leftover in ("journal.json.damaged", "journal.json.2"):
            (pair.state / leftover).unlink(missing_ok=True)
        (pair.state / "journal.json.1").write_bytes(first_save)
        (pair.state / "journal.json").write_bytes(damaged_save[:offset])
        for files, queue in zip(saved_queues, pair.queue_dirs()):
            _put_back(queue, files)
        r = pair.fresh()("rollback")
        assert r.code == 0, (offset, r.err)
        now = pair.snap()
        # sda's originals were recorded by the first save: always back.
        assert now["sda"] == pair.originals["sda"], offset
        if "falling back" in r.err:
            fell_back += 1
            assert f"{pair.state / 'journal.json'} cannot be used" in r.err
            assert f"falling back to {pair.state / 'journal.json.1'} (generation 1" in r.err
            # sdb's originals were only in the save that was cut short: honestly lost, left as they were.
            assert now["sdb"] == after_p2["sdb"], offset
            assert (pair.state / "journal.json.damaged").read_bytes() == damaged_save[:offset]
        else:
            assert offset >= len(damaged_save) - 1, (offset, r.err)  # only the final newline may go unnoticed
            assert now == pair.originals
        assert unseal((pair.state / "journal.json").read_bytes())["devices"] == {}, offset
    offsets = len(_offsets(len(damaged_save)))
    assert fell_back >= offsets - 2
    print(f"\ntruncation: {offsets} offsets of a {len(damaged_save)}-byte journal, {fell_back} fell back to .1")


def test_a_hand_edit_is_caught_by_the_checksum(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    path = pair.state / "journal.json"
    path.write_text(path.read_text().replace('"read_ahead_kb": 8192', '"read_ahead_kb": 4096'))
    r = pair.fresh()("rollback", "--check")
    assert r.code == 0 and "its checksum does not match" in r.err and "falling back" in r.err
    doc = pair.fresh()("rollback", "--check", "--json").doc
    assert [w for w in doc["warnings"] if "falling back to" in w and "journal.json.1" in w], doc["warnings"]
    assert not (pair.state / "journal.json.damaged").exists()  # --check writes nothing
    assert pair.fresh()("rollback").code == 0
    assert pair.snap()["sda"] == pair.originals["sda"]
    assert pair.fresh()("rollback").err == ""  # the journal was rewritten: no warning the second time


def test_apply_after_a_fallback_heals_the_journal(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    (pair.state / "journal.json").write_bytes(b"")
    r = pair.fresh()("apply", "-p", "p1")
    assert r.code == 0 and "falling back" in r.err and "journal.json.1 (generation 1" in r.err
    assert unseal((pair.state / "journal.json").read_bytes())["generation"] == 2
    assert (pair.state / "journal.json.damaged").read_bytes() == b""
    assert pair.fresh()("apply", "-p", "p1").err == ""
    assert pair.fresh()("rollback").code == 0
    assert pair.snap()["sda"] == pair.originals["sda"]


@pytest.mark.parametrize("damaged", [("journal.json",), ("journal.json", "journal.json.1")])
def test_a_save_after_a_fallback_keeps_each_older_generation_once(pair: Pair, damaged: tuple[str, ...]) -> None:
    """The save after a fallback keeps the damaged NAME as NAME.damaged and moves the intact generations down to
    NAME.1 on. With NAME.1 intact, that renames NAME.1 and NAME.2 each onto itself, so those two must stay.
    `_move` would delete them: it unlinks the source whenever source and target are one file."""
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    assert pair.fresh()("rollback").code == 0
    older = {name: (pair.state / name).read_bytes() for name in ("journal.json.1", "journal.json.2")}
    for name in damaged:
        (pair.state / name).write_bytes(b"")
    r = pair.fresh()("apply", "-p", "p1")
    assert r.code == 0 and "falling back" in r.err, r.err
    assert (pair.state / "journal.json.damaged").read_bytes() == b""
    if len(damaged) == 1:  # fell back to NAME.1: both older generations stay where they are
        assert {name: (pair.state / name).read_bytes() for name in older} == older
    else:  # fell back to NAME.2: it becomes NAME.1, and the damaged NAME.1 is gone
        assert (pair.state / "journal.json.1").read_bytes() == older["journal.json.2"]
        assert not (pair.state / "journal.json.2").exists()
    assert not [f for f in os.listdir(pair.state) if f.startswith(".journal.json.")]
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals


def test_no_readable_generation_says_what_is_lost_and_how_to_start_over(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    (pair.state / "journal.json").write_text("{")
    (pair.state / "journal.json.1").write_bytes(b"\0" * 10)
    for argv in (("rollback",), ("apply", "-p", "p1")):
        writes = pair.tree.sysfs.writes
        r = pair.fresh()(*argv)
        assert_state_error(r, "no generation of", "journal.json: not valid JSON", "journal.json.1:",
                           "journal.json.2: missing", "lost", f"move {pair.state}/journal.json* aside")
        assert pair.tree.sysfs.writes == writes  # nothing applied without a journal to restore from
    for name in ("journal.json", "journal.json.1"):
        (pair.state / name).rename(pair.base / name)
    assert pair.fresh()("apply", "-p", "p1").code == 0  # starting over, as the hint says


def test_version_1_journal_is_still_read(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p2").code == 0
    current = unseal((pair.state / "journal.json").read_bytes())
    v1 = {"version": 1, "devices": {identity: {k: v for k, v in entry.items() if k != "changed_by"}
                                    for identity, entry in current["devices"].items()}}
    (pair.state / "journal.json").write_text(json.dumps(v1, indent=1, sort_keys=True) + "\n")
    assert not (pair.state / "journal.json.1").exists()
    assert pair.fresh()("apply", "-p", "p1").code == 0  # rewritten as version 2, the old file kept as .1
    assert json.loads((pair.state / "journal.json.1").read_text()) == v1
    assert unseal((pair.state / "journal.json").read_bytes())["version"] == JOURNAL_VERSION
    r = pair.fresh()("rollback")
    assert r.code == 0 and r.err == ""
    assert pair.snap() == pair.originals


def test_a_version_1_journal_with_a_bad_shape_falls_back_instead_of_crashing(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    (pair.state / "journal.json").write_text('{"version": 1, "devices": {"x": {"attributes": [1]}}}')
    r = pair.fresh()("rollback")
    assert r.code == 0 and "no 'attributes' object" in r.err
    assert pair.snap()["sda"] == pair.originals["sda"]


# --- state the administrator has to fix: exit 5 ------------------------------------------------

def _journal_dir(pair: Pair) -> None:
    (pair.state / "journal.json").mkdir(parents=True)


def _lock_dir(pair: Pair) -> None:
    (pair.state / "lock").mkdir(parents=True)


def _active_dir(pair: Pair) -> None:
    (pair.state / "active.json").mkdir(parents=True)


def _fifo(pair: Pair) -> None:
    pair.state.mkdir()
    os.mkfifo(pair.state / "journal.json")


def _newer(pair: Pair) -> None:
    pair.state.mkdir()
    (pair.state / "journal.json").write_text('{"version": 99, "devices": {}, "sha256": "x"}\n')


def _state_is_file(pair: Pair) -> None:
    pair.state.write_text("")


STATE_TABLE = {
    # case: (setup, commands that must exit 5, words the error must hold)
    "journal.json is a directory": (_journal_dir, [("apply", "-p", "p1"), ("rollback",)], "is a directory"),
    "lock is a directory": (_lock_dir, [("apply", "-p", "p1"), ("rollback",)], "lock"),
    "active.json is a directory": (_active_dir, [("apply", "-p", "p1"), ("verify",), ("status",)], "is a directory"),
    "journal.json is a named pipe": (_fifo, [("apply", "-p", "p1"), ("rollback", "--check")], "a named pipe"),
    "journal from a newer tunectl": (_newer, [("apply", "-p", "p1"), ("rollback",)], "newer tunectl"),
    "state directory is a file": (_state_is_file, [("apply", "-p", "p1"), ("rollback",)], "not a directory"),
}


@pytest.mark.parametrize("case", STATE_TABLE)
def test_unusable_state_exits_5_with_a_hint(pair: Pair, case: str) -> None:
    setup, commands, words = STATE_TABLE[case]
    setup(pair)
    for argv in commands:
        writes = pair.tree.sysfs.writes
        r = pair.fresh()(*argv)
        assert_state_error(r, words)
        assert pair.tree.sysfs.writes == writes, argv
        assert pair.fresh()(*argv, "--json").doc["ok"] is False
    assert pair.snap() == pair.originals


def _generation_dir(pair: Pair, name: str) -> None:
    (pair.state / name).mkdir()
    (pair.state / name / "kept").write_text("x")  # not empty: a directory renamed over it fails too


IN_THE_WAY = {
    # case: (what to do to the state after two saves, the name the error must give)
    "journal.json.2 is a directory": (lambda pair: _generation_dir(pair, "journal.json.2"), "journal.json.2"),
    "the rotation's link is a directory": (lambda pair: _generation_dir(pair, ".journal.json.1.link"),
                                           ".journal.json.1.link"),
    "journal.json.1 and .2 are directories": (
        lambda pair: ((pair.state / "journal.json.1").unlink(), _generation_dir(pair, "journal.json.1"),
                      _generation_dir(pair, "journal.json.2")), "journal.json.2"),
    "journal.json.1 is a directory, .2 a file": (  # ENOTDIR of a rename, which names no file on a path
        lambda pair: ((pair.state / "journal.json.1").rename(pair.state / "journal.json.2"),
                      _generation_dir(pair, "journal.json.1")), "journal.json.1"),
}


@pytest.mark.parametrize("case", IN_THE_WAY)
def test_a_directory_where_a_generation_goes_is_named_not_the_journal(pair: Pair, case: str) -> None:
    """A save moves NAME.1 to NAME.2 and links NAME as .NAME.1.link before renaming it over NAME.1: a directory at
    one of those names is what the error and its hint name, never the intact journal.json (moving that aside
    would lose its newest originals)."""
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0  # journal.json.1 exists: the next save moves it to .2
    setup, blocker = IN_THE_WAY[case]
    setup(pair)
    journal = (pair.state / "journal.json").read_bytes()
    r = pair.fresh()("rollback")
    assert_state_error(r, f"{pair.state / blocker} is a directory", f"hint: move {pair.state / blocker} aside",
                       "journal.json still holds the previous state")
    assert f"move {pair.state / 'journal.json'} aside" not in r.err and "on the way" not in r.err
    assert (pair.state / "journal.json").read_bytes() == journal
    (pair.state / blocker).rename(pair.base / "moved")
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals


def test_the_hold_temp_of_a_killed_bench_goes_at_the_next_lock(pair: Pair) -> None:
    """`tunectl bench` writes hold.json (atomic_write, under the lock) as it starts: SIGKILLed in that write, it
    leaves .hold.json.RANDOM, which the next run's lock takes like the journal's own; another name stays."""
    assert pair.run("apply", "-p", "p1").code == 0
    (pair.state / ".hold.json.0123456789ab").write_text("torn")
    (pair.state / ".hold.json.notes").write_text("mine")
    assert pair.fresh()("rollback").code == 0
    assert sorted(f for f in os.listdir(pair.state) if f.startswith(".hold")) == [".hold.json.notes"]


def _no_space(fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_fault_injected_exits_5_and_changes_nothing(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    before = pair.snap()
    journal = (pair.state / "journal.json").read_bytes()

    monkeypatch.setattr(state_module.os, "fsync", _no_space)
    r = pair.fresh()("apply", "-p", "p2")
    monkeypatch.undo()
    assert_state_error(r, "No space left on device", "it still holds the previous state", "free some space")
    assert pair.snap() == before  # the journal could not grow, so nothing was written
    assert (pair.state / "journal.json").read_bytes() == journal
    assert not [p for p in os.listdir(pair.state) if p.startswith(".")]  # no temp file left behind
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals


def test_unreadable_journal_exits_5(pair: Pair) -> None:
    """A real EACCES: as root, run tunectl without CAP_DAC_OVERRIDE; as a user, a mode-000 file is enough."""
    pair.state.mkdir()
    (pair.state / "journal.json").write_text('{"version": 1, "devices": {}}')
    os.chmod(pair.state / "journal.json", 0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv to drop CAP_DAC_OVERRIDE")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    r = run_process("--sysfs-root", str(pair.tree.root), "--state-dir", str(pair.state), "rollback", prefix=prefix)
    assert r.code == 5, r.err
    assert r.lines[0] == f"tunectl: error: cannot read {pair.state / 'journal.json'}: Permission denied"
    assert r.lines[1].startswith("hint: run as root, or check the owner and mode")


def test_detailed_exitcode_reports_any_error_as_1(pair: Pair) -> None:
    """Ansible reads 2 as 'changed': a bad state directory or a missing profile must not look like a change."""
    _journal_dir(pair)
    r = pair.fresh()("apply", "-p", "p1", "--detailed-exitcode")
    assert r.code == 1 and "is a directory" in r.err
    assert pair.fresh()("apply", "-p", "no-such-profile", "--detailed-exitcode").code == 1


def test_exit_5_is_documented_everywhere() -> None:
    from tunectl.cli import build_parser
    from tunectl.errors import ExitCode, StateError

    assert StateError("x").exit_code == ExitCode.STATE == 5
    assert "5 state directory unusable" in build_parser().epilog
    readme = (REPO / "README.md").read_text()
    assert "`5` the state directory cannot be used" in " ".join(readme.split())
    man = (REPO / "man" / "tunectl.8").read_text()
    assert ".B 5\nThe state directory cannot be used" in man


def test_a_damaged_active_profile_falls_back_and_apply_rewrites_it(pair: Pair) -> None:
    assert pair.run("apply", "-p", "p1").code == 0
    assert pair.fresh()("apply", "-p", "p2").code == 0
    (pair.state / "active.json").write_text('{"ref": "p2", "version": 2')
    r = pair.fresh()("verify")
    assert r.code == 1 and "active.json cannot be used" in r.err and "active.json.1 (generation 1" in r.err
    assert "profile: p1" in r.out  # the last intact record names p1: said, not hidden
    assert pair.fresh()("apply", "-p", "p2").code == 0
    r = pair.fresh()("verify")
    assert r.code == 0 and r.err == ""


def test_full_disk_after_the_writes_says_what_was_applied(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal fits, the active-profile record does not: the error must not claim nothing happened."""
    from tunectl.tuning import intent

    real = intent.save

    def no_space(state: state_module.StateStore, record: intent.Intent) -> None:
        monkeypatch.setattr(state_module.os, "fsync", _no_space)
        real(state, record)

    monkeypatch.setattr(intent, "save", no_space)
    r = pair.fresh()("apply", "-p", "p1")
    monkeypatch.undo()
    # Exit 3, not 5 (5 says nothing was applied): the writes happened, only the record is stale.
    assert r.code == 3 and "internal error" not in r.err, r.err
    assert "active.json: No space left on device" in r.err and "the settings were applied" in r.err
    assert "could not be saved" in r.err and "hint: " in r.err
    assert pair.fresh()("rollback").code == 0
    assert pair.snap() == pair.originals


ODD_VALUES = [None, True, 0, -1, 1.5, 1e308, 10**30, "abc", "", "none", "[bfq]", "mq-deadline", "\x00", "9" * 50]
ODD_NAMES = ["iosched/x", "../x", "../../etc/passwd", "scheduler", "read_ahead_kb", "rotational", "queue/x", "a/b/c",
             "iosched/../../x", "READ_AHEAD_KB", ""]


def test_hand_edited_version_1_journals_never_crash_rollback(pair: Pair) -> None:
    """Version 1 has no checksum: whatever a hand edit puts there, rollback exits 0, 3 or 5 and never
    writes outside the device's queue directory."""
    import random

    assert pair.run("apply", "-p", "p2").code == 0
    sealed = unseal((pair.state / "journal.json").read_bytes())
    rng = random.Random(9)
    codes: dict[int, int] = {}
    for case in range(int(os.environ.get("TUNECTL_JOURNAL_FUZZ", "150"))):
        journal = json.loads(json.dumps({"version": 1, "devices": sealed["devices"]}))
        for _ in range(rng.randint(1, 3)):
            entry = journal["devices"][rng.choice(sorted(journal["devices"]))]
            what = rng.choice(["value", "name", "snapshot", "device name"])
            if what == "value":
                entry["attributes"][rng.choice(sorted(entry["attributes"]) or ["read_ahead_kb"])] = rng.choice(ODD_VALUES)
            elif what == "name":
                entry["attributes"][rng.choice(ODD_NAMES)] = rng.choice(ODD_VALUES)
            elif what == "snapshot":
                entry["iosched_snapshot"] = {"scheduler": rng.choice(ODD_VALUES),
                                             "knobs": {rng.choice(["read_expire", "slice_idle", "../x"]): 1}}
            else:
                entry["name"] = rng.choice(["", "sdz", "../sda", 7])
        (pair.state / "journal.json").write_text(json.dumps(journal))
        for older in ("journal.json.1", "journal.json.2"):
            (pair.state / older).unlink(missing_ok=True)
        r = pair.fresh()("rollback")
        codes[r.code] = codes.get(r.code, 0) + 1
        assert r.code in (0, 3, 5) and "internal error" not in r.err, (case, r.err, journal)
        assert not (pair.tree.root / "block" / "x").exists() and not (pair.tree.root / "x").exists()
        pair.fresh()("apply", "-p", "p2")
    assert codes.get(5, 0) and codes.get(0, 0), codes  # both refused and restored journals were met


@pytest.mark.parametrize("raw, why", [
    (b'{"version": 1, "devices": {}, "x": ' + b"9" * 5000 + b"}", "a number far too long"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
])
def test_unseal_says_why_a_file_is_not_json_in_its_own_words(raw: bytes, why: str) -> None:
    from tunectl.system.state import _Damaged

    with pytest.raises(_Damaged, match=why) as e:
        unseal(raw)
    assert "set_int_max_str_digits" not in str(e.value)


@pytest.mark.parametrize("generation", ['"7"', "1.5", "true", "-3", "[1]", "null"])
def test_a_wrong_typed_generation_is_said_not_silently_read_as_0(pair: Pair, generation: str) -> None:
    assert pair.run("apply", "-p", "p2").code == 0
    current = unseal((pair.state / "journal.json").read_bytes())
    v1 = {"version": 1, "devices": {identity: {k: v for k, v in entry.items() if k != "changed_by"}
                                    for identity, entry in current["devices"].items()}}
    text = json.dumps(v1, indent=1, sort_keys=True)
    (pair.state / "journal.json").write_text(text[:-1] + f', "generation": {generation}}}\n')
    r = pair.fresh()("rollback", "--check")
    assert r.code == 0 and f"its generation {generation} is not a whole number: counted as 0" in r.err, r.err
    r = pair.fresh()("rollback")  # the values are still there to restore
    assert r.code == 0 and pair.snap() == pair.originals
