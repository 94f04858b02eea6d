"""Issue #34: an fstab fuzzer, kept in the suite (a few seconds): mutated fstab files through mounts check and
fix (--check, then for real); a documented exit and words every time, never an internal error, and a fix either
leaves the file byte for byte or writes one that keeps every line it did not mean to change."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit.mounts.test_fstab_lifecycle import FSTAB, Machine

PIECES = [b"tmpfs", b"/srv/a\\040b", b"ext4", b"defaults", b"noatime", b"0", b"2", b"#", b"\t", b"  ", b"\\",
          b"\xff\xfe", b"\x00", b"\r", b"\xe2\x80\xae", b"UUID=\"x\"", b"LABEL=", b"none", b"swap", b"=", b",", b"\n",
          b"x" * 300, b"errors=remount-ro", b"data=journal", b"/", b"\xed\xa0\x80"]
RUNS = 120


def fuzzed(rng: random.Random) -> bytes:
    lines = FSTAB.encode().splitlines(keepends=True)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(lines))
        words = lines[i].split()
        if words and rng.random() < 0.7:
            words[rng.randrange(len(words))] = rng.choice(PIECES)
            lines[i] = b" ".join(words) + b"\n"
        else:
            lines.insert(i, b" ".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 8))) + b"\n")
    return b"".join(lines)


def test_mounts_check_and_fix_of_fuzzed_fstabs_exit_as_documented(fake_root: Path) -> None:
    m = Machine(fake_root)
    rng = random.Random(34)
    for _ in range(RUNS):
        data = fuzzed(rng)
        m.fstab.write_bytes(data)
        for argv in (("mounts", "check", "-p", str(m.base / "noatime.yaml")), ("mounts", "fix", "--check", "-p",
                                                                                 str(m.base / "noatime.yaml"))):
            code, out, err = m(*argv)  # the harness fails the test on a traceback or "internal error"
            assert code in {0, 1, 2, 3, 4, 5}, (data, argv, code, err)
            assert m.fstab.read_bytes() == data
        code, out, err = m.fix("noatime")
        assert code in {0, 1, 2, 3, 4, 5}, (data, code, err)
        after = m.fstab.read_bytes()
        assert after == data or len(after.splitlines()) == len(data.splitlines()), (data, after)
        assert m.leftovers() == [], m.leftovers()
