"""The scope of the last apply on real loop devices (root only): apply on two, the third drifts unseen."""

from __future__ import annotations

import json

import pytest

from tests.harness import run_cli
from tests.loopdev import loop_devices, sysfs_read, sysfs_write

pytestmark = pytest.mark.root

PROFILE = "name: scope-it\nclasses:\n  loop: {read_ahead_kb: 1024}\n"


def run(*argv: str, env: dict) -> tuple[int, str]:
    r = run_cli(*argv, env=env)
    return r.code, r.text


def test_verify_uses_the_scope_of_the_last_apply(tmp_path) -> None:
    (tmp_path / "p.yaml").write_text(PROFILE)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with loop_devices(tmp_path, [{}, {}, {}]) as (a, b, c):
        sysfs_write(c, "queue/read_ahead_kb", "64")  # never meant to be tuned: out of line with the profile
        code, out = run("apply", "-p", str(tmp_path / "p.yaml"), a, f"/dev/{b}", "--json", env=env)
        assert code == 0 and json.loads(out)["changed"] is True, out
        assert sysfs_read(a, "queue/read_ahead_kb") == sysfs_read(b, "queue/read_ahead_kb") == "1024"
        assert sysfs_read(c, "queue/read_ahead_kb") == "64"

        code, out = run("verify", "--json", env=env)
        doc = json.loads(out)
        assert code == 0 and doc["in_sync"] is True, out
        assert doc["scope"]["from"] == "last-apply" and doc["scope"]["devices"] == [a, b]  # identity order
        assert doc["scope"]["identities"] == sorted(f"loop:{tmp_path}/loop{i}.img" for i in (0, 1))
        assert c not in {s["device"] for s in doc["settings"]}
        code, out = run("verify", env=env)
        assert code == 0 and "scope: " in out and "--all for every device" in out, out

        code, out = run("verify", "--all", "--json", env=env)
        doc = json.loads(out)
        assert code == 1 and doc["scope"] is None
        drift = {(s["device"], s["attribute"], s["before"]) for s in doc["settings"] if s["status"] == "change"}
        assert (c, "read_ahead_kb", 64) in drift
        assert not {d for d, _, _ in drift} & {a, b}

        code, out = run("status", "--json", env=env)
        assert code == 0 and sorted(d["name"] for d in json.loads(out)["devices"]) == sorted([a, b])
