"""The Ansible role run twice against a fake tree: changed, then not."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAYBOOK = REPO / "ansible" / "site.yml"

PROFILE = """\
name: ansible-test
classes:
  ssd: {scheduler: mq-deadline, read_ahead_kb: 1024, iosched: {fifo_batch: 8}}
"""


def playbook() -> str | None:
    found = shutil.which("ansible-playbook") or str(Path(sys.executable).with_name("ansible-playbook"))
    return found if os.path.exists(found) else None


@pytest.mark.skipif(playbook() is None, reason="ansible-playbook not installed (scripts/bootstrap --test installs it)")
def test_role_is_idempotent(empty_fake_tree, tmp_path):
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    (tmp_path / "p.yaml").write_text(PROFILE)
    # The role runs tunectl_bin with argv: a wrapper runs this checkout's tunectl.
    wrapper = tmp_path / "tunectl"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m tunectl \"$@\"\n")
    wrapper.chmod(0o755)
    extra = {"tunectl_bin": str(wrapper), "tunectl_profile": str(tmp_path / "p.yaml"),
             "tunectl_env": {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
                             "TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}}
    argv = [playbook(), "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(extra)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)

    def recap(extra_args: list[str] = ()) -> dict[str, int]:
        proc = subprocess.run(argv + list(extra_args), capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        line = re.search(r"localhost\s*:\s*(.*)", proc.stdout.split("PLAY RECAP")[-1]).group(1)
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}

    assert recap(["--check"])["changed"] == 1
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "128"  # check mode wrote nothing
    assert recap()["changed"] == 1
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "1024"
    assert recap()["changed"] == 0
