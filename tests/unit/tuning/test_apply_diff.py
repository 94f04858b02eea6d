"""`apply --check --diff` is a real unified diff: patch(1) applies it to a dump of the attributes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakesys import FakeTree
from tests.tuning_helpers import Tunectl

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) is not installed")


def _sysfs(tree: FakeTree, device: str, attribute: str) -> str:
    text = (tree.root / "block" / device / "queue" / attribute).read_text().strip()
    if attribute == "scheduler":
        active = re.search(r"\[([^\]]+)\]", text)
        return active.group(1) if active else "none"
    return text


def _dump(tree: FakeTree, settings: list[dict], into: Path) -> dict[str, str]:
    """DEV/queue with a line `attribute: value` per planned setting, read from the (fake) kernel."""
    files: dict[str, list[str]] = {}
    for s in sorted(settings, key=lambda s: (s["device"], s["attribute"])):
        path = tree.root / "block" / s["device"] / "queue" / s["attribute"]
        value = _sysfs(tree, s["device"], s["attribute"]) if path.exists() else "-"
        files.setdefault(s["device"], []).append(f"{s['attribute']}: {value}\n")
    for device, lines in files.items():
        (into / device).mkdir(parents=True)
        (into / device / "queue").write_text("".join(lines))
    return {device: "".join(lines) for device, lines in files.items()}


@pytest.mark.parametrize("profile", ["throughput-performance", "latency-performance", "desktop"])
def test_the_diff_patches_a_dump_to_the_planned_values(fake_tree: FakeTree, tmp_path: Path, profile: str) -> None:
    tun = Tunectl(fake_tree, tmp_path / "state")
    plan = tun("plan", "-p", profile, "--json").doc["settings"]
    r = tun("apply", "--check", "--diff", "-p", profile)
    assert r.code == 0 and r.out.startswith("--- a/"), r.out
    diff = r.out[:r.out.rindex("\n", 0, len(r.out) - 1) + 1]  # the summary line follows the diff
    assert set(re.findall(r"^\+\+\+ b/(\S+)/queue$", diff, re.M)) == {s["device"] for s in plan if s["status"] == "change"}

    dump = tmp_path / "dump"
    before = _dump(fake_tree, plan, dump)
    (tmp_path / "d.patch").write_text(diff)
    dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(tmp_path / "d.patch")], cwd=dump,
                         capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    done = subprocess.run(["patch", "-p1", "-s", "-i", str(tmp_path / "d.patch")], cwd=dump,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for s in plan:
        line = re.search(rf"^{re.escape(s['attribute'])}: (.*)$", (dump / s["device"] / "queue").read_text(), re.M)
        assert line is not None
        want = s["after"] if s["status"] == "change" else re.search(
            rf"^{re.escape(s['attribute'])}: (.*)$", before[s["device"]], re.M).group(1)
        assert line.group(1) == str(want), (s, line.group(1))


def _body(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if not line.startswith(("---", "+++", "diff "))]


def test_it_is_what_diff_u_prints_for_the_dumps_before_and_after_apply(fake_tree: FakeTree, tmp_path: Path) -> None:
    tun = Tunectl(fake_tree, tmp_path / "state")
    plan = tun("plan", "-p", "throughput-performance", "--json").doc["settings"]
    ours = tun("apply", "--check", "--diff", "-p", "throughput-performance").out
    _dump(fake_tree, plan, tmp_path / "a")
    assert tun("apply", "-p", "throughput-performance").code == 0
    _dump(fake_tree, plan, tmp_path / "b")
    real = subprocess.run(["diff", "-u", "-r", "a", "b"], cwd=tmp_path, capture_output=True, text=True)
    assert real.returncode == 1, real.stderr
    assert _body(real.stdout) == _body(ours.rsplit("\n", 2)[0] + "\n")
