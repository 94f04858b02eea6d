"""A scheduler built as a module, through generated rules on a real systemd-udevd (root only).

This kernel has all four schedulers built in, so every loop device lists bfq. To
stand for a distribution kernel where bfq is a module (listed only once loaded),
the rendered file loses the rule that picks bfq from the device's list: what is left
is the rule that picks it because its module file exists. That proves on the real
daemon that the TEST on an absolute module path is taken, that the scheduler is
written and its knobs follow in the same event, that `tunectl verify` with the same
module tree agrees, and that with the file gone (another kernel booted) the rules
fall back to the next preference without writing a name the kernel cannot load.
The kernel's load-on-write itself (elv_iosched_store -> request_module) cannot be
exercised here: nothing is a module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import REPO, run_cli
from tests.loopdev import active_scheduler, sysfs_read, sysfs_write
from tests.udevd import ENV, Rules, Udevd, change, loops, udev_properties
from tunectl.profile.resolve import load_profile
from tunectl.udev.lint import lint
from tunectl.udev.render import render_rules

pytestmark = pytest.mark.root

ROOT = REPO
RELEASE = "6.1.0-13-amd64"
PROFILE = """\
name: udev-modules
classes:
  loop:
    scheduler: [bfq, mq-deadline]
    iosched: {low_latency: 0}
"""
LISTED_RULE = 'ATTR{queue/scheduler}=="*bfq*", ENV{TUNECTL_SCHEDULER}="bfq"'


def _cli(*argv: str, env: dict) -> tuple[int, str]:
    r = run_cli(*argv, env=env)
    return r.code, r.text


def test_module_scheduler_chosen_by_its_module_file_on_a_real_udevd(udevd: Udevd, rules: Rules, tmp_path: Path) -> None:
    tree = tmp_path / "modules"
    module = tree / RELEASE / "kernel" / "block" / "bfq.ko"
    module.parent.mkdir(parents=True)
    module.write_text("")
    (tree / RELEASE / "modules.dep").write_text("kernel/block/bfq.ko:\n")
    (tree / RELEASE / "modules.builtin").write_text("kernel/block/mq-deadline.ko\n")
    profile_path = tmp_path / "p.yaml"
    profile_path.write_text(PROFILE)
    scope = tmp_path / "scope"
    env = {**ENV, "TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_MODULES_ROOT": str(tree),
           "TUNECTL_KERNEL_RELEASE": RELEASE}
    # What `udev render` prints on that kernel, scoped to this test's loop devices.
    code, printed = _cli("udev", "render", "-p", str(profile_path), env=env)
    assert code == 0 and f'TEST=="{module}"' in printed, printed
    rendered = render_rules(load_profile(str(profile_path), [ROOT / "profiles"]), None,
                            only_loop_backing=f"{scope}/*.img", modules={"bfq": str(module)})
    assert lint(rendered.text) == []
    assert rendered.text.count(LISTED_RULE) == 1
    rules.write(rendered.text.replace(LISTED_RULE + "\n", ""))  # bfq as if not listed: only its module file offers it

    with loops(scope, 1, [None], rules) as (name,):
        sysfs_write(name, "queue/scheduler", "mq-deadline")
        change(name)
        assert active_scheduler(name) == "bfq"
        assert sysfs_read(name, "queue/iosched/low_latency") == "0"
        assert udev_properties(name)["TUNECTL_SCHEDULER"] == "bfq"
        code, out = _cli("verify", "-p", str(profile_path), name, "--json", env=env)
        assert code == 0 and json.loads(out)["in_sync"] is True, out

        # Another kernel booted: this release's module file is gone, so the rules take mq-deadline.
        module.unlink()
        sysfs_write(name, "queue/scheduler", "kyber")
        offset = udevd.log_size()
        change(name)
        assert active_scheduler(name) == "mq-deadline"
        props = udev_properties(name)
        assert props["TUNECTL_SCHEDULER"] == "mq-deadline"
        if udevd.log is not None:
            failed = [line for line in udevd.log_since(offset).splitlines() if "Failed" in line and "scheduler" in line]
            assert failed == []
