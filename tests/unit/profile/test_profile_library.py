"""The shipped profile library, `profile list|show`, tuned import, and the schema against the catalogue."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.harness import run_cli
from tests.tuned_profiles import tuned_profile_dir
from tunectl.attributes import IOSCHED, LEGACY_SCHEDULERS, QUEUE, SCHEDULERS
from tunectl.context import Context
from tunectl.devices.classes import CLASSES, DM_TYPES
from tunectl.profile.library import shipped_profile_dir
from tunectl.profile.schema import load_schema

SHIPPED = sorted(p.stem for p in shipped_profile_dir().glob("*.yaml"))
TUNED_DIR = tuned_profile_dir()
TUNED = sorted(p.parent.name for p in TUNED_DIR.glob("*/tuned.conf")) if TUNED_DIR.is_dir() else []
needs_tuned = pytest.mark.skipif(
    not TUNED, reason=f"no tuned profiles under {TUNED_DIR} (scripts/bootstrap --test unpacks Debian's tuned)")


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Only the shipped library on the search path (no /etc/tunectl), a fresh state directory."""
    monkeypatch.chdir(tmp_path)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state")}

    def run(*argv: str) -> tuple[int, str, str]:
        context = Context.create(state_dir=str(tmp_path / "state"), env=env)
        context.search_path = [shipped_profile_dir()]
        r = run_cli(*argv, context=context, propagate=True)
        return r.code, r.out, r.err

    return run


def test_the_library_has_the_profiles_the_spec_names() -> None:
    assert set(SHIPPED) >= {"default", "balanced", "throughput-performance", "latency-performance", "virtual-guest",
                            "powersave", "desktop", "database", "verity-readonly"}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_validates_without_warnings(cli, name: str) -> None:
    path = shipped_profile_dir() / f"{name}.yaml"
    code, out, err = cli("profile", "validate", str(path))
    assert (code, err) == (0, "")
    assert out == f"{path}: ok\n"
    code, out, err = cli("profile", "validate", name)  # by name, through the search path
    assert (code, out, err) == (0, f"{name}: ok\n", "")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_name_matches_its_file(name: str) -> None:
    data = yaml.safe_load((shipped_profile_dir() / f"{name}.yaml").read_text())
    assert data["name"] == name
    assert data["description"] and "\n" not in data["description"]


@pytest.mark.parametrize("name", SHIPPED)
def test_show_prints_a_resolved_profile_that_validates_to_the_same(cli, tmp_path: Path, name: str) -> None:
    code, shown, err = cli("profile", "show", name)
    assert (code, err) == (0, "")
    (tmp_path / "resolved.yaml").write_text(shown)
    code, out, err = cli("profile", "validate", "resolved.yaml")
    assert (code, err) == (0, "")
    original = json.loads(cli("--json", "profile", "show", name)[1])["profile"]
    again = json.loads(cli("--json", "profile", "show", "resolved.yaml")[1])["profile"]
    assert again == original


@pytest.mark.parametrize("name", SHIPPED)
def test_explain_cites_the_line_each_value_comes_from(cli, name: str) -> None:
    code, out, err = cli("profile", "show", name, "--explain")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"# {name}: ")
    cited = 0
    for line in lines:
        m = re.match(r"^( *)(?:- )?([A-Za-z_]+): .*  # (/.+):(\d+)$", line)
        if m is None:
            continue
        key, file, number = m.group(2), m.group(3), int(m.group(4))
        source = Path(file).read_text().splitlines()[number - 1]
        assert re.search(rf"(^|[\s{{,]){key}:", source), (line, source)
        cited += 1
    assert cited >= 4
    leaves = [line for line in lines if not line.startswith("#") and not line.endswith(":") and ": []" not in line]
    assert all("  # /" in line for line in leaves), leaves


def test_explain_shows_the_override(cli) -> None:
    code, out, _ = cli("profile", "show", "virtual-guest", "--explain")
    lines = out.splitlines()
    block = lines[lines.index("  rotational:") + 1:]
    assert re.match(r"^    scheduler: \[none\] +# .*/virtual-guest\.yaml:\d+$", block[0])
    assert re.match(r"^    read_ahead_kb: \{min: 4096\} +# .*/throughput-performance\.yaml:\d+ \(a floor: raised to 4096 "
                    r"when below, never lowered\)$", block[1])
    doc = json.loads(cli("--json", "profile", "show", "virtual-guest", "--explain")[1])
    origin = doc["origins"]["$.classes.rotational.read_ahead_kb"]
    assert origin["file"].endswith("throughput-performance.yaml") and origin["line"] > 1


def test_list_shows_every_profile_with_its_description(cli) -> None:
    code, out, err = cli("profile", "list")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "DESCRIPTION", "FILE"]
    assert [line.split()[0] for line in lines[1:]] == SHIPPED
    listed = json.loads(cli("--json", "profile", "list")[1])["profiles"]
    for entry in listed:
        data = yaml.safe_load(Path(entry["file"]).read_text())
        assert entry["description"] == data["description"]
        assert entry["description"] in out


@needs_tuned
def test_import_tuned_throughput_performance_validates(cli, tmp_path: Path) -> None:
    code, out, err = cli("profile", "import-tuned", "--tuned-dir", str(TUNED_DIR), "throughput-performance")
    assert (code, err) == (0, "")
    (tmp_path / "tp.yaml").write_text(out)
    code, checked, err = cli("profile", "validate", "tp.yaml")
    assert (code, checked, err) == (0, "tp.yaml: ok\n", "")
    data = json.loads(cli("--json", "profile", "show", "tp.yaml")[1])["profile"]
    assert data["classes"]["rotational"]["read_ahead_kb"] == {"min": 4096}  # tuned's readahead=>4096


@needs_tuned
@pytest.mark.parametrize("name", TUNED)
def test_every_tuned_profile_imports_to_a_valid_profile(cli, tmp_path: Path, name: str) -> None:
    code, out, err = cli("profile", "import-tuned", "--tuned-dir", str(TUNED_DIR), name)
    assert code == 0, err
    (tmp_path / "imported.yaml").write_text(out)
    code, checked, err = cli("profile", "validate", "imported.yaml")
    assert (code, err) == (0, ""), err


# --- the schema: valid, and the same rules as the attribute catalogue it was generated from ----

def test_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def _number_or_range(s: dict) -> dict:
    """An integer setting: a number, or a range {min, max} of numbers with the same limits (SPEC.md §3)."""
    number, bounds = s["anyOf"]
    assert bounds["type"] == "object" and bounds["title"] == "range" and bounds["additionalProperties"] is False
    assert bounds["properties"] == {"min": number, "max": number}
    return number


def test_schema_iosched_knobs_match_the_catalogue() -> None:
    props = load_schema()["$defs"]["iosched"]["properties"]
    catalogue = {name: (sched, attr) for sched, knobs in IOSCHED.items() for name, attr in knobs.items()}
    assert set(props) == set(catalogue)
    for name, (sched, attr) in catalogue.items():
        s = props[name]
        number = _number_or_range(s)
        assert (number["type"], number["minimum"], number["maximum"]) == ("integer", attr.minimum, attr.maximum), name
        assert s.get("x-unit", "") == attr.unit, name
        assert s["description"].startswith(f"{sched}: {attr.doc}"), name
        if attr.unit:
            assert f"({attr.unit})" in s["description"], name


def test_schema_queue_attributes_match_the_catalogue() -> None:
    props = load_schema()["$defs"]["queue"]["properties"]
    assert set(props) == set(QUEUE) - {"read_ahead_kb"}
    for name, s in props.items():
        attr = QUEUE[name]
        if attr.is_int:
            number = _number_or_range(s)
            assert (number["type"], number["minimum"], number["maximum"], s.get("x-unit", "")) == \
                ("integer", attr.minimum, attr.maximum, attr.unit), name
        else:
            assert s["enum"] == list(attr.choices), name
        assert s["description"].startswith(attr.doc), name  # the words --help and the errors show
        if attr.unit:
            assert s["description"].endswith(f"({attr.unit})"), name
    ra = load_schema()["$defs"]["read_ahead_kb"]["anyOf"][0]
    assert (ra["minimum"], ra["maximum"]) == (QUEUE["read_ahead_kb"].minimum, QUEUE["read_ahead_kb"].maximum)


def test_schema_names_match_the_catalogue() -> None:
    schema = load_schema()
    assert schema["$defs"]["scheduler_name"]["enum"] == list(SCHEDULERS) + list(LEGACY_SCHEDULERS)
    assert list(schema["properties"]["classes"]["properties"]) == list(CLASSES)
    assert schema["$defs"]["class_name"]["enum"] == list(CLASSES)
    assert schema["$defs"]["dm_type_name"]["enum"] == list(DM_TYPES)


def test_shipped_profiles_are_plain_files_in_the_package_data() -> None:
    assert all(os.access(shipped_profile_dir() / f"{n}.yaml", os.R_OK) for n in SHIPPED)
