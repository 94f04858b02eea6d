"""The tunectl Ansible module and role on real loop devices: the kernel's own answers (root only)."""

from __future__ import annotations

import os

import pytest

from tests.ansible_helpers import REPO, module_tasks, needs_ansible, playbook, tunectl_wrapper
from tests.loopdev import active_scheduler, loop_devices, snapshot, sysfs_read, sysfs_write

pytestmark = [pytest.mark.root, pytest.mark.ansible, needs_ansible]


def test_module_fails_on_a_value_the_kernel_refuses_and_reports_what_it_wrote(tmp_path):
    with loop_devices(tmp_path, [{}]) as (loop,):
        profile = tmp_path / "poll.yaml"
        profile.write_text(f"name: poll\ndevices:\n  - match: {{kernel: {loop}}}\n    read_ahead_kb: 2048\n"
                           "    queue: {io_poll: 1}   # a loop device has no poll queues: EINVAL\n")
        env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
        task = {"tunectl": {"profile": str(profile), "devices": [loop], "executable": str(tunectl_wrapper(tmp_path))}}
        (result,) = module_tasks(tmp_path, [task], env)
        assert result["failed"] is True and result["changed"] is True, result  # read-ahead was written
        assert f"{loop} io_poll: writing 1 failed: " in result["msg"], result["msg"]
        assert sysfs_read(loop, "queue/read_ahead_kb") == "2048" and sysfs_read(loop, "queue/io_poll") == "0"
        assert [c["attribute"] for c in result["changes"]] == ["read_ahead_kb"]



LOOP_PROFILE = """\
name: ansible-loop
description: the loop devices of one test, by kernel name; nothing else on the machine matches
devices:
{entries}"""
LOOP_ENTRY = """\
  - match: {{kernel: {name}}}
    scheduler: mq-deadline
    read_ahead_kb: 1024
    iosched: {{fifo_batch: 8, front_merges: 0}}
"""


def test_role_on_loop_devices_apply_idempotent_check_diff_verify_persist_rollback(tmp_path):
    with loop_devices(tmp_path, [{"rotational": 0, "scheduler": "none"}, {"rotational": 1, "scheduler": "none"}]) as loops:
        originals = {n: snapshot(n) for n in loops}
        a, b = loops
        src = tmp_path / "ansible-loop.yaml"
        src.write_text(LOOP_PROFILE.format(entries="".join(LOOP_ENTRY.format(name=n) for n in loops)))
        rules_dir = tmp_path / "rules"
        rules_dir.mkdir()
        extra = {"tunectl_profile": "ansible-loop", "tunectl_profile_src": str(src),
                 "tunectl_profile_dir": str(tmp_path / "profiles"), "tunectl_devices": loops,
                 "tunectl_persist": True, "tunectl_rules_dir": str(rules_dir),
                 "tunectl_executable": str(tunectl_wrapper(tmp_path)),
                 "tunectl_env": {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}}

        first = playbook(tmp_path, extra, "--diff")
        assert first.rc == 0, first.text
        status, body = first.task("Tunectl state=applied")
        assert status == "changed"
        for name in loops:
            assert active_scheduler(name) == "mq-deadline"
            assert sysfs_read(name, "queue/read_ahead_kb") == "1024"
            assert sysfs_read(name, "queue/iosched/fifo_batch") == "8"
            assert sysfs_read(name, "queue/iosched/front_merges") == "0"
            assert f"{name} (sysfs queue)" in body
            assert f"-read_ahead_kb: {originals[name]['read_ahead_kb']}\n" in body and "+read_ahead_kb: 1024\n" in body
            assert "-scheduler: none\n" in body and "+scheduler: mq-deadline\n" in body
        rules = (rules_dir / "65-tunectl.rules").read_text()
        assert f'KERNEL!="{a}", GOTO' in rules and f'KERNEL!="{b}", GOTO' in rules
        assert f"+++ after: {rules_dir}/65-tunectl.rules" in body  # the new rules file, in the diff
        assert first.task("Verify")[0] == "ok"

        second = playbook(tmp_path, extra)
        assert second.rc == 0, second.text
        assert second.recap()["changed"] == 0, second.stdout

        sysfs_write(b, "queue/read_ahead_kb", "64")
        check = playbook(tmp_path, extra, "--check", "--diff")
        assert check.rc == 0, check.text
        status, body = check.task("Tunectl state=applied")
        assert status == "changed"
        assert f"{b} (sysfs queue)" in body and "-read_ahead_kb: 64\n+read_ahead_kb: 1024" in body
        assert f"{a} (sysfs queue)" not in body
        assert sysfs_read(b, "queue/read_ahead_kb") == "64"  # check mode wrote nothing
        assert check.task("Verify")[0] == "skipping"

        verified = playbook(tmp_path, dict(extra, tunectl_state="verified"))
        assert verified.rc == 2, verified.text
        status, body = verified.task("Tunectl state=verified")
        assert status == "fatal"
        assert f"drift: {b} read_ahead_kb is 64, profile wants 1024" in body
        assert sysfs_read(b, "queue/read_ahead_kb") == "64"

        back = playbook(tmp_path, dict(extra, tunectl_state="rolled_back"))
        assert back.rc == 0, back.text
        assert back.task("Tunectl state=rolled_back")[0] == "changed"
        assert {n: snapshot(n) for n in loops} == originals
        assert not (rules_dir / "65-tunectl.rules").exists()
        assert os.listdir(rules_dir) == []
