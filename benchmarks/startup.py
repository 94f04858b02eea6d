#!/usr/bin/env python3
"""Start-up: each command the VM tier runs, `tunectl --version` and a new machine's status and verify, beside
`python3 -c pass`, as ratios to it.

Run: .venv/bin/python benchmarks/startup.py [--runs 20] [--compare DIR] [--only WORD]
Whole processes in the installed environment (byte code kept), the commands rotating inside each round;
medians of wall and CPU time (user + system: less sensitive than wall to a shared machine's other work), and
each as a ratio to `python3 -c pass` measured in the same rounds (the interpreter's start is the floor; a TCG
guest of the VM tier is ~40x slower at both, so the ratio is what carries over). The cases:
  new machine  no state directory yet: status and verify on the shipped default profile, whose verdict
               ships with it (tunectl/profile/shipped.py): jsonschema is never imported
  checked      a profile of the user's, checked once (the state directory's validation cache)
  first check  the same profile with no state directory, so no validation cache: checked at every run, as
               each VM group's first command checks its own profile
  vm: ...      the commands the VM tier's guests run most, with --json as they do, on a fake tree (two loop
               devices, a partitioned HDD, an NVMe disk; the HDD's device node an image parted reads): apply
               after a rollback and rollback after an apply, so each changes values; udev install and remove
               of the rules, mounts check and fix of an fstab, align, explain (facts, no cold read)
`--compare DIR`: the same commands with the tunectl package of the checkout at DIR (a before/after in one run).
Targets: --version within 15 ms of the bare interpreter, verify under 150 ms.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, installed_env, rotated_medians, timed_cpu, tunectl_argv  # noqa: E402
from tests.fakesys import ALL_SCHEDULERS, FakeTree, scheduler_line  # noqa: E402

USER_PROFILE = "name: mine\ndescription: a profile of the user's\nclasses:\n  rotational: {read_ahead_kb: 1024}\n"
VM_PROFILE = """name: vm
description: the shape of the VM tier's profiles
classes:
  rotational: {scheduler: bfq, read_ahead_kb: 1024}
  nvme: {scheduler: kyber, read_ahead_kb: 512}
  loop: {scheduler: mq-deadline, read_ahead_kb: 4096}
mounts:
  - match: {mountpoint: '/srv/*'}
    options: [noatime]
"""
FSTAB = "/dev/sda1 /srv/data ext4 defaults 0 2\n/dev/nvme0n1 /srv/fast ext4 defaults,discard 0 2\n"

Case = tuple[list[str], dict[str, str]]


class VmTree:
    """The VM tier's commands on a fake tree of their own at `where`, and what each needs before it runs: an
    apply follows a rollback and a rollback an apply (so each changes values), an install a remove and a remove
    an install. A process writes a fake tree's scheduler file as a plain file ("bfq", no list): `prepare` puts
    the kernel's line back ("none mq-deadline kyber [bfq]") before the next command reads it."""

    def __init__(self, where: Path, tunectl: list[str], env: dict[str, str]) -> None:
        tree = FakeTree.create(where)
        for i in range(2):
            tree.add_loop(f"loop{i}", f"/img/{i}.img")
        tree.add_disk("sda", rotational=True, partitions=[(2048, 38912), (40960, 40960)])
        tree.add_disk("nvme0n1", bus="nvme")
        self.schedulers = [tree.devdir(name) / "queue" / "scheduler" for name in ("loop0", "loop1", "sda", "nvme0n1")]
        (where / "vm.yaml").write_text(VM_PROFILE)
        (where / "fstab").write_text(FSTAB)
        (where / "rules").mkdir()
        (where / "dev").mkdir()
        self.env = env | {"TUNECTL_STATE_DIR": str(where / "state"), "TUNECTL_DEV_ROOT": str(where / "dev")}
        base = [*tunectl, "--json", "--sysfs-root", str(tree.root), "--udev-root", str(tree.udev_root)]
        profile, rules = ["-p", str(where / "vm.yaml")], ["--rules-dir", str(where / "rules")]
        self.argv = {
            "apply": [*base, "apply", *profile],
            "rollback": [*base, "rollback"],
            "verify -p": [*base, "verify", *profile],
            "plan -p": [*base, "plan", *profile],
            "status --all": [*base, "status", "--all"],
            "udev install": [*base, "udev", "install", *profile, *rules],
            "udev remove": [*base, "udev", "remove", *rules],
            "mounts check": [*base, "mounts", "check", *profile, "--fstab", str(where / "fstab")],
            "mounts fix": [*base, "mounts", "fix", *profile, "--fstab", str(where / "fstab")],
            "explain --no-cold": [*base, "explain", "--no-cold", "sda"],
        }
        if shutil.which("parted"):  # align reads the table by parted: a GPT in an image file as sda's node
            image = where / "dev" / "sda"
            with open(image, "wb") as f:
                f.truncate(64 << 20)
            subprocess.run(["parted", "-s", str(image), "mklabel", "gpt", "mkpart", "a", "1MiB", "20MiB",
                            "mkpart", "b", "20MiB", "40MiB"], check=True, capture_output=True)
            self.argv["align sda"] = [*base, "align", "sda"]
        self.done = {"apply": False, "udev install": False}  # applied; rules installed
        # command -> what must be so before it (in this order; a rollback refuses while rules are installed),
        # and what it leaves
        self.needs = {"apply": [("udev install", False), ("apply", False)],
                      "rollback": [("udev install", False), ("apply", True)],
                      "udev install": [("udev install", False)], "udev remove": [("udev install", True)]}
        self.leaves = {"apply": ("apply", True), "rollback": ("apply", False), "udev install": ("udev install", True),
                       "udev remove": ("udev install", False)}
        self.makes = {("apply", True): "apply", ("apply", False): "rollback", ("udev install", True): "udev install",
                      ("udev install", False): "udev remove"}

    def cases(self) -> dict[str, Case]:
        return {k: (argv, self.env) for k, argv in self.argv.items()}

    def prepare(self, command: str) -> None:
        """Make the tree what `command` expects, untimed (`rotated_medians`'s `before`)."""
        self._kernel_lines()
        for state, wanted in self.needs.get(command, ()):
            if self.done[state] != wanted:
                timed_cpu(self.argv[self.makes[state, wanted]], self.env, ok=(0, 1))
                self.done[state] = wanted
                self._kernel_lines()
        if command in self.leaves:
            state, left = self.leaves[command]
            self.done[state] = left

    def _kernel_lines(self) -> None:
        for path in self.schedulers:
            text = path.read_text()
            if "[" not in text:
                path.write_text(scheduler_line(ALL_SCHEDULERS, text.strip()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--compare", metavar="DIR", help="also time the commands with the tunectl checkout at DIR")
    ap.add_argument("--only", metavar="WORD", help="only the cases whose name holds WORD (the interpreter always)")
    args = ap.parse_args()
    tunectl = tunectl_argv()
    python = str(Path(tunectl[0]).with_name("python")) if "/.venv/" in tunectl[0] else sys.executable
    with tempfile.TemporaryDirectory(prefix="tunectl-startup-") as tmp:
        profile = Path(tmp, "mine.yaml")
        profile.write_text(USER_PROFILE)
        # this checkout's tunectl, whatever the venv's editable install points at
        trees = {"": str(REPO), **({" [DIR]": os.path.abspath(args.compare)} if args.compare else {})}
        commands: dict[str, Case] = {"python -c pass": ([python, "-c", "pass"], installed_env())}
        before: dict[str, Callable[[], object]] = {}
        for n, (suffix, tree) in enumerate(trees.items()):
            new = installed_env(TUNECTL_STATE_DIR=os.path.join(tmp, f"never{n}"), PYTHONPATH=tree)
            checked = installed_env(TUNECTL_STATE_DIR=os.path.join(tmp, f"state{n}"), PYTHONPATH=tree)
            os.makedirs(checked["TUNECTL_STATE_DIR"], mode=0o755)
            cases = {
                "tunectl --version": ([*tunectl, "--version"], new),
                "status --all, new machine": ([*tunectl, "--json", "status", "--all"], new),
                "verify, new machine": ([*tunectl, "--json", "verify"], new),
                "verify -p mine.yaml, checked": ([*tunectl, "--json", "verify", "-p", str(profile)], checked),
                "verify -p mine.yaml, first check": ([*tunectl, "--json", "verify", "-p", str(profile)], new),
            }
            vm = VmTree(Path(tmp, f"vm{n}"), tunectl, installed_env(PYTHONPATH=tree))
            cases |= {f"vm: {k}": case for k, case in vm.cases().items()}
            before |= {f"vm: {k}{suffix}": functools.partial(vm.prepare, k) for k in vm.argv}
            commands |= {k + suffix: case for k, case in cases.items() if not args.only or args.only in k}
        for k, (argv, env) in commands.items():  # byte code written, the user's profile checked once: a later start
            if k in before:
                before[k]()
            timed_cpu(argv, env, ok=(0, 1))
        med = rotated_medians(commands, args.runs, ok=(0, 1), before=before)
        assert not os.path.exists(os.path.join(tmp, "never0")), "a read-only command created the state directory"
    base_wall, base_cpu = med["python -c pass"]
    print(f"start-up, medians of {args.runs} rounds, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          f"(interpreter: {python})" + (f"; DIR = {args.compare}" if args.compare else ""))
    print(f"  {'':<40} {'wall ms':>8} {'x pass':>6} {'over':>6}   {'CPU ms':>7} {'x pass':>6}")
    for k, (wall, cpu) in med.items():
        print(f"  {k:<40} {wall:8.1f} x{wall / base_wall:5.1f} {wall - base_wall:+6.0f}   "
              f"{cpu:7.1f} x{cpu / base_cpu:5.1f}")
    if "tunectl --version" in med:
        version = med["tunectl --version"][0]
        print(f"  --version over the interpreter: {version - base_wall:.1f} ms; target within 15 ms -> "
              f"{'met' if version - base_wall < 15 else 'MISSED'}")
    if "verify -p mine.yaml, checked" in med:
        verify = med["verify -p mine.yaml, checked"][0]
        print(f"  verify (checked profile): {verify:.1f} ms; target under 150 ms -> "
              f"{'met' if verify < 150 else 'MISSED'}")


if __name__ == "__main__":
    main()
