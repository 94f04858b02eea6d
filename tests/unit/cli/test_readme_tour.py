"""The README's tour, run as written on a fake machine: it tunes the loop device it sets up and nothing else."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.fakesys import sata_hdd
from tests.harness import REPO
from tests.tuning_helpers import Tunectl, snapshot
from tunectl.udev import install as udev_commands


def tour_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## A five-minute tour", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_tour_starts_with_a_loop_device_and_a_profile_that_names_its_class() -> None:
    lines = tour_lines()
    assert "losetup" in lines[1] and lines[1].startswith("LOOP="), lines[:2]
    writes = [line for line in lines if re.search(r"\btunectl (apply|udev install|rollback)\b", line)]
    # every command that writes names the loop device, or acts on the scope the first apply left
    first_apply = next(i for i, line in enumerate(lines) if "tunectl apply" in line and "--check" not in line)
    assert "$LOOP" in lines[first_apply]
    assert all("$LOOP" in line or lines.index(line) > first_apply for line in writes), writes


def test_the_tour_run_on_a_fake_machine_leaves_the_other_disk_alone(empty_fake_tree, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    tree = empty_fake_tree
    sata_hdd(tree, "sda")  # the disk the OS runs from
    tree.add_loop("loop7", "/tmp/tour.img")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    calls: list[tuple[str, ...]] = []

    def udevadm(argv, timeout=60, check=True, input_text=None):
        from tunectl.system.runner import Completed

        calls.append(tuple(argv))
        return Completed(tuple(argv), 0, "252\n" if argv[1:] == ["--version"] else "", "")

    monkeypatch.setattr(udev_commands, "_euid", lambda: 0)
    rules = tmp_path / "rules.d"
    rules.mkdir()
    t = Tunectl(tree, tmp_path / "state", [profiles], env={"TUNECTL_EXECUTABLE": "/usr/sbin/tunectl"})
    t.ctx.run = udevadm
    sda = snapshot(tree, "sda")
    loop = snapshot(tree, "loop7")
    ran = []
    for line in tour_lines():
        if line.startswith("printf"):
            text = subprocess.run(["bash", "-c", line.split("|", 1)[0]], capture_output=True, text=True).stdout
            (profiles / "tour.yaml").write_text(text)
            continue
        if "tunectl " not in line or "udev monitor" in line:
            continue  # the shell's part, and a command that follows events until Ctrl-C
        argv = shlex.split(line.replace("$LOOP", "/dev/loop7"))
        argv = argv[argv.index("tunectl") + 1:]
        if argv[:2] == ["udev", "install"] or "--remove-rules" in argv:
            argv += ["--rules-dir", str(rules)] if argv[0] == "udev" else []
        r = t(*argv)
        assert r.code in (0, 1), (line, r.code, r.err)
        ran.append(argv[0])
        if argv[0] == "apply" and "--check" not in argv:
            assert snapshot(tree, "loop7")["read_ahead_kb"] == "1024"
    assert {"status", "plan", "apply", "verify", "udev", "rollback", "explain"} <= set(ran), ran
    assert snapshot(tree, "sda") == sda, "the tour changed the disk it does not name"
    assert snapshot(tree, "loop7") == loop, "the tour's rollback left the loop device tuned"
    assert [c for c in calls if c[:2] == ("udevadm", "trigger")] == [
        ("udevadm", "trigger", "--action=change", "--subsystem-match=block", "--property-match=DEVTYPE=disk",
         "--sysname-match=loop7")]
