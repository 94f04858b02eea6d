"""preload's words for a file (why it was passed over, how much of it is cached) are verdicts of the one vocabulary
(tunectl.status: PRELOAD_SKIPS, RESIDENCY): the JSON keeps its words, a table colours a status by its verdict."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from tests.preload_helpers import GOOD_HEADER, assert_clean, make_files, tunectl
from tunectl.preload.show import FileResidency
from tunectl.preload.skip import Skip, failed
from tunectl.preload.text import skips
from tunectl.status import PRELOAD_SKIPS, RESIDENCY, Verdict

RED, YELLOW, RESET = "\x1b[31m", "\x1b[33m", "\x1b[0m"


def test_the_skip_and_residency_words_are_verdicts_with_their_json_words_unchanged() -> None:
    assert failed("/x", errno.ENOENT).status is Verdict.VANISHED
    assert failed("/x", errno.ENOTDIR).status is Verdict.VANISHED
    assert failed("/x", errno.EACCES).status is Verdict.UNREADABLE
    assert [str(v) for v in PRELOAD_SKIPS] == ["vanished", "changed", "unreadable"]
    assert [str(v) for v in RESIDENCY] == ["resident", "partial", "cold", "unknown"]
    doc = json.loads(json.dumps([Skip("/x", Verdict.UNREADABLE, "r").to_json(),
                                 FileResidency("/y", Verdict.COLD, 1, 0).to_json()]))
    assert [d["status"] for d in doc] == ["unreadable", "cold"]
    # the colour rule: a failure red, what differs from the wanted state yellow, the expected rest plain
    assert [v.colour for v in PRELOAD_SKIPS] == ["yellow", None, "red"]
    assert [v.colour for v in RESIDENCY] == [None, "yellow", "yellow", None]


def test_a_skip_table_colours_the_status_by_its_verdict_only_when_asked() -> None:
    rows = [Skip("/gone", Verdict.VANISHED, "No such file"), Skip("/new", Verdict.CHANGED, "size 1 -> 2"),
            Skip("/long", Verdict.UNREADABLE, "File name too long")]
    (plain,) = skips(rows, verbose=1)
    assert "\x1b[" not in plain
    (painted,) = skips(rows, verbose=1, paint=True)
    assert YELLOW + "vanished" + RESET in painted and RED + "unreadable" + RESET in painted
    assert "changed" in painted and "\x1b[" not in [line for line in painted.splitlines() if "/new" in line][0]
    # a path that reads like a verdict word is not coloured: the colour comes from the verdict, not the text
    (named,) = skips([Skip("unreadable", Verdict.CHANGED, "x")], verbose=1, paint=True)
    assert "\x1b[" not in named


def _list_with_a_gone_and_an_unreadable_file(tmp_path: Path) -> tuple[Path, Path]:
    good, gone = make_files(tmp_path, {"good": 10, "gone": 10})
    st = good.stat()
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    rows = [[str(good), device, st.st_ino, 10, st.st_mtime_ns, [[0, 10]], None],
            [str(gone), device, gone.stat().st_ino, 10, gone.stat().st_mtime_ns, [[0, 10]], None],
            [str(tmp_path / ("n" * 300)), device, 1, 10, 0, [[0, 10]], None]]  # ENAMETOOLONG: unreadable
    gone.unlink()
    lst = tmp_path / "set.list"
    lst.write_text(GOOD_HEADER + "\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    return lst, good


def test_replay_and_show_colour_a_file_by_its_verdict_and_keep_their_words_and_exit_codes(tmp_path: Path) -> None:
    lst, good = _list_with_a_gone_and_an_unreadable_file(tmp_path)
    r = tunectl("--color", "always", "preload", "replay", str(lst))
    assert_clean(r)
    assert r.code == 3, r.err  # unreadable: a partial failure
    assert RED + "unreadable" + RESET in r.out and YELLOW + "vanished" + RESET in r.out
    doc = tunectl("preload", "replay", str(lst), "--json").doc
    assert sorted(s["status"] for s in doc["skipped"]) == ["unreadable", "vanished"]
    shown = tunectl("--color", "always", "preload", "show", "-v", str(lst))
    assert_clean(shown)
    assert RED + "unreadable" + RESET in shown.out and YELLOW + "vanished" + RESET in shown.out
    line = next(line for line in shown.out.splitlines() if str(good) in line)
    word = next(v for v in RESIDENCY if str(v) in line)  # resident, or cold if the host dropped it already
    assert (YELLOW + str(word) + RESET in line) is (word.colour == "yellow"), line
    never = tunectl("--color", "never", "preload", "show", "-v", str(lst))
    assert "\x1b[" not in never.out
    by_status = tunectl("preload", "show", str(lst), "--json").doc["by_status"]
    assert by_status["vanished"] == 1 and by_status["unreadable"] == 1


def test_a_replay_that_skips_more_than_it_lists_counts_every_skip(tmp_path: Path, monkeypatch) -> None:
    # A list of 300,000 vanished files said "skipped 10000 files (10000 vanished)": the text counted the skips the
    # report keeps one by one (MAX_SKIPS), not every skip (--json's skipped_by_status had 300000).
    from tunectl.preload import replay

    monkeypatch.setattr(replay, "MAX_SKIPS", 25)
    (anchor,) = make_files(tmp_path, {"anchor": 10})
    st = anchor.stat()
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    rows = [[str(tmp_path / f"gone{i}"), device, 10 + i, 10, 0, [[0, 10]], None] for i in range(40)]
    lst = tmp_path / "gone.list"
    lst.write_text(GOOD_HEADER + "\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    r = tunectl("preload", "replay", str(lst))
    assert_clean(r)
    assert r.code == 0 and "skipped 40 files (40 vanished); -v lists the first 25\n" in r.out, r.out
    listed = tunectl("-v", "preload", "replay", str(lst))
    assert sum(f"{tmp_path}/gone" in line and "gone.list" not in line for line in listed.out.splitlines()) == 25
    assert "... and 15 more skipped, not listed (only the first 25 are kept)\n" in listed.out
    doc = tunectl("preload", "replay", str(lst), "--json").doc
    assert doc["skipped_by_status"] == {"vanished": 40} and len(doc["skipped"]) == 25
