"""The plain-subset reader (tunectl.profile.plain_yaml) against PyYAML's (yaml_events.parse_yaml): the same data, of
the same types, at the same positions, or None; never a different reading of the text."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tunectl.profile.plain_yaml import read_plain
from tunectl.profile.yaml_events import parse_yaml

REPO = Path(__file__).resolve().parents[3]


def _typed(value: object) -> object:
    """The value with every scalar's type spelled out (True == 1 == 1.0 in Python, not in a profile)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()} | {"__keys__": [type(k).__name__ for k in value]}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def _same_or_none(text: str) -> bool:
    """True when read_plain read the text (and then exactly as parse_yaml does); False when it declined."""
    plain = read_plain(text, "p.yaml")
    if plain is None:
        return False
    doc, diags = parse_yaml(text, "p.yaml")
    assert not [d for d in diags if d.severity == "error"], (text, diags)
    assert _typed(plain.data) == _typed(doc.data), text
    assert plain.value_pos == doc.value_pos, text
    assert plain.key_pos == doc.key_pos, text
    assert plain.warnings == [] and plain.file == doc.file
    return True


def test_every_shipped_profile_is_read_without_pyyaml_and_as_pyyaml_reads_it() -> None:
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        assert _same_or_none(path.read_text()), f"{path.name} left the plain subset"


@pytest.mark.parametrize("text", [
    "a: yes\nb: No\nc: on\nd: TRUE\ne: False\nf: null\ng: Null\nh: nULL\ni: tRUE\n",
    "a: 1\nb: -3\nc: 0\nd: -0\ne: 'x#y'\nf: \"two words\"\ng: /dev/sda\nh: a:b\ni: a, b [c]\n",
    "a: {x: 1, y: [a, b, -2], z: {}}\nb: []\n",
    "l:\n- a\n- {m: 1}\n- k: v\n  j: [1]\nn: 2\n",
    "l:\n    -   k: v\n        j: 1\n    - x\n",
    "top:   # a comment\n  deep:\n    deeper: value with  two  spaces   # comment\n",
    "true: 1\nnull: 2\nx1: 3\n",
    "d: caf\u00e9 cr\u00e8me\ne: {f: 1}  # \u00e9\n",
])
def test_the_subset_is_read_as_pyyaml_reads_it(text: str) -> None:
    assert _same_or_none(text)


@pytest.mark.parametrize("text", [
    "a: 0755\n", "a: 1_000\n", "a: 1.5\n", "a: 1e3\n", "a: .inf\n", "a: ~\n", "a: 12:30\n", "a: 2001-12-14\n",
    "a: 0x1f\n", "a: +1\n", "a: !!str 1\n", "a: &x 1\nb: *x\n", "a:\nb: 1\n", "a: b\n  c\n", "a: [1,\n  2]\n",
    "a: 'it''s'\n", "a: \"tab\\t\"\n", "---\na: 1\n", "a: 1\n...\n", "%YAML 1.1\n---\na: 1\n", "- a\n", "a: 1\n\tb: 2\n",
    "a: 1\r\nb: 2\r\n", "a: [1, ]\n", "a: {b:1}\n", "a: {b: c d}\n", "a: x\u2028b: y\n", "a: 1\na: 2\n",
    "? a\n: 1\n", "a: |\n  x\n", "a: >\n  x\n", "<<: {b: 1}\n", "a: 'x' y\n", "a: x: y\n", "a: x:\n", "a.b: 1\n",
    "a: 1 # c 'q'\nb: 'x #y' #c\n", "1x: 3\n", "", "# only a comment\n", "a: 1\x00\n", "a: \x7f\n",
])
def test_what_the_subset_leaves_out_is_left_to_pyyaml(text: str) -> None:
    assert read_plain(text, "p.yaml") is None


_WORDS = ["a", "ssd", "mq-deadline", "yes", "No", "on", "true", "False", "null", "NULL", "~", "0", "-1", "42", "0755",
          "1_0", "1.5", ".5", "1e3", "0x1f", "+2", "12:30", "2001-12-14", "/dev/sda", "a b", "a:b", "a: b", "'q'",
          "\"dq\"", "'it''s'", "x#y", "x #y", "&x", "*x", "!t", "-", "- a", "[]", "{}", "[a, 1]", "{k: v}", "{k: [1, 2]}",
          "caf\u00e9", "=", "<<", "?", "@x", "`x`", "%x", "|", ">", "a,b", ""]
_KEYS = ["a", "b", "read_ahead_kb", "on", "true", "1", "a-b", "a.b", "<<", "'k'", "k k"]
_PLAIN = ["a", "ssd", "mq-deadline", "yes", "on", "true", "NULL", "0", "-1", "42", "/dev/sda", "a b", "'q'", "[a, 1]",
          "{k: v}", "{k: [1, 2]}"]


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS if rng.random() < 0.3 else _PLAIN)


def _key(rng: random.Random) -> str:
    return rng.choice(_KEYS if rng.random() < 0.3 else _KEYS[:3])


def _random_text(rng: random.Random, depth: int = 0, indent: int = 0) -> str:
    lines = []
    for _ in range(rng.randint(1, 4)):
        pad = " " * indent
        key = _key(rng)
        roll = rng.random()
        if depth < 3 and roll < 0.25:
            lines.append(f"{pad}{key}:" + rng.choice(["", "  # c"]))
            lines.append(_random_text(rng, depth + 1, indent + rng.choice([1, 2, 4])).rstrip("\n"))
        elif depth < 3 and roll < 0.4:
            lines.append(f"{pad}{key}:")
            dash = " " * (indent + rng.choice([0, 2]))
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.5:
                    lines.append(f"{dash}- {_word(rng)}")
                else:
                    lines.append(f"{dash}- {_key(rng)}: {_word(rng)}")
                    if rng.random() < 0.5:
                        lines.append(f"{dash}  {_key(rng)}: {_word(rng)}")
        else:
            lines.append(f"{pad}{key}:{rng.choice([' ', '  '])}{_word(rng)}" + rng.choice(["", " # c", "#c"]))
    return "\n".join(lines) + "\n"


def test_generated_texts_are_read_as_pyyaml_reads_them_or_left_to_it() -> None:
    rng = random.Random(33)
    read = 0
    for _ in range(3000):
        read += _same_or_none(_random_text(rng))
    assert read > 300  # the comparison ran on texts the subset did read, not only on refusals


def test_a_cached_profile_is_loaded_without_importing_pyyaml(tmp_path: Path) -> None:
    """On a cache hit a shipped profile and the two it extends are read by the plain reader: yaml is never
    imported, and the profile is the same as when it was checked. (Copies ending in a comment: the texts as
    shipped are never checked, their verdicts ship with them: test_shipped_verdicts.py.)"""
    from tunectl.system.cache import ValidationCache

    library = tmp_path / "profiles"
    library.mkdir()
    for name in ("database", "balanced", "default"):
        (library / f"{name}.yaml").write_bytes((REPO / "profiles" / f"{name}.yaml").read_bytes() + b"# a copy\n")
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from tunectl.profile.resolve import load_profile\n"
        "from tunectl.system.cache import ValidationCache\n"
        f"p = load_profile('database', [Path({str(library)!r})], ValidationCache({str(tmp_path / 'validated')!r}))\n"
        "print(json.dumps({'yaml': 'yaml' in sys.modules, 'data': p.data, 'positions': repr(p.positions),\n"
        "                  'jsonschema': {'jsonschema', 'importlib.metadata'} & set(sys.modules) != set()}))\n")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert len(list(ValidationCache(tmp_path / "validated").dir.iterdir())) == 3  # all three checked, then cached
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    before, after = json.loads(first.stdout), json.loads(again.stdout)
    # The check (first) reads them with the plain reader too, and the schema passes them without jsonschema
    # (schema.fits_schema); the cache hit loads neither, nor importlib.metadata for jsonschema's version.
    assert before["yaml"] is False and after["yaml"] is False
    assert before["jsonschema"] is False and after["jsonschema"] is False
    assert after["data"] == before["data"] and after["positions"] == before["positions"]
