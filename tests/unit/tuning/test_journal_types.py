"""The journal and the record of intent as types: one `from_json` that checks and upgrades, one `to_json`."""

from __future__ import annotations

import json

import pytest

from tunectl.tuning.intent import Intent, IntentError, Rules
from tunectl.tuning.journal import ChangedBy, Journal, JournalEntry, JournalError

V1_ENTRY = {"name": "sda", "attributes": {"scheduler": "bfq", "read_ahead_kb": 128, "iosched/slice_idle": 8},
            "iosched_snapshot": {"scheduler": "bfq", "knobs": {"low_latency": 1, "slice_idle": 8}}}
CURRENT_ENTRY = {"name": "sdb", "attributes": {"read_ahead_kb": 256},
                 "iosched": {"mq-deadline": {"read_expire": 500}},
                 "changed_by": {"read_ahead_kb": {"profile": "p", "tunectl": "1.0", "at": "2026-01-01T00:00:00Z"},
                                "nr_requests": {"profile": "p", "tunectl": "1.0", "at": "2026-01-01T00:00:00Z",
                                                "via": "read_ahead_kb"}},
                 "loop": {"backing": "254:0:77", "devnum": "7:0"}}


def test_a_current_journal_reads_and_writes_back_the_same() -> None:
    data = {"devices": {"wwn:0x1": CURRENT_ENTRY}}
    journal = Journal.from_json(json.loads(json.dumps(data)))
    assert journal.to_json() == data
    entry = journal.get("wwn:0x1")
    assert entry is not None and entry.changed_by["nr_requests"] == ChangedBy("p", "1.0", "2026-01-01T00:00:00Z",
                                                                              "read_ahead_kb")


def test_version_1_is_upgraded_once_on_read_and_restores_the_same_knobs() -> None:
    """The v1 snapshot's scheduler gets its knobs per scheduler (with the knobs v1 kept among the attributes);
    another scheduler still gets the attribute knobs, as before the upgrade."""
    journal = Journal.from_json({"devices": {"serial:X": V1_ENTRY}})
    entry = journal.get("serial:X")
    assert entry is not None and entry.iosched == {"bfq": {"low_latency": 1, "slice_idle": 8}}
    assert entry.original_knobs("bfq") == {"iosched/low_latency": 1, "iosched/slice_idle": 8}
    assert entry.original_knobs("mq-deadline") == {"iosched/slice_idle": 8}
    written = journal.to_json()
    assert "iosched_snapshot" not in written["devices"]["serial:X"]
    assert Journal.from_json(written) == journal  # the upgrade is done: reading it again changes nothing


def test_a_version_1_snapshot_of_no_real_scheduler_is_not_kept_as_a_key_that_would_not_read_back() -> None:
    entry = dict(V1_ENTRY, iosched_snapshot={"scheduler": "[bfq]", "knobs": {"slice_idle": 8}})
    journal = Journal.from_json({"devices": {"serial:X": entry}})
    assert Journal.from_json(journal.to_json()) == journal
    assert journal.get("serial:X").iosched == {}


@pytest.mark.parametrize(("data", "why"), [
    ({"devices": []}, "no 'devices' object"),
    ({"devices": {"x": {"attributes": [1]}}}, "no 'attributes' object"),
    ({"devices": {"x": {"attributes": {"../x": 1}}}}, "not a queue attribute"),
    ({"devices": {"x": {"attributes": {"read_ahead_kb": "a\nb"}}}}, "no sysfs attribute holds"),
    ({"devices": {"x": {"attributes": {"read_ahead_kb": True}}}}, "no sysfs attribute holds"),
    ({"devices": {"x": {"attributes": {"read_ahead_kb": 1.5}}}}, "no sysfs attribute holds"),
    ({"devices": {"x": {"attributes": {"read_ahead_kb": float("nan")}}}}, "no sysfs attribute holds"),
    ({"devices": {"x": {"attributes": {"read_ahead_kb": 10 ** 30}}}}, "no sysfs attribute holds"),
    ({"devices": {"x": {"attributes": {}, "iosched": {"bfq": {"slice_idle": False}}}}}, "scheduler knobs"),
    ({"devices": {"x": {"attributes": {}, "iosched": {"Bad!": {}}}}}, "scheduler knobs"),
    ({"devices": {"x": {"attributes": {}, "changed_by": []}}}, "'changed_by'"),
    ({"devices": {"x": {"name": "sda\ntunectl: note: all clear", "attributes": {}}}}, "not a kernel name"),
    ({"devices": {"x": {"name": "../sda", "attributes": {}}}}, "not a kernel name"),
    ({"devices": {"x": {"name": "sd\x1b[2Ja", "attributes": {}}}}, "not a kernel name"),
])
def test_what_rollback_cannot_use_is_refused_with_the_reason(data: dict, why: str) -> None:
    with pytest.raises(JournalError, match=why):
        Journal.from_json(data)


def test_the_types_are_immutable_and_a_change_is_a_new_journal() -> None:
    journal = Journal.from_json({"devices": {"wwn:0x1": CURRENT_ENTRY}})
    with pytest.raises(AttributeError):
        journal.devices = {}  # type: ignore[misc]
    grown = journal.with_entry("wwn:0x2", JournalEntry("sdc", {"read_ahead_kb": 128}))
    assert grown != journal and "wwn:0x2" not in journal and grown.without(["wwn:0x2"]) == journal


def test_the_record_of_intent_reads_and_writes_back_the_same() -> None:
    data = {"ref": "/etc/tunectl/profiles/p.yaml", "name": "p", "files": ["/etc/tunectl/profiles/p.yaml"],
            "path": "/etc/tunectl/profiles/p.yaml", "profile_sha256": "ab" * 32, "scope": ["loop:/a.img"],
            "rules": {"path": "/etc/udev/rules.d/65-tunectl.rules", "ref": "p", "name": "p", "profile_sha256": None,
                      "digest": "sha256:00", "scope": ["loop:/a.img"]}}
    record = Intent.from_json(json.loads(json.dumps(data)))
    assert record is not None and record.to_json() == data
    assert record.rules == Rules("/etc/udev/rules.d/65-tunectl.rules", "p", "p", None, "sha256:00", ("loop:/a.img",))
    assert Intent.from_json({"applied": False}) is None  # a full rollback cleared it
    with pytest.raises(IntentError, match="names no profile"):
        Intent.from_json({"name": "p"})
    # Hand edits that never stopped a command: a scope that is no list means every device, rules without a file none.
    edited = Intent.from_json(dict(data, scope="loop:/a.img", rules={"ref": "p"}))
    assert edited is not None and edited.scope is None and edited.rules is None


def test_bench_snapshots_are_journals_of_the_current_form(empty_fake_tree, tmp_path) -> None:
    """bench's snapshot (what it restores after a sweep) is a current journal: knobs per scheduler, not the
    version-1 snapshot."""
    from tunectl.bench import stack as stacking
    from tunectl.bench.runner import snapshot
    from tunectl.context import Context
    from tunectl.profile.library import shipped_profile_dir
    from tunectl.system.state import StateStore

    empty_fake_tree.add_disk("sdx", schedulers=("none", "mq-deadline", "bfq"), active="bfq")
    ctx = Context(empty_fake_tree.sysfs, empty_fake_tree.udev, StateStore(tmp_path / "state"),
                  [shipped_profile_dir()], {"TUNECTL_DEV_ROOT": "/nonexistent/dev"})
    journal = snapshot(ctx, stacking.resolve(ctx, "sdx"))
    (identity, entry), = journal.to_json()["devices"].items()
    assert "iosched_snapshot" not in entry and set(entry["iosched"]) == {"bfq"} and entry["iosched"]["bfq"]
    assert entry["attributes"]["scheduler"] == "bfq"
    assert Journal.from_json(journal.to_json()) == journal


@pytest.mark.parametrize("key, value", [("profile_sha256", 5), ("profile_sha256", ["ab"]), ("path", {"p": 1})])
def test_a_record_whose_profile_check_is_not_text_is_damaged_not_unchecked(key: str, value: object) -> None:
    """A hash or path of another type was read as "none recorded", and the profile's file was used unchecked."""
    with pytest.raises(IntentError, match=key):
        Intent.from_json({"ref": "/etc/tunectl/profiles/p.yaml", "name": "p", "files": None, key: value})
    assert Intent.from_json({"ref": "default", "name": "default", "files": None, key: None}) is not None
