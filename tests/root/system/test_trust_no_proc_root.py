"""Where /proc is not mounted, for real: a mount namespace of the test's own with an empty tmpfs over /proc (no
procfs there, as in a bare chroot). A tree's file is read, found again and compared with the look, and what is no
regular file still refused unopened; bench's reopen says /proc is missing. The unit tests fake the same
(tests/unit/system/test_trust_no_proc.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO

pytestmark = pytest.mark.root

IN_THE_NAMESPACE = """
import json, os, sys
from tunectl.errors import UsageError
from tunectl.system import blockio, trust

tree = sys.argv[1]
said = {"proc": os.path.exists("/proc/self/fd"), "read": {}}
for openat2 in (True, False):
    trust._openat2_missing = not openat2
    got = said["read"][str(openat2)] = []
    for rel in ("/etc/plain", "etc/rel", "/etc/fifo"):
        try:
            got.append(trust.read_in_root(tree, rel, 100).decode())
        except (OSError, trust.Untrusted) as e:
            got.append(f"{type(e).__name__}: {e}")
fd = os.open(os.path.join(tree, "etc/plain"), os.O_RDONLY)
try:
    blockio.reopen(fd, "t")
except UsageError as e:
    said["bench"] = e.message
print(json.dumps(said))
"""


def test_a_trees_file_is_read_where_proc_is_not_mounted(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "plain").write_text("plain\n")
    (tmp_path / "etc" / "rel").symlink_to("plain")
    os.mkfifo(tmp_path / "etc" / "fifo")  # an open of it by name would wait for a writer: the run's timeout
    no_proc = 'mount -t tmpfs -o mode=0555,size=64k tunectl-test-no-proc /proc && exec "$@"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", no_proc, "sh",
                           sys.executable, "-c", IN_THE_NAMESPACE, str(tmp_path)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout)
    assert said["proc"] is False  # the namespace has no procfs
    refused = "Untrusted: /etc/fifo: a named pipe, not a regular file"
    assert said["read"] == {"True": ["plain\n", "plain\n", refused], "False": ["plain\n", "plain\n", refused]}, said
    assert said["bench"] == "cannot open t again: /proc is not mounted (no /proc/self/fd)"
    assert os.path.exists("/proc/self/fd")  # this machine's /proc untouched
