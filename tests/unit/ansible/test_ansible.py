"""The tunectl Ansible module and role, run by ansible-playbook against localhost.

On fake sysfs trees; the real loop devices are in tests/root/ansible/.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ansible_helpers import (
    COLLECTION,
    MODULES,
    REPO,
    ansible_tool,
    collections_path,
    module_tasks,
    needs_ansible,
    playbook,
    tunectl_wrapper,
)
from tests.harness import run_cli

pytestmark = [pytest.mark.ansible, needs_ansible]


def module_source(name: str, tmp: Path):
    """A module file of the collection, imported as Python (its module_utils through the collections path)."""
    sys.path.insert(0, str(collections_path(tmp)))
    try:
        spec = importlib.util.spec_from_file_location(f"tunectl_ansible_{name}", MODULES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(collections_path(tmp)))
    return mod


@pytest.mark.parametrize("name, returns", [
    ("tunectl", {"profile", "changes", "drift", "settings", "udev", "mounts", "alignment", "commands"}),
    ("tunectl_info", {"profile", "devices", "classes", "drift", "in_sync", "alignment", "commands"}),
])
def test_ansible_doc_renders_the_module_as_its_argument_spec(name, returns, tmp_path):
    doc_tool = ansible_tool("ansible-doc")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path(tmp_path)), ANSIBLE_NOCOLOR="1")
    fqcn = f"tunectl.tunectl.{name}"
    text = subprocess.run([doc_tool, fqcn], capture_output=True, text=True, timeout=120, env=env)
    assert text.returncode == 0, text.stderr
    for heading in ("OPTIONS", "EXAMPLES", "RETURN VALUES", "check_mode", "diff_mode", "REQUIREMENTS"):
        assert heading in text.stdout
    assert "[WARNING]" not in text.stderr and "ERROR" not in text.stderr, text.stderr
    as_json = subprocess.run([doc_tool, "-j", fqcn], capture_output=True, text=True, timeout=120, env=env)
    doc = json.loads(as_json.stdout)[fqcn]
    options = doc["doc"]["options"]
    spec = module_source(name, tmp_path).ARGUMENT_SPEC
    assert sorted(options) == sorted(spec)
    for option, want in spec.items():
        have = options[option]
        assert have["type"] == want["type"], option
        assert have.get("default") == want.get("default"), option
        assert have.get("choices") == want.get("choices"), option
        assert have.get("elements") == want.get("elements"), option
    assert set(doc["return"]) == returns
    assert f"{fqcn}:" in doc["examples"]


def test_role_defaults_and_argument_specs_agree():
    """Every variable in defaults/main.yml is in meta/argument_specs.yml with the same default, and is documented."""
    import yaml

    role = COLLECTION / "roles" / "tunectl"
    defaults_text = (role / "defaults" / "main.yml").read_text()
    defaults = yaml.safe_load(defaults_text)
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name
        if "choices" in options[name]:
            assert value in options[name]["choices"], name
        # a comment above each variable (or its group) in defaults/main.yml
        above = defaults_text.split(f"\n{name}:")[0].rstrip().splitlines()
        assert any(line.startswith("#") for line in above[-6:]), name


@pytest.mark.skipif(ansible_tool("ansible-lint") is None,
                    reason="ansible-lint not installed (scripts/bootstrap --test installs it)")
def test_ansible_lint_passes_the_collection_at_the_production_profile(tmp_path):
    lint = ansible_tool("ansible-lint")
    env = dict(os.environ, PATH=f"{Path(lint).parent}:{os.environ.get('PATH', '')}", NO_COLOR="1",
               XDG_CACHE_HOME=str(tmp_path / "cache"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_COLLECTIONS_PATH=str(collections_path(tmp_path)))
    done = subprocess.run([lint, "--offline", "--profile", "production"],
                          capture_output=True, text=True, env=env, cwd=COLLECTION, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failure(s), 0 warning(s)" in done.stdout + done.stderr


def fake_vars(tree, tmp: Path, **extra) -> dict:
    env = {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(REPO)}
    return dict({"tunectl_executable": str(tunectl_wrapper(tmp)), "tunectl_env": env}, **extra)


def test_bad_profile_fails_the_task_with_file_line_column(empty_fake_tree, tmp_path):
    empty_fake_tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nclasses:\n  ssd: {scheduler: foo, read_ahead_kb: 1024}\n")
    run = playbook(tmp_path, fake_vars(empty_fake_tree, tmp_path, tunectl_profile=str(bad)))
    assert run.rc == 2, run.text
    status, body = run.task("Tunectl state=applied")
    assert status == "fatal"
    assert f"{bad}:3:20: $.classes.ssd.scheduler: unknown scheduler 'foo'" in body
    assert "Traceback" not in run.text and "internal error" not in run.text
    assert (empty_fake_tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "128"


def test_check_mode_first_run_sees_the_shipped_profile_and_writes_nothing(empty_fake_tree, tmp_path):
    """Nothing installed yet: the role stages the new profile in a temporary file for the module, then removes it."""
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    staging = tmp_path / "tmpdir"
    staging.mkdir()
    profile = {"name": "first", "classes": {"ssd": {"read_ahead_kb": 1024}}}
    run = playbook(tmp_path, fake_vars(tree, tmp_path, tunectl_profile="first", tunectl_profile_content=profile,
                                       tunectl_profile_dir=str(tmp_path / "profiles")),
                   "--check", "--diff", TMPDIR=str(staging))
    assert run.rc == 0, run.text
    status, body = run.task("Tunectl state=applied")
    assert status == "changed"
    assert "sdb (sysfs queue)" in body and "-read_ahead_kb: 128\n" in body and "+read_ahead_kb: 1024\n" in body
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "128"
    assert not (tmp_path / "profiles").exists()
    assert run.task("Remove the profile staged")[0] == "changed" and os.listdir(staging) == []


def tunectl_stderr(env: dict, *argv: str) -> list[str]:
    """What tunectl itself prints on stderr for this command: the words the module must pass on."""
    r = run_cli(*argv, env=env)
    assert r.code != 0
    return r.lines


def test_module_bad_input_fails_with_tunectl_s_own_words(empty_fake_tree, tmp_path):
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    tree.add_disk("sdc", rotational=False, wwn="0x5002538e40a1b2c4", schedulers=("none", "mq-deadline"),
                  active="mq-deadline")
    env = {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    exe = str(tunectl_wrapper(tmp_path))
    good, garbage, kyber = (tmp_path / f"{n}.yaml" for n in ("good", "garbage", "kyber"))
    good.write_text("name: good\nclasses:\n  ssd: {read_ahead_kb: 1024}\n")
    garbage.write_bytes(b"name: [unclosed\n\x00\xff\n")
    kyber.write_text("name: kyber\ndevices:\n  - match: {kernel: sdc}\n    scheduler: kyber\n"
                     "    iosched: {read_lat_nsec: 2000000}\n")
    cases = [  # module arguments, failed?, words the message must hold
        ({"profile": str(good), "executable": "/nonexistent/tunectl"}, True,
         ["executable /nonexistent/tunectl does not exist or is not executable"]),
        ({"profile": str(good), "executable": "no-such-tunectl-here"}, True, ["no-such-tunectl-here not found on PATH"]),
        ({"profile": str(good), "devices": ["sdz"]}, True, tunectl_stderr(env, "apply", "-p", str(good), "sdz")),
        ({"profile": "no-such-profile"}, True, tunectl_stderr(env, "apply", "-p", "no-such-profile")),
        ({"profile": str(garbage)}, True, tunectl_stderr(env, "apply", "-p", str(garbage))),
        ({"profile": str(tmp_path)}, True, tunectl_stderr(env, "apply", "-p", str(tmp_path))),
        ({"profile": str(good), "state": "verified", "mounts": "fix"}, True, ["use mounts=check"]),
        ({"state": "applied"}, True, ["state is applied but all of the following are missing: profile"]),
        ({"state": "rolled_back", "alignment": "check"}, True, ["do not apply to state=rolled_back"]),
        ({"profile": str(good), "remount": True}, True, ["set mounts=fix"]),
        # a device item is never an option of tunectl's (it is passed after --, and refused before that)
        ({"profile": str(good), "devices": ["sdb", "--state-dir=/x"]}, True, ["'--state-dir=/x' is not a device"]),
        ({"state": "rolled_back", "devices": ["--remove-rules"]}, True, ["never starts with '-'"]),
        ({"profile": str(kyber)}, False, []),
    ]
    tasks = [{"name": f"case {i}", "tunectl": dict({"executable": exe}, **args)} for i, (args, _, _) in enumerate(cases)]
    # An unusable state directory (exit 5): a file where a directory should be.
    (tmp_path / "not-a-dir").write_text("")
    broken_env = dict(env, TUNECTL_STATE_DIR=str(tmp_path / "not-a-dir" / "state"))
    tasks.append({"name": "state", "environment": broken_env, "tunectl": {"state": "rolled_back", "executable": exe}})
    cases.append(({"state": "rolled_back"}, True,
                  tunectl_stderr(broken_env, "rollback") + ["hint: move ", "or point --state-dir"]))
    results = module_tasks(tmp_path, tasks, env)
    assert len(results) == len(cases)
    for (args, failed, words), result in zip(cases, results):
        assert bool(result.get("failed")) is failed, (args, result)
        for w in words:
            assert w.replace("tunectl: error: ", "") in result["msg"], (args, w, result["msg"])
        assert "Traceback" not in json.dumps(result) and "internal error" not in json.dumps(result), result
    kyber_result = results[-2]
    assert kyber_result["changed"] is False
    assert "sdc scheduler: unavailable: device offers none mq-deadline; none of kyber" in kyber_result["warnings"]
    assert "sdc iosched/read_lat_nsec: skip: not a knob of mq-deadline" in kyber_result["warnings"]


def test_argument_specs_reject_a_bad_variable_before_anything_runs(tmp_path):
    run = playbook(tmp_path, {"tunectl_state": "tuned", "tunectl_executable": "/nonexistent/tunectl"})
    assert run.rc == 2
    assert "tunectl_state" in run.stdout and "applied, verified, rolled_back" in run.stdout, run.stdout
    assert "Validating arguments against arg spec" in run.stdout


def build_wheel(tmp: Path) -> Path:
    """A wheel of this checkout, built from a copy (setuptools leaves build/ and egg-info beside the source)."""
    src, dist = tmp / "src", tmp / "dist"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "tests",
                                                            "benchmarks", "ansible"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w",
                    str(dist), str(src)], check=True, capture_output=True, timeout=300, cwd=tmp)
    (wheel,) = dist.glob("tunectl-*.whl")
    return wheel


def test_role_installs_tunectl_ships_a_profile_and_is_idempotent(empty_fake_tree, tmp_path):
    """pip into a virtualenv from a wheel, a profile from a variable, apply + verify; then all again: no change."""
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    venv = tmp_path / "venv"
    profile = {"name": "ansible-test", "description": "shipped from a role variable",
               "classes": {"ssd": {"scheduler": "mq-deadline", "read_ahead_kb": 1024, "iosched": {"fifo_batch": 8}}}}
    extra = {"tunectl_source": str(build_wheel(tmp_path)), "tunectl_virtualenv": str(venv), "tunectl_link": "",
             "tunectl_man_dir": str(tmp_path / "man"), "tunectl_unit_dir": str(tmp_path / "units"),
             "tunectl_python": sys.executable, "tunectl_profile": "ansible-test", "tunectl_profile_content": profile,
             "tunectl_profile_dir": str(tmp_path / "profiles"),
             "tunectl_env": {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
                             "TUNECTL_STATE_DIR": str(tmp_path / "state")}}
    first = playbook(tmp_path, extra)
    assert first.rc == 0, first.text
    assert first.task("Install tunectl into")[0] == "changed"
    assert (venv / "bin" / "tunectl").exists()
    # man and systemd find what pip left inside the virtualenv
    assert (tmp_path / "man" / "man8" / "tunectl.8").read_text() == (REPO / "man" / "tunectl.8").read_text()
    assert (tmp_path / "man" / "man5" / "tunectl-profile.5").exists()
    assert sorted(p.name for p in (tmp_path / "units").iterdir()) == sorted(p.name for p in (REPO / "udev").iterdir())
    assert first.task("Ship the profile as")[0] == "changed"
    assert first.task("Tunectl state=applied")[0] == "changed"
    assert first.task("Verify")[0] == "ok"
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "1024"
    assert (tree.root / "block/sdb/queue/iosched/fifo_batch").read_text().strip() == "8"
    shipped = tmp_path / "profiles" / "ansible-test.yaml"
    assert shipped.exists() and "fifo_batch: 8" in shipped.read_text()
    second = playbook(tmp_path, extra)
    assert second.rc == 0, second.text
    assert second.recap()["changed"] == 0, second.stdout


def test_info_module_reports_devices_classes_and_drift_and_writes_nothing(empty_fake_tree, tmp_path):
    tree = empty_fake_tree
    tree.add_disk("sdb", rotational=False, wwn="0x5002538e40a1b2c3", active="mq-deadline")
    tree.add_disk("sdc", rotational=True, wwn="0x5000c500a1b2c3d4", active="mq-deadline")
    env = {"TUNECTL_SYSFS_ROOT": str(tree.root), "TUNECTL_UDEV_ROOT": str(tree.udev_root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    profile = tmp_path / "deep.yaml"
    profile.write_text("name: deep\nclasses:\n  ssd: {read_ahead_kb: 1024}\n")
    exe = str(tunectl_wrapper(tmp_path))
    tasks = [{"tunectl_info": {"profile": str(profile), "executable": exe}},
             {"tunectl_info": {"profile": str(profile), "devices": ["sdc"], "executable": exe}},
             {"tunectl_info": {"profile": "no-such-profile", "executable": exe}}]
    drifting, other, missing = module_tasks(tmp_path, tasks, env, "--check")
    assert drifting["changed"] is False and not drifting.get("failed"), drifting
    assert drifting["classes"] == {"rotational": ["sdc"], "ssd": ["sdb"]}
    assert [d["name"] for d in drifting["devices"]] == ["sdb", "sdc"]
    assert [(d["device"], d["attribute"], d["before"], d["after"]) for d in drifting["drift"]] == \
        [("sdb", "read_ahead_kb", 128, 1024)]
    assert drifting["in_sync"] is False and drifting["profile"] == "deep"
    assert other["classes"] == {"rotational": ["sdc"]} and other["drift"] == [] and other["in_sync"] is True
    assert missing["failed"] is True
    assert tunectl_stderr(env, "status", "-p", "no-such-profile")[0].replace("tunectl: error: ", "") in missing["msg"]
    assert (tree.root / "block/sdb/queue/read_ahead_kb").read_text().strip() == "128"
