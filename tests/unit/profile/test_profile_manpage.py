"""man/tunectl-profile.5 against the schema: every key with its range, nothing the schema does not know."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO, run_cli
from tunectl.profile.schema import load_schema

MAN = REPO / "man" / "tunectl-profile.5"
SCHEMA = load_schema()
DEFS = SCHEMA["$defs"]


def roff_text(cell: str, strip: bool = True) -> str:
    """A roff table cell (or an example line) as plain text."""
    cell = re.sub(r"\\f[BIRP]", "", cell)
    for escape, char in (("\\-", "-"), ("\\(en", "\u2013"), ("\\(em", "\u2014"), ("\\(aq", "'"), ("\\(dq", '"'),
                         ("\\&", ""), ("\\e", "\\")):
        cell = cell.replace(escape, char)
    return cell.strip() if strip else cell.rstrip()


def tables() -> dict[str, list[list[str]]]:
    """Tables marked `.\\" keys: NAME`: their rows (header left out) as lists of plain-text cells."""
    lines = MAN.read_text().splitlines()
    found: dict[str, list[list[str]]] = {}
    i = 0
    while i < len(lines):
        m = re.match(r'^\.\\" keys: (\S+)', lines[i])
        i += 1
        if not m:
            continue
        assert lines[i] == ".TS"
        end = lines.index(".TE", i)
        body = "\n".join(lines[i + 1:end])
        body = re.sub(r"T\{\n(.*?)\nT\}", lambda t: t.group(1).replace("\n", " "), body, flags=re.S)
        rows = body.split("\n")
        fmt_end = next(n for n, row in enumerate(rows) if row.endswith("."))
        data = [row for row in rows[fmt_end + 2:] if row not in ("_", "=")]
        found[m.group(1)] = [[roff_text(c) for c in row.split("\t")] for row in data]
        i = end
    return found


TABLES = tables()


def keyed(section: str) -> dict[str, list[str]]:
    rows = TABLES[section]
    keys = [row[0] for row in rows]
    assert len(keys) == len(set(keys)), f"{section}: a key is listed twice"
    return {row[0]: row[1:] for row in rows}


def span(schema: dict) -> str:
    number = schema["anyOf"][0] if "anyOf" in schema else schema  # a number or a range {min, max} of numbers
    return f"{number['minimum']}\u2013{number['maximum']}"


def test_every_table_is_there() -> None:
    assert set(TABLES) == {"top-level", "classes", "settings", "schedulers", "iosched", "queue", "match", "mounts",
                           "alignment"}


def test_top_level_keys() -> None:
    assert set(keyed("top-level")) == set(SCHEMA["properties"])


def test_classes() -> None:
    assert list(keyed("classes")) == list(SCHEMA["properties"]["classes"]["properties"])


def test_settings_keys_with_the_read_ahead_range() -> None:
    rows = keyed("settings")
    assert set(rows) == set(DEFS["settings"]["properties"]) | set(DEFS["device_entry"]["properties"])
    ra = DEFS["read_ahead_kb"]["anyOf"][0]
    assert rows["read_ahead_kb"][1:3] == [span(ra), ra["x-unit"]]


def test_schedulers_and_legacy_names() -> None:
    rows = keyed("schedulers")
    names = DEFS["scheduler_name"]["enum"]
    assert set(rows) | {legacy for legacy, *_ in rows.values() if legacy != "\u2014"} == set(names)


def test_iosched_knobs_with_scheduler_range_and_unit() -> None:
    rows = keyed("iosched")
    knobs = DEFS["iosched"]["properties"]
    assert set(rows) == set(knobs)
    for name, schema in knobs.items():
        scheduler, rng, unit, _meaning = rows[name]
        assert schema["description"].startswith(f"{scheduler}: "), name
        assert rng == span(schema), name
        assert unit == schema.get("x-unit", "\u2014"), name


def test_queue_attributes_with_range_and_unit() -> None:
    rows = keyed("queue")
    attrs = DEFS["queue"]["properties"]
    assert set(rows) == set(attrs)
    for name, schema in attrs.items():
        rng, unit, _meaning = rows[name]
        if "enum" in schema:
            assert rng == " | ".join(schema["enum"]), name
        else:
            assert rng == span(schema), name
            assert unit == schema.get("x-unit", "\u2014"), name


def test_match_keys() -> None:
    rows = keyed("match")
    assert set(rows) == set(DEFS["match"]["properties"])
    assert all(dm in rows["dm_type"][1] for dm in DEFS["dm_type_name"]["enum"])


def test_mount_keys() -> None:
    rows = keyed("mounts")
    assert set(rows) == set(DEFS["mount_entry"]["properties"])
    assert rows["discard"][0] == " | ".join(DEFS["mount_entry"]["properties"]["discard"]["enum"])


def test_alignment() -> None:
    rows = keyed("alignment")
    boundary = SCHEMA["properties"]["alignment"]["properties"]["boundary_kib"]
    assert set(rows) == set(SCHEMA["properties"]["alignment"]["properties"])
    assert rows["boundary_kib"][:2] == [span(boundary), boundary["x-unit"]]


def test_limits_in_the_page_are_the_code_limits() -> None:
    from tunectl.profile.checks import MAX_DIAGNOSTICS
    from tunectl.profile.reader import MAX_DEPTH, MAX_PROFILE_BYTES, MAX_VALUES

    text = MAN.read_text()
    assert MAX_PROFILE_BYTES == 1 << 20 and "at most 1 MiB" in text
    assert f"at most {MAX_VALUES} values" in text
    assert f"nests at most {MAX_DEPTH} levels" in text
    assert f"after {MAX_DIAGNOSTICS} problems" in text


def examples() -> list[str]:
    blocks = re.findall(r"^\.EX\n(.*?)^\.EE", MAN.read_text(), flags=re.S | re.M)
    return ["\n".join(roff_text(line, strip=False) for line in block.splitlines()) + "\n"
            for block in blocks if "classes:" in block or "devices:" in block]


def test_the_examples_are_valid_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = examples()
    assert len(found) == 3
    monkeypatch.chdir(tmp_path)
    for n, text in enumerate(found):
        # An example that extends its own name lives in a local directory ahead of the shipped one.
        own = re.search(r"/etc/tunectl/profiles/([\w-]+)\.yaml", text)
        name = own.group(1) if own else f"example{n}"
        (tmp_path / f"{name}.yaml").write_text(text)
        r = run_cli("profile", "validate", name, env={"TUNECTL_PROFILE_PATH": str(tmp_path),
                                                      "TUNECTL_STATE_DIR": str(tmp_path / "state")})
        assert (r.code, r.err) == (0, ""), text


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_the_page_renders_without_warnings() -> None:
    result = subprocess.run(["groff", "-t", "-man", "-ww", "-z", str(MAN)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert (result.returncode, result.stderr) == (0, "")
