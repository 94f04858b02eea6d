"""Issue #34: a journal fuzzer, kept in the suite (a few seconds): sealed journals (valid checksum, as root could
write them by hand) with hostile values and shapes; rollback, verify and status answer with a documented exit
and words, never an internal error, and never write a value the journal holds that no attribute holds."""

from __future__ import annotations

import copy
import json
import random

import pytest

from tests.journal_helpers import Pair
from tunectl.system.state import seal

NASTY = ["\ud800", "128\n", "128\0", "\u202emq-deadline", "", " ", "x" * 300, "none\r", -1, 2**70, 1.5, True, None,
         "[none] mq-deadline", "../../../../etc/passwd", "\udcff\udcfe", "bfq\x1b[2J", "64k", "0x40"]
EXITS = {0, 1, 2, 3, 4, 5}
RUNS = 150


def mutate(rng: random.Random, journal: dict) -> dict:
    j = copy.deepcopy(journal)
    identity = rng.choice(list(j["devices"]))
    entry = j["devices"][identity]
    what = rng.randrange(6)
    if what <= 2 and entry["attributes"]:
        entry["attributes"][rng.choice(list(entry["attributes"]))] = rng.choice(NASTY)
    elif what == 3:
        entry["name"] = rng.choice(["sd\nb", "\u202esda", "\ud800", "sda"])
    elif what == 4:
        for knobs in entry.get("iosched", {}).values():
            if knobs:
                knobs[rng.choice(list(knobs))] = rng.choice(NASTY)
    else:
        j["devices"][rng.choice(["wwn:\ud800", "x\ny", "\u202e"])] = copy.deepcopy(entry)
    return j


@pytest.mark.parametrize("seed", [34])
def test_rollback_of_a_fuzzed_journal_exits_as_documented(pair: Pair, seed: int) -> None:
    assert pair.run("apply", "-p", "p1").code == 0 and pair.run("apply", "-p", "p2").code == 0
    journal_file = pair.state / "journal.json"
    body = json.loads(journal_file.read_text())
    journal = {k: v for k, v in body.items() if k not in ("version", "generation", "tunectl", "saved", "sha256")}
    rng = random.Random(seed)
    seen = set()
    for _ in range(RUNS):
        fuzzed = mutate(rng, journal)
        for old in pair.state.glob("journal.json*"):
            old.unlink()
        journal_file.write_bytes(seal(fuzzed, 1))
        for argv in (("rollback", "--check"), ("status",), ("rollback",)):
            r = pair.fresh()(*argv)  # the harness fails the test on a traceback or "internal error"
            assert r.code in EXITS, (argv, r.code, r.err)
            assert "\u202e" not in r.out + r.err, (argv, r.out + r.err)  # printed escaped, never raw
            seen.add(r.code)
        for name in ("sda", "sdb"):
            queue = pair.tree.root / "block" / name / "queue"
            for attr in ("read_ahead_kb", "nr_requests"):
                text = (queue / attr).read_text()
                assert text.strip().isdigit(), (name, attr, text)
    assert 5 in seen and 0 in seen  # some journals refused, some restored
