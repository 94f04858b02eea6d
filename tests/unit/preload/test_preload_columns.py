"""The columns file beside a list (#30: a replay's list decoding): the same entries the JSON gives, or declined.

A columns file stands for its list only while it was made from that very list and may be trusted; anything else
(another list, a changed list, another version, a damaged or truncated file, one another user may have written)
is declined, and the list is decoded from its JSON as before. `show` and every reader of the JSON are unchanged."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunectl.preload import columns, listfile
from tunectl.preload.columns import Declined, decode, encode
from tunectl.preload.listfile import batches, write_columns, write_list
from tunectl.preload.listing import FIELDS, MIN_MTIME_NS, Entry, column, parse, total_bytes


@pytest.fixture(autouse=True)
def columns_for_any_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listfile, "COLUMNS_FROM", 0)  # these lists are short; the rule is tested below


KEY = (2049, 12, 3456, 1_700_000_000_123_456_789)


def streamed(path: Path, size: int = 64, first: int | None = None) -> list[list[Entry]]:
    return [b for _, b in batches(str(path), size=size, first=first, replayed=False)]


def from_json(path: Path) -> list[Entry]:
    return parse(path.read_text(), str(path)).entries


def cols_of(path: Path) -> Path:
    return Path(str(path) + columns.SUFFIX)


ODD = [
    Entry("/d/plain", "8:1", 5, 10, 1, ((0, 10),), 4096),
    Entry("/d/empty", "8:1", 6, 0, 1, (), None),
    Entry("/d/some", "8:1", 7, 100, -5, ((0, 4), (8, 2), (90, 10)), None),
    Entry("/d/\u00e9t\u00e9 \"q\" \\", "259:3", 8, 3, MIN_MTIME_NS, ((1, 2),), 0),
    Entry("/d/\udcff-undecodable", "8:1", 2**64 - 1, 2**63, 2**63 - 1, ((2**64 - 2, 1),), 2**63 - 1),
]


def test_a_written_list_has_columns_that_give_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "x.list"
    write_list(str(path), ODD, time_order=True)
    assert cols_of(path).is_file()
    got = [e for b in streamed(path) for e in b]
    assert got == from_json(path) == ODD
    assert [type(p) for e in got for p in (e.physical,)] == [int, type(None), type(None), int, int]


def test_batches_from_columns_are_cut_as_the_json_stream_is(tmp_path: Path) -> None:
    path = tmp_path / "x.list"
    entries = [Entry(f"/d/f{i}", "8:1", i, 10, 0, ((0, 10),), i * 4096) for i in range(300)]
    write_list(str(path), entries)
    with_cols = streamed(path, size=64, first=8)
    os.unlink(cols_of(path))
    assert with_cols == streamed(path, size=64, first=8)
    assert [len(b) for b in with_cols] == [8, 64, 64, 64, 64, 36]


NAMES = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=12)
ENTRIES = st.lists(st.builds(
    Entry, NAMES.map(lambda s: "/" + s), st.sampled_from(["8:1", "254:0", "7:12"]), st.integers(0, 2**64 - 1),
    st.integers(0, 2**63), st.integers(MIN_MTIME_NS, 2**63 - 1),
    st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 2**40)), max_size=3).map(tuple),
    st.one_of(st.none(), st.integers(0, 2**63 - 1))), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ENTRIES, st.integers(1, 9), st.sampled_from([None, 1, 4]))
def test_the_columns_decode_as_the_json_does(tmp_path_factory: pytest.TempPathFactory, entries: list[Entry],
                                             size: int, first: int | None) -> None:
    """The property: for any list, its columns give what its JSON gives, batch for batch."""
    path = tmp_path_factory.mktemp("c") / "x.list"
    write_list(str(path), entries, time_order=True)
    assert cols_of(path).is_file()
    got = streamed(path, size, first)
    os.unlink(cols_of(path))
    assert got == streamed(path, size, first)
    assert [e for b in got for e in b] == from_json(path) == entries


def poisoned(path: Path) -> None:
    """Columns bound to the list at `path` that name other files: used, they would show in what is read."""
    st_ = os.stat(path)
    n = len(from_json(path))
    other = [Entry(f"/poison/{i}", "8:1", i, 1, 0, ((0, 1),), None) for i in range(n)]
    cols_of(path).write_bytes(encode(other, (st_.st_dev, st_.st_ino, st_.st_size, st_.st_mtime_ns)))


def test_columns_made_from_this_list_are_what_a_replay_reads(tmp_path: Path) -> None:
    path = tmp_path / "x.list"
    write_list(str(path), ODD[:2])
    poisoned(path)
    assert [e.path for b in streamed(path) for e in b] == ["/poison/0", "/poison/1"]  # the test's own check


@pytest.mark.parametrize("how", ["list changed", "other user", "group-writable", "link", "too many", "not a file"])
def test_columns_that_may_not_stand_for_the_list_are_declined(tmp_path: Path, how: str) -> None:
    path = tmp_path / "x.list"
    write_list(str(path), ODD[:2])
    poisoned(path)
    cols = cols_of(path)
    if how == "list changed":
        os.utime(path, ns=(1, 1))
    elif how == "other user":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(cols, 65534, -1)
    elif how == "group-writable":
        cols.chmod(0o664)
    elif how == "link":
        real = tmp_path / "real.cols"
        cols.rename(real)
        cols.symlink_to(real)
    elif how == "too many":
        text = path.read_text().replace('"files": 2', '"files": 3')  # the header no longer agrees
        st_ = os.stat(path)
        path.write_text(text)
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))
        poisoned(path)
    elif how == "not a file":
        cols.unlink()
        os.mkfifo(cols)
    assert [e.path for b in streamed(path) for e in b] == ["/d/plain", "/d/empty"]


def test_a_damaged_truncated_or_other_version_columns_file_is_declined() -> None:
    data = encode(ODD, KEY)
    assert decode(data, KEY) == ODD
    for cut in range(0, len(data), 7):
        with pytest.raises(Declined):
            decode(data[:cut], KEY)
    for at in range(len(columns.MAGIC), len(data), 5):  # any flipped byte: header, lengths, checksum, columns
        bad = bytearray(data)
        bad[at] ^= 0x41
        with pytest.raises(Declined):
            decode(bytes(bad), KEY)
    with pytest.raises(Declined, match="another list"):
        decode(data, KEY[:3] + (KEY[3] + 1,))
    other = bytearray(data)
    other[len(columns.MAGIC)] = columns.VERSION + 1
    with pytest.raises(Declined, match="version"):
        decode(bytes(other), KEY)
    with pytest.raises(Declined, match="checksum"):  # more after its last column: not what was summed
        decode(data + b"x", KEY)


def test_a_checked_column_declines_what_the_json_refuses() -> None:
    """Columns whose checksum is good but whose values no list may hold (a crafted file) are declined."""
    import zlib

    def forged(entries: list[Entry]) -> bytes:
        data = encode(entries, KEY)
        assert data is not None
        at = len(columns.MAGIC)
        head = list(columns.HEAD.unpack_from(data, at))
        rest = data[at + columns.HEAD.size:]
        head[-1] = zlib.crc32(rest)
        return data[:at] + columns.HEAD.pack(*head) + rest

    for bad, why in [(Entry("relative", "8:1", 1, 1, 0, ((0, 1),), None), "paths"),
                     (Entry("/a", "8:x", 1, 1, 0, ((0, 1),), None), "devices"),
                     (Entry("/a", "8:1", 1, 1, 0, ((0, 0),), None), "ranges"),
                     (Entry("/a", "8:1", 1, 1, 0, ((0, 1),), -1), None)]:
        data = encode([bad], KEY)
        if why is None:
            assert data is None  # -1 would read back as "unknown": not written at all
            continue
        with pytest.raises(Declined, match=why):
            decode(forged([bad]), KEY)


def test_no_columns_for_a_list_past_keep_or_short_or_a_name_that_does_not_come_back(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.list"
    monkeypatch.setattr(listfile, "KEEP", 2)
    write_list(str(path), ODD[:3])
    assert not cols_of(path).exists()  # a replay streams such a list in bounded memory
    monkeypatch.setattr(listfile, "KEEP", 10)
    monkeypatch.setattr(listfile, "COLUMNS_FROM", 4)
    write_list(str(path), ODD[:3])
    assert not cols_of(path).exists()  # a short list decodes from its JSON in less than the columns' imports
    write_list(str(path), ODD[:4])
    assert cols_of(path).exists()
    monkeypatch.setattr(listfile, "COLUMNS_FROM", 0)
    os.unlink(cols_of(path))
    same_bytes = Entry("/d/\udcc3\udca9", "8:1", 1, 1, 0, ((0, 1),), None)  # the bytes of "é", not equal to it
    assert encode([same_bytes], KEY) is None
    write_list(str(path), [same_bytes])
    assert not cols_of(path).exists()
    assert [e for b in streamed(path) for e in b] == [same_bytes]


def test_columns_are_not_written_beside_a_link(tmp_path: Path) -> None:
    path = tmp_path / "x.list"
    write_list(str(path), ODD[:1])
    link = tmp_path / "latest.list"
    link.symlink_to(path)
    assert not write_columns(str(link), ODD[:1])
    assert not cols_of(link).exists()


def crafted(data: bytes, **sections: bytes) -> bytes:
    """Columns `data` with the named sections' bytes replaced and the checksum made good again: a crafted file."""
    import zlib

    at = len(columns.MAGIC) + columns.HEAD.size
    parts = []
    for name, _ in columns.SECTIONS:
        (length,) = columns.LENGTH.unpack_from(data, at)
        at += columns.LENGTH.size
        parts.append(sections.get(name, data[at:at + length]))
        at += length
    rest = b"".join(columns.LENGTH.pack(len(b)) + b for b in parts)
    head = list(columns.HEAD.unpack_from(data, len(columns.MAGIC)))
    head[-1] = zlib.crc32(rest)
    return columns.MAGIC + columns.HEAD.pack(*head) + rest


def decode_section(data: bytes, name: str) -> bytes:
    """The bytes of section `name` of columns `data`."""
    at = len(columns.MAGIC) + columns.HEAD.size
    for section, _ in columns.SECTIONS:
        (length,) = columns.LENGTH.unpack_from(data, at)
        at += columns.LENGTH.size
        if section == name:
            return data[at:at + length]
        at += length
    raise KeyError(name)


def _changed(rng: random.Random, data: bytearray) -> bytearray:
    """`data` with one to three bytes changed, or runs of 1, 4 or 8 bytes put in or taken out."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) or 1)
        how = rng.randrange(3)
        if how == 0 and data:
            data[at] = rng.randrange(256)
        elif how == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 8))))
        else:
            del data[at:at + rng.choice((1, 4, 8))]
    return data


def test_crafted_columns_that_point_past_a_column_or_hold_a_negative_offset_are_declined() -> None:
    """A device index past the devices listed would fail in the entries' build (an IndexError out of a boot-time
    replay); a physical offset below -1 (unknown) is one no list may hold."""
    from array import array

    data = encode(ODD[:1], KEY)
    assert decode(crafted(data), KEY) == ODD[:1]
    with pytest.raises(Declined, match="device: past"):
        decode(crafted(data, device=array("I", [1]).tobytes()), KEY)
    with pytest.raises(Declined, match="physical"):
        decode(crafted(data, physical=array("q", [-5]).tobytes()), KEY)


def test_columns_changed_anywhere_behind_a_good_checksum_are_declined_or_entries_a_list_may_hold() -> None:
    """Byte changes, insertions and deletions after the header, the checksum made good each time: decode either
    declines (never another exception: a replay would end in a traceback) or gives entries the JSON reader takes."""
    import zlib

    from tunectl.preload.listing import _problem

    data = encode(ODD, KEY)
    start = len(columns.MAGIC) + columns.HEAD.size
    head = list(columns.HEAD.unpack_from(data, len(columns.MAGIC)))
    rng = random.Random(11)
    outcomes = {"declined": 0, "entries": 0}
    sections = [name for name, _ in columns.SECTIONS]
    for i in range(4000):
        if i % 2:  # one section's bytes changed, its length said right (whole numbers, or not)
            name = rng.choice(sections)
            part = bytearray(decode_section(data, name))
            changed = _changed(rng, part) if part and rng.random() < 0.5 else part
            if rng.random() < 0.5:
                changed += bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 8))))
            elif changed and rng.random() < 0.5:
                del changed[-rng.choice((1, 4, 8)):]
            whole = crafted(data, **{name: bytes(changed)})
        else:  # anywhere after the header: the sections' lengths too
            body = _changed(rng, bytearray(data[start:]))
            head[-1] = zlib.crc32(body)
            whole = columns.MAGIC + columns.HEAD.pack(*head) + bytes(body)
        try:
            got = decode(whole, KEY)
        except Declined:
            outcomes["declined"] += 1
            continue
        outcomes["entries"] += 1
        assert len(got) == len(ODD), got  # as many as the header says: the caller checks the list's count
        assert all(type(e) is Entry and _problem(e.to_row()) == "" for e in got), got
    assert min(outcomes.values()) > 100, outcomes  # both ways taken: the changes reach the checks


def test_a_streamed_read_makes_a_batchs_entries_only_when_they_are_taken(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """#30: the first batch of a list read from its columns waits for the checks of every column, not for every
    entry of the list to be made: a batch's entries are made only when they are taken from it (a replay's compiled
    pass reads the columns themselves), and they are those the JSON gives, whatever the cut (an entry of no range,
    one of three), one at a time or a slice."""
    path = tmp_path / "x.list"
    entries = [Entry(f"/d/f{i}", ("8:1", "259:3")[i % 2], i, 10, 0,
                     (((0, 4), (6, 2), (9, 1)) if i % 7 == 3 else () if i % 11 == 5 else ((0, 10),)), i * 4096)
               for i in range(300)]
    write_list(str(path), entries, time_order=True)  # kept in this order
    made: list[tuple[int, int]] = []
    entries_of = columns.Columns.entries

    def counted(self: columns.Columns, start: int = 0, stop: int | None = None,
                devices: list[str] | None = None) -> list[Entry]:
        got = entries_of(self, start, stop, devices)
        made.append((start, len(got)))
        return got

    monkeypatch.setattr(columns.Columns, "entries", counted)
    seen = listfile.ColumnsRead()
    stream = batches(str(path), 64, first=8, replayed=False, seen=seen)
    first = next(stream)[1]
    assert seen.status == listfile.ColumnsRead.USED
    rest = [b for _, b in stream]
    assert made == []  # every batch taken, no entry made
    assert [len(b) for b in [first, *rest]] == [8, 64, 64, 64, 64, 36]
    assert [rest[0][k] for k in (0, 3, -1)] == [entries[8], entries[11], entries[71]]  # one at a time
    assert rest[1][10:13] == entries[82:85] and made == [(82, 3)]
    assert [b[:] for b in [first, *rest]] == [entries[:8], *(entries[s:s + 64] for s in range(8, 300, 64))]
    for b in [first, *rest]:  # what a replay asks of a whole chunk, answered from the columns as from the entries
        assert [column(b, f) for f in FIELDS] == [column(b[:], f) for f in FIELDS]
        assert total_bytes(b) == total_bytes(b[:])
    os.unlink(cols_of(path))
    assert [first, *rest] == streamed(path, size=64, first=8)
    assert [e for b in [first, *rest] for e in b] == from_json(path) == entries
