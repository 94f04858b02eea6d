"""What one ansible-playbook run of the tunectl role costs (the unit of the Ansible tests' run time).

Runs the collection's site playbook (ansible/playbooks/site.yml) against localhost on a fake sysfs tree
(apply + verify, nothing to change after the first run) N times and prints the median wall and CPU time
of a run, and the machine's load.

    .venv/bin/python benchmarks/ansible_run.py [N]
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.ansible_helpers import REPO, ansible_tool, playbook, tunectl_wrapper  # noqa: E402
from tests.fakesys import FakeTree  # noqa: E402


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if ansible_tool("ansible-playbook") is None:
        sys.exit("ansible-playbook not installed: scripts/bootstrap --test")
    tmp = Path(tempfile.mkdtemp(prefix="tunectl-ansible-bench-"))
    try:
        tree = FakeTree.create(tmp / "fake")
        tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
        (tmp / "p.yaml").write_text("name: bench\nclasses:\n  ssd: {read_ahead_kb: 1024}\n")
        extra = {"tunectl_profile": str(tmp / "p.yaml"), "tunectl_executable": str(tunectl_wrapper(tmp)),
                 "tunectl_env": {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
                                 "TUNECTL_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(REPO)}}
        walls, cpus = [], []
        for _ in range(runs + 1):  # the first run writes; the timed ones find nothing to change
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            run = playbook(tmp, extra)
            wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
            if run.rc != 0:
                sys.exit(run.text)
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        walls, cpus = walls[1:], cpus[1:]
        print(f"role run (argument check, apply, verify; no change), {runs} runs: "
              f"wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}), "
              f"CPU median {statistics.median(cpus):.2f} s (min {min(cpus):.2f})")
        print("load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
