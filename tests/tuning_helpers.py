"""Running the real CLI in-process against a fake tree."""

from __future__ import annotations

from pathlib import Path

from tests.fakesys import FakeTree
from tests.harness import CliResult, run_cli
from tunectl.attributes import QUEUE
from tunectl.context import Context
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore

QUEUE_SNAPSHOT = tuple(QUEUE)  # every queue attribute tunectl may write: a rollback must restore them all


Result = CliResult  # the harness's one result type


class Tunectl:
    """`tunectl` bound to one fake tree and one state directory."""

    def __init__(self, tree: FakeTree, state_dir: Path, profile_dirs: list[Path] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.tree = tree
        self.ctx = Context(tree.sysfs, tree.udev, StateStore(state_dir), [*(profile_dirs or []), shipped_profile_dir()],
                           env or {})

    def __call__(self, *argv: str) -> CliResult:
        return run_cli(*argv, context=self.ctx)


def loop_machine(tree: FakeTree, tmp_path: Path, profiles: dict[str, str], loops: int = 4,
                 env: dict[str, str] | None = None) -> Tunectl:
    """`loops` fake loop devices (loop0.. backed by /srv/images/dN.img), the `profiles` (name -> text) in
    tmp_path/profiles, and `tunectl` over them with its state in tmp_path/state."""
    for i in range(loops):
        tree.add_loop(f"loop{i}", f"/srv/images/d{i}.img")
    (tmp_path / "profiles").mkdir()
    for name, text in profiles.items():
        (tmp_path / "profiles" / f"{name}.yaml").write_text(text)
    return Tunectl(tree, tmp_path / "state", [tmp_path / "profiles"], env)


def snapshot(tree: FakeTree, name: str) -> dict[str, str]:
    """Every attribute tunectl may manage, as the (fake) kernel shows it."""
    q = tree.root / "block" / name / "queue"
    snap = {}
    if (q / "scheduler").exists():
        snap["scheduler"] = (q / "scheduler").read_text().strip()
    for attr in QUEUE_SNAPSHOT:
        if (q / attr).exists():
            snap[attr] = (q / attr).read_text().strip()
    if (q / "iosched").is_dir():
        for knob in sorted(p.name for p in (q / "iosched").iterdir()):
            snap[f"iosched/{knob}"] = (q / "iosched" / knob).read_text().strip()
    return snap


def snapshot_all(tree: FakeTree) -> dict[str, dict[str, str]]:
    return {p.name: snapshot(tree, p.name) for p in sorted((tree.root / "block").iterdir())}
