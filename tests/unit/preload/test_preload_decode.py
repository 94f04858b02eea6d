"""A list's decoding (#30: the largest Python cost of a warm replay outside its data pass) answers exactly as
the line-by-line code it shortcuts: the same entries, or the same error at the same FILE:LINE.

The reference functions below are the code before the shortcut, kept verbatim in what they decide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunectl.preload import listfile
from tunectl.preload.listfile import batches
from tunectl.preload.listing import MIN_MTIME_NS, Entry, ListError, PreloadList, parse, total_bytes
from tunectl.preload.listing import _entries as entries_of

HEADER = json.dumps({"format": "tunectl-preload", "version": 1})


def old_decode(raw: list[bytes], n: int, path: str, lines: list[str], numbers: list[int]) -> None:
    """`_decode` before it took a chunk whole: split into byte lines first, each checked for its length."""
    if max(map(len, raw)) <= listfile.MAX_LINE:
        try:
            text = b"\n".join(raw).decode("utf-8").split("\n")
        except UnicodeDecodeError:
            text = None
        if text is not None and len(text) == len(raw) and all(t.startswith("[") for t in text):
            lines += text
            numbers += range(n + 1, n + 1 + len(text))
            return
    for k, one in enumerate(raw, start=n + 1):
        line = listfile._text(one, path, k)
        if line.strip():
            lines.append(line)
            numbers.append(k)


def old_way(body: bytes, n: int, path: str, lines: list[str], numbers: list[int]) -> int:
    raw = body.split(b"\n")
    old_decode(raw, n, path, lines, numbers)
    return n + len(raw)


def row(i: int, **change) -> list:
    fields = {"path": f"/d/f{i}", "device": "8:1", "inode": 100 + i, "size": 10 + i, "mtime_ns": 1_700_000_000 + i,
              "ranges": [[0, 10 + i]], "physical": 4096 * i}
    fields.update(change)
    return list(fields.values())


GOOD = st.integers(0, 10**6).map(lambda i: json.dumps(row(i), separators=(",", ":")).encode())
ODD = st.sampled_from([
    b"", b"  ", b"\t", b"\xff\xfe", b"[\"/a\xc3\",\"8:1\"]", b" [1]", b"{}", b"[1],[2]", b"[", b"null",
    json.dumps(row(1, path="/d/\u00e9t\u00e9")).encode(),  # an escaped name, and one written as UTF-8:
    json.dumps(row(2, path="/d/\u00e9t\u00e9"), ensure_ascii=False).encode(),  # both good entries
    json.dumps(row(3, path="/d/\ud800")).encode(),  # a lone surrogate: no file has that name
    json.dumps(row(4, ranges=[], size=0, physical=None)).encode(),  # an empty file
    json.dumps(row(5, ranges=[[0, 4], [8, 2]])).encode(),
    json.dumps(row(6, inode=-1)).encode(), json.dumps(row(7, device="8:x")).encode(),
    json.dumps(row(8, ranges=[[0, True]])).encode(), json.dumps(row(9, mtime_ns=MIN_MTIME_NS - 1)).encode(),
    b"x" * 101, b"[" + b"x" * 100,  # longer than the (shrunk) MAX_LINE
])
LINES = st.lists(st.one_of(GOOD, GOOD, GOOD, ODD), max_size=60)


def outcome(f, *args):
    try:
        return f(*args)
    except ListError as e:
        return ("error", e.message, e.line)


@settings(max_examples=400, deadline=None)
@given(LINES)
def test_a_chunk_decodes_as_it_did_line_by_line(body: list[bytes]) -> None:
    data = b"\n".join(body)
    new_lines: list[str] = []
    new_numbers: list[int] = []
    old_lines: list[str] = []
    old_numbers: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(listfile, "MAX_LINE", 100)
        new = outcome(listfile._decode, data, 1, "L", new_lines, new_numbers)
        old = outcome(old_way, data, 1, "L", old_lines, old_numbers)
    assert new == old
    if type(new) is int:
        assert (new_lines, new_numbers) == (old_lines, old_numbers)


@settings(max_examples=150, deadline=None)
@given(LINES, st.integers(1, 5), st.sampled_from([None, 1, 3]), st.integers(8, 200))
def test_a_list_with_bad_lines_anywhere_streams_as_it_did(tmp_path_factory: pytest.TempPathFactory,
                                                          body: list[bytes], size: int, first: int | None,
                                                          chunk: int) -> None:
    """The whole stream, read a few bytes at a time (lines cut across reads), against the old decoding: the
    same batches, the same error at the same line, the same entries before it (a streamed replay reads those)."""
    path = tmp_path_factory.mktemp("l") / "x.list"
    path.write_bytes(HEADER.encode() + b"\n" + b"\n".join(body) + b"\n")

    def run() -> list:
        got: list = []
        try:
            for _, batch in batches(str(path), size=size, first=first, replayed=False):
                got.append(batch)
        except ListError as e:
            got.append(("error", e.message, e.line))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(listfile, "MAX_LINE", 100)
        mp.setattr(listfile, "CHUNK", chunk)
        mp.setattr(listfile, "FIRST_READ", max(1, chunk // 4))
        new = run()
        mp.setattr(listfile, "_decode", old_way)
        old = run()
    assert new == old


def test_an_mtime_no_file_can_have_is_refused_at_its_line_even_after_a_good_row_of_its_device() -> None:
    rows = [row(1), row(2, mtime_ns=MIN_MTIME_NS - 1)]
    with pytest.raises(ListError, match=r"^L:3: mtime_ns: expected an integer"):
        entries_of(rows, [2, 3], "L")
    assert entries_of([row(1), row(2, mtime_ns=MIN_MTIME_NS)], [2, 3], "L")[1].mtime_ns == MIN_MTIME_NS


RANGES = st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 2**40)), max_size=4).map(tuple)


@settings(max_examples=200, deadline=None)
@given(st.lists(RANGES, max_size=30))
def test_the_total_of_entries_is_the_sum_of_their_bytes(ranges: list[tuple]) -> None:
    entries = [Entry(f"/f{i}", "8:1", i, 1, 0, r, None) for i, r in enumerate(ranges)]
    assert total_bytes(entries) == sum(e.bytes for e in entries) == PreloadList(entries).bytes
    assert total_bytes(iter(entries)) == sum(e.bytes for e in entries)


def test_a_whole_list_parses_to_what_the_stream_gives(tmp_path: Path) -> None:
    body = [json.dumps(row(i)) for i in range(300)] + [json.dumps(row(300, ranges=[], size=0, physical=None))]
    text = HEADER + "\n" + "\n".join(body) + "\n"
    path = tmp_path / "x.list"
    path.write_text(text)
    streamed = [e for _, b in batches(str(path), size=64, first=8, replayed=False) for e in b]
    assert streamed == parse(text, "x").entries and len(streamed) == 301
