"""A command reads each state file once and walks sysfs's block/ once, however many parts of it ask (#33)."""

from __future__ import annotations

import collections

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl
from tunectl.system import state as state_mod
from tunectl.system import sysfs as sysfs_mod


def test_verify_and_plan_read_the_record_and_journal_once_and_list_block_once_per_walk(
        empty_fake_tree: FakeTree, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(8):
        empty_fake_tree.add_loop(f"loop{i}", f"/img/{i}.img")
    (tmp_path / "p.yaml").write_text("name: b\nclasses:\n  loop:\n    scheduler: mq-deadline\n    read_ahead_kb: 4096\n")
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    assert t("apply", "-p", str(tmp_path / "p.yaml")).code == 0
    loads: collections.Counter[str] = collections.Counter()
    lists: collections.Counter[str] = collections.Counter()
    load_files, listdir = state_mod.StateStore._load_files, sysfs_mod.Sysfs.listdir

    def counting_load(self, name, *args):
        loads[name] += 1
        return load_files(self, name, *args)

    def counting_listdir(self, rel):
        lists[rel] += 1
        return listdir(self, rel)

    monkeypatch.setattr(state_mod.StateStore, "_load_files", counting_load)
    monkeypatch.setattr(sysfs_mod.Sysfs, "listdir", counting_listdir)
    assert t("plan", "-p", str(tmp_path / "p.yaml")).code == 0
    assert loads["active.json"] == 1 and lists["block"] <= 2, (loads, lists)  # was: 2 reads; 10 listings
    loads.clear()
    assert t("verify").code == 0
    assert loads["journal.json"] == 1 and loads["active.json"] <= 2, loads  # was: 8 and 5
    loads.clear()
    lists.clear()
    assert t("verify").code == 0 and loads["journal.json"] == 1, loads  # the next command reads afresh
    assert all(lists[f"block/loop{i}/slaves"] == 1 for i in range(8)), lists  # one graph a run


LOADED = """
import sys
from tunectl.cli import main
code = main(sys.argv[1:])
watched = [m for m in sys.modules if m.startswith(("tunectl.owners", "tunectl.udev"))
           or m in ("subprocess", "shutil", "yaml", "_hashlib", "datetime", "tunectl.tuning.adopt",
                    "tunectl.devices.stack", "tunectl.system.mountinfo", "tunectl.system.blockio",
                    "tunectl.system.blkid", "tunectl.system.hold", "typing", "tunectl.tuning.journal")]
print("loaded:", *sorted(watched))
sys.exit(code)
"""


def _modules_loaded(tree: FakeTree, tmp_path, scheduler: str):
    """Two fake loop devices, a profile setting `scheduler` and read_ahead_kb 4096 at tmp_path/p.yaml, and a
    function running tunectl on them that returns the watched modules (LOADED) the command loaded."""
    import subprocess
    import sys

    for i in range(2):
        tree.add_loop(f"loop{i}", f"/img/{i}.img")
    (tmp_path / "p.yaml").write_text(f"name: b\nclasses:\n  loop:\n    scheduler: {scheduler}\n    read_ahead_kb: 4096\n")
    base = ["--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root), "--state-dir", str(tmp_path / "state")]

    def loaded(*argv: str) -> set[str]:
        done = subprocess.run([sys.executable, "-c", LOADED, *base, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.splitlines()[-1].split()[1:])

    return loaded


def test_plan_and_apply_load_neither_the_owners_check_nor_udev_nor_subprocess_nor_shutil(
        empty_fake_tree: FakeTree, tmp_path) -> None:
    """Only status and verify show who set a value: plan and a no-op apply do not pay for the owners check's
    import, and no command that starts no program loads subprocess, nor shutil for argparse's width (#33, it got
    slower)."""
    loaded = _modules_loaded(empty_fake_tree, tmp_path, "mq-deadline")

    # The first apply checks the profile (jsonschema, PyYAML) before the state directory exists, the first plan
    # checks it again and keeps the verdict there; later runs find it and read the text by the plain reader: no
    # PyYAML, and no OpenSSL for the SHA-256 of the text.
    # No rules installed: nothing to adopt from them; the lock's and the journal's time stamps come from time.
    cached = {"yaml", "_hashlib", "datetime", "typing"}  # PyYAML's constructor imports datetime, jsonschema typing
    # Only what writes reads the journal (apply, rollback: tuning.changes): plan loads neither it nor its 4 records.
    journal = "tunectl.tuning.journal"
    assert loaded("apply", "-p", str(tmp_path / "p.yaml")) - cached <= {"shutil", journal}
    assert loaded("plan", "-p", str(tmp_path / "p.yaml")) - cached <= {"shutil"}
    assert loaded("plan", "-p", str(tmp_path / "p.yaml")) <= {"shutil"}
    assert loaded("apply", "-p", str(tmp_path / "p.yaml")) <= {"shutil", journal}  # a no-op now
    assert "tunectl.owners" in loaded("verify", "--json") and "tunectl.owners" in loaded("status", "-v")  # owners
    assert not {m for m in loaded("verify") | loaded("status") if m.startswith("tunectl.owners")}  # shown: none
    # Devices named, not paths: no Stack is built, no mount table read and no blkid run, so their modules (each
    # a few frozen dataclasses to create at import) stay unloaded; only verify and status read bench's hold.
    for argv in (("plan", "-p", str(tmp_path / "p.yaml")), ("apply", "-p", str(tmp_path / "p.yaml")), ("verify",)):
        assert not loaded(*argv) & {"tunectl.devices.stack", "tunectl.system.mountinfo", "tunectl.system.blockio",
                                    "tunectl.system.blkid"}, argv
    assert "tunectl.system.hold" not in loaded("plan", "-p", str(tmp_path / "p.yaml"))
    assert "tunectl.udev.lint" not in loaded("verify")  # the owners check reads rules files by udev.lines alone
    # typing is for the type checker (TYPE_CHECKING = False): its import is ~2.5 ms of every start
    for argv in (("plan", "-p", str(tmp_path / "p.yaml")), ("apply", "-p", str(tmp_path / "p.yaml")), ("verify",),
                 ("status",)):
        assert "typing" not in loaded(*argv), argv
    assert loaded("plan", "--help") == set()  # argparse's width without shutil (a fake tree's profile loads it)


def test_verify_after_an_apply_that_set_every_value_reads_no_other_writer_nor_the_hold(
        empty_fake_tree: FakeTree, tmp_path) -> None:
    """Every value verify --json shows was set by the apply (journalled) and is in sync: tunectl owns it whatever
    else writes it, so the other writers' parsers and files stay unread; no bench runs, so its hold's reader is
    not loaded either (#33, verify's share). A value tunectl did not set (status shows them) still reads them."""
    loaded = _modules_loaded(empty_fake_tree, tmp_path, "kyber")  # loops attach with mq-deadline: kyber is set

    assert "tunectl.owners" not in loaded("apply", "-p", str(tmp_path / "p.yaml"))  # kyber and 4096: both set
    skipped = {"tunectl.owners.collect", "tunectl.owners.sources", "tunectl.owners.writers", "tunectl.udev.lines",
               "tunectl.system.hold"}
    assert "tunectl.owners.model" in loaded("verify", "--json") and not loaded("verify", "--json") & skipped
    assert {"tunectl.owners.collect", "tunectl.owners.sources", "tunectl.owners.writers"} <= loaded("status", "--json")
