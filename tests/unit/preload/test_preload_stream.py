"""A list replayed as it is read (#30): each chunk's files are read as soon as every entry of it is checked.

The safety properties of the whole-list replay hold: no entry is read before it passed its checks, a bad
entry later in the list stops the replay there (every entry before it read, none after, today's message plus
what was read), the memory cap is refused from the header before any read and counted as the list is read.
The disk is a stand-in (`read_stack`), and every WILLNEED the replay issues is recorded by inode.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from tests.harness import run_cli
from tunectl.preload import order
from tunectl.preload import replay as replay_module
from tunectl.preload.listfile import batches, write_list
from tunectl.preload.listing import Entry
from tunectl.units import format_bytes

FILES = 1500  # the first chunk (512), then one of 4096: more than one chunk
SIZE = 100


@pytest.fixture
def files(tmp_path: Path) -> list[Entry]:
    data = tmp_path / "data"
    data.mkdir()
    entries = []
    for i in range(FILES):
        p = data / f"f{i:04d}"
        p.write_bytes(bytes([i % 251]) * SIZE)
        st = p.stat()
        entries.append(Entry(str(p), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino, SIZE,
                             st.st_mtime_ns, ((0, SIZE),), 4096 * (i + 1)))
    return entries


def disk(monkeypatch: pytest.MonkeyPatch, rotational: bool, inodes_cached: bool = True) -> list[int]:
    """The list's disk stands in as `rotational`, its inode sample fast or slow; the inodes WILLNEED was
    issued for, in order."""
    monkeypatch.setattr(replay_module, "read_stack",
                        lambda sysfs, d: replay_module.Stack(d, rotational, 64, 128 << 10, None))
    monkeypatch.setattr(replay_module, "FAST_STATS", 0 if inodes_cached else float("inf"))
    read: list[int] = []
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        read.append(os.fstat(fd).st_ino)
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    monkeypatch.setattr(replay_module, "_datapass", None)  # the Python loop, whose os.posix_fadvise is watched
    return read


def listed(path: Path, entries: list[Entry], edit=None, header=None, time_order: bool = False) -> Path:
    """The list written as collect writes it; `edit(lines)` changes entry lines (index 0: the first entry),
    `header(dict)` the header."""
    write_list(str(path), entries, time_order=time_order)
    lines = path.read_text().splitlines()
    head, body = json.loads(lines[0]), lines[1:]
    if header:
        header(head)
    if edit:
        edit(body)
    path.write_text("\n".join([json.dumps(head), *body]) + "\n")
    return path


def error(err: str) -> str:
    """The error line of a run's stderr (a replay announces what it will read on the line before)."""
    return next(line for line in err.splitlines() if line.startswith("tunectl: error: "))


def bad_inode(at: int):
    def edit(body: list[str]) -> None:
        row = json.loads(body[at])
        row[2] = "x"
        body[at] = json.dumps(row)
    return edit


def test_a_streamed_list_is_read_in_its_own_order_and_says_so(monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files)
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "streamed" and r.doc["files"] == FILES, r.err
    assert read == [e.inode for e in files]
    read.clear()
    r = run_cli("preload", "replay", str(lst), "-v")
    assert r.code == 0 and "list streamed: read as it was checked: the first 512 entries, then 4096 at a time" \
        in r.out, r.out


@pytest.mark.parametrize("at", [700, 512, 1499])
def test_a_bad_entry_later_in_the_list_stops_the_replay_there_after_reading_every_entry_before_it(
        monkeypatch, tmp_path: Path, files, at: int) -> None:
    lst = listed(tmp_path / "l.list", files, bad_inode(at))
    whole = run_cli("preload", "show", str(lst))  # the whole-list reader's words for the same entry
    line = at + 2
    assert whole.code == 2 and f"{lst}:{line}: inode, size: expected non-negative integers" in whole.err
    read = disk(monkeypatch, rotational=False)
    # waited for: the host may have dropped the files since they were written, and then the reads go to the disk
    r = run_cli("preload", "replay", str(lst), "--settle-timeout", "10")
    assert r.code == 2, r.err
    assert error(r.err) == error(whole.err) + f"; before it, {at} files ({format_bytes(at * SIZE)}) had been read " \
        "into the page cache (which changes nothing on disk), the rest of the list was not read", r.err
    assert read == [e.inode for e in files[:at]]  # every entry before the bad one, none after


def sent_reads(monkeypatch: pytest.MonkeyPatch, read: list[int], busy: int) -> list[int]:
    """The replay's reads stand in as sent to the disk (its read bytes grow) and in flight for `busy` looks at
    the disk; the files read (WILLNEEDs issued) at each look."""
    sent = itertools.count(0, 4096)
    monkeypatch.setattr(replay_module, "_own_read_bytes", lambda: next(sent))
    looks: list[int] = []

    def in_flight(sysfs, devices) -> int:  # noqa: ANN001
        looks.append(len(read))
        return 3 if len(looks) <= busy else 0

    monkeypatch.setattr(replay_module, "requests_in_progress", in_flight)
    return looks


def test_a_bad_entry_later_in_the_list_waits_for_the_reads_before_it_as_the_end_does(
        monkeypatch, tmp_path: Path, files) -> None:
    # It exited at once, its reads still in flight, and said they "had been read into the page cache".
    lst = listed(tmp_path / "l.list", files, bad_inode(700))
    read = disk(monkeypatch, rotational=False)
    looks = sent_reads(monkeypatch, read, busy=2)
    r = run_cli("preload", "replay", str(lst), "--settle-timeout", "10")
    assert r.code == 2 and looks == [700, 700, 700], (r.err, looks)  # after the last read, until none in flight
    assert error(r.err).endswith(f"; before it, 700 files ({format_bytes(700 * SIZE)}) had been read into the page "
                                 "cache (which changes nothing on disk), the rest of the list was not read"), r.err


def test_by_default_a_bad_entry_later_in_the_list_does_not_wait_and_says_the_reads_were_sent(
        monkeypatch, tmp_path: Path, files) -> None:
    """As WILLNEED: the reads before the bad entry are sent and not waited for (one look at the disk, which
    never drains here), and the error says they were sent, not read."""
    lst = listed(tmp_path / "l.list", files, bad_inode(700))
    read = disk(monkeypatch, rotational=False)
    looks = sent_reads(monkeypatch, read, busy=10 ** 9)
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 2 and looks == [700], (r.err, looks)
    assert error(r.err).endswith(f"; before it, 700 files ({format_bytes(700 * SIZE)}) had been sent to the disk to "
                                 "read into the page cache, not waited for (which changes nothing on disk), the rest "
                                 "of the list was not read"), r.err


def test_a_bad_entry_whose_reads_are_still_in_flight_at_the_settle_timeout_says_so(monkeypatch, tmp_path: Path,
                                                                                    files) -> None:
    lst = listed(tmp_path / "l.list", files, header=lambda h: h.update(bytes=1))  # the cap passed mid-list too
    read = disk(monkeypatch, rotational=False)
    looks = sent_reads(monkeypatch, read, busy=10 ** 9)
    r = run_cli("preload", "replay", str(lst), "--settle-timeout", "0.2", "--max-bytes", str(1000 * SIZE))
    assert r.code == 2 and len(looks) > 1 and set(looks) == {512}, (r.err, looks)  # looked again and again
    assert error(r.err).endswith("; before it, 512 files (50 KiB) had been sent to the disk to read into the page "
                                 "cache, some still in flight at the settle timeout (which changes nothing on disk), "
                                 "the rest of the list was not read"), r.err


def test_a_bad_entry_in_the_first_chunk_reads_nothing_and_says_what_it_always_said(monkeypatch, tmp_path: Path,
                                                                                 files) -> None:
    lst = listed(tmp_path / "l.list", files, bad_inode(100))
    whole = run_cli("preload", "show", str(lst))
    read = disk(monkeypatch, rotational=False)
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 2 and error(r.err) == error(whole.err), (r.err, whole.err)
    assert read == []


def test_a_list_whose_entries_pass_the_cap_its_header_gave_stops_before_the_chunk_that_passes_it(
        monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files, header=lambda h: h.update(bytes=1))  # a header that understates
    cap = 1000 * SIZE  # passed by the chunk after the first 512 files
    r = run_cli("preload", "replay", str(lst), "--max-bytes", str(cap))
    assert r.code == 2, r.err
    assert f"{lst}: more than --max-bytes 97.7 KiB to read: its header says {FILES} files, 1 B, but its first " \
           f"{FILES} files come to 146.5 KiB; before it, 512 files (50 KiB) had been read" in r.err, r.err
    assert read == [e.inode for e in files[:512]] and len(read) * SIZE <= cap


def test_a_header_total_over_the_cap_is_refused_before_any_read(monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files, bad_inode(FILES - 1))  # the refusal comes before the list is read
    r = run_cli("preload", "replay", str(lst), "--max-bytes", str(FILES * SIZE - 1))
    # the two sizes round to the same 146.5 KiB: said in bytes
    assert r.code == 2 and f"{FILES} files, {FILES * SIZE} B to read: more than --max-bytes {FILES * SIZE - 1} B; " \
        "no file of it was " \
        "read" in r.err, r.err
    assert read == []


def test_a_list_without_its_total_is_checked_whole_before_any_read(monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files, bad_inode(1400), header=lambda h: h.pop("bytes"))
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 2 and f"{lst}:1402: inode, size" in r.err and "before it" not in r.err, r.err
    assert read == []
    lst = listed(tmp_path / "l.list", files, header=lambda h: h.pop("bytes"))
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "whole" and read == [e.inode for e in files], r.err


def test_a_seeking_disk_streams_a_list_in_physical_order_when_its_inodes_answer_from_a_cache(
        monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=True)
    lst = listed(tmp_path / "l.list", files)
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "streamed" and r.doc["inode_pass_files"] == 512, r.err
    assert read == [e.inode for e in files]


def test_a_seeking_disk_whose_inodes_wait_for_it_gets_the_whole_list_first(monkeypatch, tmp_path: Path,
                                                                          files) -> None:
    read = disk(monkeypatch, rotational=True, inodes_cached=False)
    lst = listed(tmp_path / "l.list", files, bad_inode(1400))
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 2 and "before it" not in r.err and read == [], r.err  # checked whole: nothing read
    lst = listed(tmp_path / "l.list", files)
    r = run_cli("preload", "replay", str(lst), "--json", "-v")
    assert r.code == 0 and r.doc["list_read"] == "whole" and r.doc["inode_pass_files"] == FILES, r.err
    assert read == [e.inode for e in files]


def test_a_list_out_of_disk_order_is_sorted_whole_on_a_seeking_disk(monkeypatch, tmp_path: Path, files) -> None:
    read = disk(monkeypatch, rotational=True)
    lst = listed(tmp_path / "l.list", files, edit=lambda body: body.reverse())
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "whole", r.err
    assert read == [e.inode for e in files]  # sorted back into physical order


def test_a_time_ordered_list_streams_bin_by_bin_in_the_whole_lists_order(monkeypatch, tmp_path: Path,
                                                                        files) -> None:
    read = disk(monkeypatch, rotational=True)
    monkeypatch.setattr(order, "BIN_BYTES", 300 * SIZE)
    scrambled = [e._replace(physical=4096 * ((i * 7919) % FILES)) for i, e in enumerate(files)]
    lst = listed(tmp_path / "l.list", scrambled, time_order=True)
    kept = [e for _, b in batches(str(lst)) for e in b]
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "streamed" and r.doc["order"] == "time-bins", r.err
    assert read == [kept[i].inode for i in order.binned_indices(kept, 300 * SIZE)]


def test_a_bad_entry_in_a_time_ordered_list_reads_the_unfilled_bin_before_it(monkeypatch, tmp_path: Path,
                                                                             files) -> None:
    # The bin being filled when the bad entry came was dropped: 600 of the 700 entries before it were read,
    # where README, the man page and --help say every entry before it is (a 4000-file record list: 2517 of 2998).
    read = disk(monkeypatch, rotational=True)
    monkeypatch.setattr(order, "BIN_BYTES", 300 * SIZE)
    scrambled = [e._replace(physical=4096 * ((i * 7919) % FILES)) for i, e in enumerate(files)]
    lst = listed(tmp_path / "l.list", scrambled, bad_inode(700), time_order=True)
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 2 and f"{lst}:702: inode, size" in r.err, r.err
    assert f"; before it, 700 files ({format_bytes(700 * SIZE)}) had been read" in r.err, r.err
    assert sorted(read) == sorted(e.inode for e in files[:700])
    read.clear()  # the cap passed by the chunk after the first: the bin of the first chunk's tail is read too
    lst = listed(tmp_path / "l.list", scrambled, header=lambda h: h.update(bytes=1), time_order=True)
    r = run_cli("preload", "replay", str(lst), "--max-bytes", str(1000 * SIZE))
    assert r.code == 2 and "before it, 512 files" in r.err, r.err
    assert sorted(read) == sorted(e.inode for e in files[:512])


def test_a_list_swapped_for_a_bigger_one_after_its_survey_is_not_read_past_it(monkeypatch, tmp_path: Path,
                                                                               files) -> None:
    # A list checked whole (no total in its header, or a seeking disk) and too long to keep is read again after
    # the survey checked it against the cap: a bigger list renamed over it in between was read whole, past the cap.
    from tunectl.preload import listfile

    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files[:100], header=lambda h: h.pop("bytes"))
    real = listfile.survey

    def then_swapped(path: str, size: int = listfile.BATCH, keep: int = listfile.KEEP, seen=None):  # noqa: ANN001, ANN202
        found = real(path, size, keep=0, seen=seen)  # not kept: the replay reads the list again
        listed(tmp_path / "l.list", files, header=lambda h: h.pop("bytes"))  # whoever owns it swaps a bigger one in
        return found

    monkeypatch.setattr(listfile, "survey", then_swapped)
    r = run_cli("preload", "replay", str(lst), "--max-bytes", str(100 * SIZE))
    assert r.code == 2 and f"{lst}: changed while it was replayed: read again, it holds more than the 100 files, " \
        f"{format_bytes(100 * SIZE)} it held when it was checked" in r.err, r.err
    assert read == []  # its one batch passes what the survey found: none of it is read


@pytest.mark.parametrize("header, parsed", [(None, 512), (lambda h: h.pop("bytes"), FILES)])
def test_the_first_read_comes_after_the_first_chunk_is_parsed_not_the_whole_list(monkeypatch, tmp_path: Path, files,
                                                                                 header, parsed: int) -> None:
    # The direction of #30's gain, structurally (no timing): a streamed replay issues its first read when it has
    # decoded 512 of the 1500 entries; a list without its total is decoded whole first, as before.
    from tunectl.preload import listfile

    read = disk(monkeypatch, rotational=False)
    lst = listed(tmp_path / "l.list", files, header=header)
    decoded: list[int] = []
    at_first_read: list[int] = []
    real_parse = listfile.parse_lines

    def parse_lines(lines, numbers, path):  # noqa: ANN001, ANN202
        decoded.append(len(lines))
        return real_parse(lines, numbers, path)

    real_issue = replay_module._issue_with

    def issue_with(*args):  # noqa: ANN002, ANN202
        if not at_first_read:
            at_first_read.append(sum(decoded))
        return real_issue(*args)

    monkeypatch.setattr(listfile, "parse_lines", parse_lines)
    monkeypatch.setattr(replay_module, "_issue_with", issue_with)
    r = run_cli("preload", "replay", str(lst))
    assert r.code == 0 and len(read) == FILES and sum(decoded) >= FILES, r.err
    assert at_first_read == [parsed]


def test_a_list_refused_streaming_after_its_first_chunk_is_decoded_once(monkeypatch, tmp_path: Path, files) -> None:
    # A seeking disk whose first inodes wait: the list is checked whole first. It was opened again and decoded
    # from the top, the first 512 entries twice; the first chunk is kept and the same open list read on.
    from tunectl.preload import listfile

    read = disk(monkeypatch, rotational=True, inodes_cached=False)
    lst = listed(tmp_path / "l.list", files)
    decoded: list[int] = []
    real_parse = listfile.parse_lines

    def parse_lines(lines, numbers, path):  # noqa: ANN001, ANN202
        decoded.append(len(lines))
        return real_parse(lines, numbers, path)

    monkeypatch.setattr(listfile, "parse_lines", parse_lines)
    r = run_cli("preload", "replay", str(lst), "--json")
    assert r.code == 0 and r.doc["list_read"] == "whole" and read == [e.inode for e in files], r.err
    assert sum(decoded) == FILES, decoded


def test_a_list_refused_streaming_and_swapped_for_a_bigger_one_after_its_survey_is_not_read_past_it(
        monkeypatch, tmp_path: Path, files) -> None:
    # The same guarantee as for a list without its total: a list too long to keep is read again after the survey,
    # and a bigger one renamed over it in between is stopped before any of it is read.
    from tunectl.preload import listfile

    read = disk(monkeypatch, rotational=True, inodes_cached=False)
    lst = listed(tmp_path / "l.list", files[:1000])
    real = listfile.tally

    def then_swapped(parts, keep: int = listfile.KEEP):  # noqa: ANN001, ANN202
        found = real(parts, keep=0)  # not kept: the replay reads the list again
        listed(tmp_path / "l.list", files)  # whoever owns it swaps a bigger one in
        return found

    monkeypatch.setattr(listfile, "tally", then_swapped)
    r = run_cli("preload", "replay", str(lst), "--max-bytes", str(1000 * SIZE))
    assert r.code == 2 and f"{lst}: changed while it was replayed: read again, it holds more than the 1000 files, " \
        f"{format_bytes(1000 * SIZE)} it held when it was checked" in r.err, r.err
    assert read == []


@pytest.mark.parametrize("refused", ["a bad entry", "over the cap"])
def test_a_list_refused_by_the_survey_after_the_metadata_pass_says_the_metadata_was_read(
        monkeypatch, tmp_path: Path, files, refused: str) -> None:
    # On a disk that seeks the metadata pass runs before the inode sample that decides the whole-list survey;
    # the survey's refusal then said only "no file of it was read", silent on the device pages the pass had read.
    from tunectl.preload import metadata as metadata_module

    read = disk(monkeypatch, rotational=True, inodes_cached=False)
    swept: list[str] = []

    def sweep(metadata, windows, sysfs, dev_root, wait=()):  # noqa: ANN001, ANN202
        done = metadata_module.MetadataPass()
        done.bytes, done.devices = 64 << 10, sorted(metadata)
        swept.extend(metadata)
        return done

    monkeypatch.setattr(metadata_module, "replay", sweep)
    device = files[0].device

    def header(h: dict) -> None:
        h["metadata"] = {device: [[0, 64 << 10]]}
        if refused == "over the cap":
            h["bytes"] = 1  # understated: the survey finds the entries over the cap

    lst = listed(tmp_path / "l.list", files, bad_inode(1400) if refused == "a bad entry" else None, header=header)
    cap = ("--max-bytes", str(FILES * SIZE // 2 + (64 << 10))) if refused == "over the cap" else ()
    r = run_cli("preload", "replay", str(lst), *cap)
    assert r.code == 2 and swept == [device] and read == [], r.err  # no file read: only the metadata pass ran
    said = error(r.err)
    assert "; before it, 64 KiB of file system metadata had been " in said, said
    assert said.endswith("(which changes nothing on disk), the rest of the list was not read"), said
    assert (f"{lst}:1402: inode" in said) if refused == "a bad entry" else ("no file of it was read" in said), said
