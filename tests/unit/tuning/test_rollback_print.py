"""`rollback --print`: the shell lines that would restore the originals, in rollback's order; nothing is written."""

from __future__ import annotations

import re
import subprocess

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl, snapshot


def test_rollback_print_writes_nothing_and_its_lines_restore_the_originals(tmp_path) -> None:
    tree = FakeTree.create(tmp_path / "tree")
    tree.add_disk("sda", rotational=True, max_hw_sectors_kb=1280)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "x.yaml").write_text("name: x\nclasses:\n  rotational: {scheduler: bfq, read_ahead_kb: 64, "
                                           "queue: {rotational: 0}}\n")
    t = Tunectl(tree, tmp_path / "state", [tmp_path / "p"])
    original = snapshot(tree, "sda")
    assert t("apply", "-p", "x", "--json").code == 0
    tuned = snapshot(tree, "sda")
    journal = (tmp_path / "state" / "journal.json").read_bytes()

    r = t("rollback", "--print")
    assert r.code == 0
    assert snapshot(tree, "sda") == tuned and (tmp_path / "state" / "journal.json").read_bytes() == journal
    lines = [ln for ln in r.out.splitlines() if ln.startswith("echo ")]
    attrs = [re.search(r"/queue/(\S+)", ln).group(1) for ln in lines]
    assert attrs[0] == "scheduler" and attrs[-1] == "read_ahead_kb" and "rotational" in attrs
    assert f"echo 2560 > {tree.root}/block/sda/queue/read_ahead_kb\n" in r.out

    # The script as sh runs it, on a plain copy of the files: each line writes the original value.
    subprocess.run(["sh", "-c", r.out], check=True)
    assert snapshot(tree, "sda")["read_ahead_kb"] == original["read_ahead_kb"]
    assert snapshot(tree, "sda")["rotational"] == original["rotational"]
