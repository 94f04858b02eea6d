"""The scope of the last apply: `apply -p P loop0 loop1`, then bare `verify`/`status` look at those two only."""

from __future__ import annotations

import json

import pytest

from tests.tuning_helpers import Tunectl, loop_machine
from tunectl.record import replace
from tunectl.tuning.intent import Intent

LOOPS = """\
name: loops
classes:
  loop: {read_ahead_kb: 1024}
"""
OTHER = """\
name: other
classes:
  loop: {read_ahead_kb: 2048}
"""


@pytest.fixture
def tunectl(empty_fake_tree, tmp_path):
    return loop_machine(empty_fake_tree, tmp_path, {"loops": LOOPS, "other": OTHER})


def _active(t: Tunectl) -> dict:
    return json.loads((t.ctx.state.dir / "active.json").read_text())


def _drifting(doc: dict) -> list[str]:
    return sorted({s["device"] for s in doc["settings"] if s["status"] in ("change", "unavailable")})


def test_bare_verify_and_status_use_the_last_applys_devices(tunectl) -> None:
    r = tunectl("apply", "-p", "loops", "loop0", "/dev/loop1", "--json")
    assert r.code == 0 and r.doc["changed"] is True
    assert _active(tunectl)["scope"] == ["loop:/srv/images/d0.img", "loop:/srv/images/d1.img"]

    v = tunectl("verify", "--json")
    assert v.code == 0 and v.doc["in_sync"] is True, v.out
    assert v.doc["scope"] == {"from": "last-apply", "devices": ["loop0", "loop1"],
                              "identities": ["loop:/srv/images/d0.img", "loop:/srv/images/d1.img"], "absent": []}
    assert {s["device"] for s in v.doc["settings"]} == {"loop0", "loop1"}
    human = tunectl("verify")
    assert human.code == 0
    assert "scope: loop0, loop1 (the devices the last apply of loops was limited to; --all for every device)" in human.out

    every = tunectl("verify", "--all", "--json")
    assert every.code == 1 and every.doc["scope"] is None
    assert _drifting(every.doc) == ["loop2", "loop3"]

    s = tunectl("status", "--json")
    assert s.code == 0 and s.doc["scope"]["devices"] == ["loop0", "loop1"]
    assert [d["name"] for d in s.doc["devices"]] == ["loop0", "loop1"]
    assert "scope: loop0, loop1" in tunectl("status").out
    s_all = tunectl("status", "--all", "--json")
    assert s_all.doc["scope"] is None and [d["name"] for d in s_all.doc["devices"]] == ["loop0", "loop1", "loop2", "loop3"]
    assert [d["name"] for d in s_all.doc["devices"] if d["drift"]] == ["loop2", "loop3"]


def test_drift_inside_the_scope_is_still_found(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0", "loop1")
    tunectl.tree.sysfs.write("block/loop1/queue/read_ahead_kb", "64")
    v = tunectl("verify", "--json")
    assert v.code == 1 and _drifting(v.doc) == ["loop1"]


def test_explicit_devices_win_over_the_scope(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0")
    v = tunectl("verify", "loop2", "--json")
    assert v.code == 1 and v.doc["scope"]["from"] == "arguments" and v.doc["scope"]["devices"] == ["loop2"]
    assert "scope:" not in tunectl("verify", "loop0").out  # DEV arguments say it themselves


def test_apply_without_devices_clears_the_scope(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0")
    assert "scope" in _active(tunectl)
    tunectl("apply", "-p", "loops")
    assert "scope" not in _active(tunectl)
    v = tunectl("verify", "--json")
    assert v.code == 0 and v.doc["scope"] is None and {s["device"] for s in v.doc["settings"]} == {
        "loop0", "loop1", "loop2", "loop3"}
    # The whole machine is tuned by this profile: a later limited apply of it does not narrow that.
    tunectl("apply", "-p", "loops", "loop1")
    assert "scope" not in _active(tunectl)


def test_limited_applies_of_one_profile_add_up_and_another_profile_starts_over(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0")
    tunectl("apply", "-p", "loops", "loop2")
    assert tunectl("verify", "--json").doc["scope"]["devices"] == ["loop0", "loop2"]
    tunectl("apply", "-p", "other", "loop3")
    v = tunectl("verify", "--json")
    assert v.doc["profile"] == "other" and v.doc["scope"]["devices"] == ["loop3"] and v.code == 0


def test_verify_against_another_profile_has_no_scope(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0")
    v = tunectl("verify", "-p", "other", "--json")
    assert v.doc["scope"] is None and _drifting(v.doc) == ["loop0", "loop1", "loop2", "loop3"]
    same = tunectl("verify", "-p", "loops", "--json")
    assert same.doc["scope"]["devices"] == ["loop0"]


def test_a_scoped_device_that_is_gone_is_named(tunectl) -> None:
    tunectl("apply", "-p", "loops", "loop0", "loop1")
    tunectl.tree.sysfs.vanish("loop1")
    v = tunectl("verify", "--json")
    assert v.code == 0 and v.doc["scope"]["devices"] == ["loop0"]
    assert v.doc["scope"]["absent"] == ["loop:/srv/images/d1.img"]
    assert "not present: loop:/srv/images/d1.img" in tunectl("verify").out


@pytest.mark.parametrize("record", [
    {"ref": "loops", "name": "loops", "files": None},  # written before scopes existed: no scope key
    {"ref": "loops", "name": "loops", "files": None, "scope": "loop0"},  # hand-edited: not a list
])
def test_records_without_a_usable_scope_mean_every_device(tunectl, record) -> None:
    tunectl("apply", "-p", "loops")
    old = dict(_active(tunectl))
    record = dict(record, files=old["files"])
    (tunectl.ctx.state.dir / "active.json").write_text(json.dumps(record))
    tunectl.tree.sysfs.write("block/loop3/queue/read_ahead_kb", "64")
    v = tunectl("verify", "--json")
    assert v.code == 1 and v.doc["scope"] is None and _drifting(v.doc) == ["loop3"]
    assert "internal error" not in v.err


@pytest.mark.parametrize("argv, code", [
    (["verify", "--all", "nosuch"], 2),
    (["status", "--all", "--json"], 0),
    (["verify", "--all", "-p", "nosuch-profile"], 2),
])
def test_bad_input(tunectl, argv, code) -> None:
    tunectl("apply", "-p", "loops", "loop0")
    r = tunectl(*argv)
    assert r.code == code, r.out + r.err
    assert "internal error" not in r.err and "Traceback" not in r.err


def test_scoped_record_rules() -> None:
    rec = Intent("p", "p", ("/p.yaml",))
    assert rec.scoped(None, None) == rec
    assert rec.scoped(None, ["b", "a"]) == replace(rec, scope=("a", "b"))
    assert rec.scoped(replace(rec, scope=("c",)), ["a"]) == replace(rec, scope=("a", "c"))
    assert rec.scoped(rec, ["a"]) == rec  # the profile already covers every device
    other = Intent("q", "q", ("/q.yaml",), scope=("c",))
    assert rec.scoped(other, ["a"]) == replace(rec, scope=("a",))
    assert rec.scoped(replace(rec, scope=("c",)), None) == rec
