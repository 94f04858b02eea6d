"""`tunectl udev monitor`: the event loop on a fake tree (the real udevd: tests/root/udev/)."""

from __future__ import annotations

import io
import json
import os
from argparse import Namespace
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, all_topologies
from tests.harness import check_documents, run_process
from tests.tuning_helpers import Tunectl
from tunectl.cli import Output
from tunectl.udev.cli import monitor
from tunectl.udev.monitor import BlockEvent

LOOP_PROFILE = """\
name: monitor-test
classes:
  ssd: {read_ahead_kb: 256}
  rotational: {scheduler: mq-deadline, read_ahead_kb: 4096}
"""


def _run(tree: FakeTree, tmp: Path, events: list, count: int | None = None, as_json: bool = True) -> tuple[int, str, str]:
    (tmp / "p.yaml").write_text(LOOP_PROFILE)
    tun = Tunectl(tree, tmp / "state")
    out, err = io.StringIO(), io.StringIO()
    args = Namespace(profile=str(tmp / "p.yaml"), count=count)
    code = monitor(tun.ctx, args, Output(out, err, as_json, False, 0, "udev-monitor"), events=events)
    if as_json and out.getvalue():
        check_documents(out.getvalue())
    return code, out.getvalue(), err.getvalue()


def test_one_json_object_per_event_with_drift_named(fake_tree: FakeTree, tmp_path: Path) -> None:
    events = [BlockEvent("add", "sda", 1), BlockEvent("change", "sdb", 2), BlockEvent("remove", "sda", 3),
              BlockEvent("add", "zram0", 4), BlockEvent("add", "sdz", 5)]
    code, out, err = _run(fake_tree, tmp_path, events)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(d["device"], d["action"]) for d in lines] == [("sda", "add"), ("sdb", "change"), ("zram0", "add"),
                                                            ("sdz", "add")]  # remove is not a tuning event
    sda, sdb, zram, gone = lines
    assert sda["status"] == "drift" and not sda["in_sync"]
    assert {d["attribute"] for d in sda["drift"]} >= {"read_ahead_kb"}
    assert all(d["device"] == "sda" for d in sda["drift"])
    assert sdb["status"] == "drift" and [d["after"] for d in sdb["drift"]] == [256]
    assert zram["status"] == "not-tuned" and zram["in_sync"]
    assert gone["status"] == "vanished"
    assert "following udev block events, profile monitor-test" in err


def test_in_sync_after_apply_and_count_stops_early(fake_tree: FakeTree, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(LOOP_PROFILE)
    tun = Tunectl(fake_tree, tmp_path / "state")
    assert tun("apply", "-p", str(tmp_path / "p.yaml"), "sda", "sdb").code == 0
    events = [BlockEvent("add", "sda"), BlockEvent("change", "sdb"), BlockEvent("change", "sda")]
    code, out, _ = _run(fake_tree, tmp_path, events, count=2, as_json=False)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert "sda" in lines[0] and "in sync (2 settings)" in lines[0]
    assert "sdb" in lines[1] and "in sync (1 setting)" in lines[1]


def test_a_count_past_sys_maxsize_is_until_the_events_end(fake_tree: FakeTree, tmp_path: Path) -> None:
    """islice refuses a stop past sys.maxsize: a typo'd --count 10**23 was "internal error", exit 70."""
    code, out, err = _run(fake_tree, tmp_path, [BlockEvent("add", "sda"), BlockEvent("add", "sdb")], count=10**23)
    assert code == 0
    assert [json.loads(line)["device"] for line in out.splitlines()] == ["sda", "sdb"]


def test_human_line_names_each_drifted_setting(fake_tree: FakeTree, tmp_path: Path) -> None:
    code, out, _ = _run(fake_tree, tmp_path, [BlockEvent("add", "sdb")], as_json=False)
    assert code == 0
    assert "sdb" in out and "drift: read_ahead_kb" in out and "-> 256" in out


@pytest.mark.parametrize("argv, code, message", [
    (["udev", "monitor", "--count", "0"], 2, "--count must be at least 1"),
    (["udev", "monitor", "--count", "x"], 2, "invalid int value"),
    (["udev", "monitor", "-p", "no-such-profile"], 2, "not found"),
])
def test_bad_input(fake_tree: FakeTree, tmp_path: Path, argv: list[str], code: int, message: str) -> None:
    result = Tunectl(fake_tree, tmp_path / "state")(*argv)
    assert result.code == code
    assert message in result.err
    assert "internal error" not in result.err and "Traceback" not in result.err


def test_a_fake_sysfs_root_is_refused_for_real_events(tmp_path: Path) -> None:
    tree = FakeTree.create(tmp_path)
    all_topologies(tree)
    env = {"PATH": os.environ.get("PATH", ""), "TUNECTL_SYSFS_ROOT": str(tree.root),
           "TUNECTL_STATE_DIR": str(tmp_path / "state")}
    done = run_process("udev", "monitor", env=env, timeout=60)
    assert done.code == 2 and "is not /sys" in done.err, done.err


def _event_report(status, drift=()):
    from tunectl.status import Verdict
    from tunectl.tuning.plan import Setting
    from tunectl.udev.monitor import EventReport

    settings = [Setting("sda", "id", "read_ahead_kb", 128, 256, "classes.ssd", Verdict(s)) for s in drift]
    return EventReport("T", BlockEvent("add", "sda", 7), "p", status, len(settings) or 2, settings,
                       "" if status in ("ok", "drift") else "why")


@pytest.mark.parametrize("verdict, word, in_sync, code, text, colour", [
    ("ok", "in-sync", True, 0, "in sync (2 settings)", None),
    ("drift", "drift", False, 1, "drift: read_ahead_kb 128 -> 256", "\x1b[33m"),
    ("not-tuned", "not-tuned", True, 0, "not tuned: why", None),
    ("vanished", "vanished", False, 0, "vanished: why", "\x1b[33m"),
])
def test_an_event_is_a_report_its_verdict_word_exit_code_and_colour(verdict, word, in_sync, code, text, colour) -> None:
    from tunectl.status import Verdict

    report = _event_report(Verdict(verdict), drift=["change"] if verdict == "drift" else ())
    assert report.exit_code == code  # what verify of the one device would say; the monitor itself exits 0
    for as_json, colour_on in ((True, False), (False, False), (False, True)):
        stdout = io.StringIO()
        out = Output(stdout, io.StringIO(), as_json, False, 0, "udev-monitor")
        out.colour = colour_on
        assert out.show(report, one_line=True) == code
        if as_json:
            assert stdout.getvalue().count("\n") == 1  # one JSON line per event: the stream's form
            doc = json.loads(stdout.getvalue())
            assert doc["status"] == word and doc["in_sync"] is in_sync and doc["format"] == "tunectl-udev-monitor"
            check_documents(stdout.getvalue())
        else:
            line = stdout.getvalue()
            assert text in line.replace("\x1b[33m", "").replace("\x1b[0m", "")
            assert ("\x1b[" in line) is (colour_on and colour is not None)  # coloured by the verdict alone
            if colour_on and colour:
                assert colour + text.split(":")[0].split(" (")[0] + "\x1b[0m" in line
