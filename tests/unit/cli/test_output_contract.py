"""The output contract: every --json document names its format and version and follows its shipped schema.

Every run_cli call of the suite with --json is validated against its schema (tests/harness.py); these
tests add what no other test runs: the error document for each kind of failure, --version, the
commands no fake-tree test reaches, and the bookkeeping (a schema, a changelog line and a man page
entry for every format).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from tests.fakesys import FakeTree
from tests.harness import REPO, check_documents, run_cli
from tests.tuning_helpers import Tunectl
from tunectl import __version__, schema
from tunectl.cli import COMMANDS, build_parser

PROFILE = "name: contract\nclasses:\n  ssd: {scheduler: mq-deadline, read_ahead_kb: 256}\n"


@pytest.fixture
def tun(fake_tree: FakeTree, tmp_path: Path) -> Tunectl:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "contract.yaml").write_text(PROFILE)
    return Tunectl(fake_tree, tmp_path / "state", [tmp_path / "profiles"])


def _actions() -> list[str]:
    """`status`, `mounts-check`, ...: every command and action the parser knows, as format names."""
    import argparse

    names = []
    for name, sub in build_parser()._subparsers._group_actions[0].choices.items():  # type: ignore[union-attr]
        actions = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        names += [f"{name}-{verb}" for verb in actions[0].choices] if actions else [name]
    return names


def test_every_command_has_a_versioned_format_and_a_valid_schema() -> None:
    assert set(_actions()) | {"version", "error"} == set(schema.VERSIONS)
    for name, version in schema.VERSIONS.items():
        s = schema.load(name)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["properties"]["format"] == {"const": f"tunectl-{name}"}, name
        assert s["properties"]["version"] == {"const": version}, name
        assert {"format", "version"} <= set(s["required"]), name


def test_the_changelog_has_a_line_for_every_format_at_its_version() -> None:
    text = (REPO / "tunectl" / "schema" / "CHANGELOG.md").read_text()
    for name, version in schema.VERSIONS.items():
        assert re.search(rf"^- `tunectl-{name}` {version}: ", text, re.M), f"tunectl-{name} {version} not in CHANGELOG.md"


SHAPES = REPO / "tests" / "golden" / "schema-shapes.json"


def _shape(value: object) -> object:
    """A schema without its prose: what a document may hold, the part a version stands for."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in ("description", "title", "$comment", "examples")}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def test_a_changed_shape_has_a_new_version() -> None:
    import hashlib

    now = {name: {"version": version,
                  "sha256": hashlib.sha256(json.dumps(_shape(schema.load(name)), sort_keys=True).encode()).hexdigest()}
           for name, version in sorted(schema.VERSIONS.items())}
    if os.environ.get("UPDATE_GOLDEN") == "1":
        SHAPES.write_text(json.dumps(now, indent=1) + "\n")
    pinned = json.loads(SHAPES.read_text())
    for name, current in now.items():
        was = pinned.get(name)
        assert was is not None, f"tunectl-{name} is new: pin its shape with UPDATE_GOLDEN=1"
        assert current["version"] >= was["version"], f"tunectl-{name}: version went down"
        assert current["sha256"] == was["sha256"] or current["version"] > was["version"], (
            f"tunectl-{name} changed shape at version {was['version']}: raise it in tunectl/schema/__init__.py, "
            "add a line to tunectl/schema/CHANGELOG.md, then pin the shape with UPDATE_GOLDEN=1")
        assert current == was, f"tunectl-{name} is at version {current['version']}: pin its shape with UPDATE_GOLDEN=1"


def test_the_schemas_ship_with_the_package() -> None:
    setup = (REPO / "setup.cfg").read_text()
    assert re.search(r"^\s*tunectl\.schema = .*\*\.json", setup, re.M) and "tunectl.schema\n" in setup
    assert sorted(p.name for p in schema.HERE.glob("tunectl-*.schema.json")) == \
        sorted(f"tunectl-{n}.schema.json" for n in schema.VERSIONS)


@pytest.mark.parametrize("argv", [["--version", "--json"], ["-V", "--json"], ["--json", "-V"]])
def test_version_as_a_document(argv: list[str]) -> None:
    r = run_cli(*argv)
    assert r.code == 0 and r.doc["tunectl"] == __version__
    assert r.doc["formats"]["tunectl-status"] == schema.VERSIONS["status"]


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_short_and_long_version_print_the_same_line(flag: str) -> None:
    r = run_cli(flag)
    assert (r.code, r.out, r.err) == (0, f"tunectl {__version__}\n", "")


def _error(r, code: str, exit_code: int) -> dict:
    assert r.code == exit_code, r
    assert r.doc["format"] == "tunectl-error" and r.doc["ok"] is False
    assert r.doc["error"]["code"] == code and r.doc["error"]["exit_code"] == exit_code
    last = r.err.splitlines()[-2 if r.doc["error"]["hint"] else -1]
    assert last.startswith("tunectl: error: ") or r.doc["error"]["diagnostics"], r.err
    return r.doc["error"]


@pytest.mark.parametrize("argv, where", [
    (["status", "--bogus"], "tunectl"),  # argparse finds leftovers at the top
    (["--json"], "tunectl"),
    (["nosuchcommand"], "tunectl"),
    (["mounts", "frobnicate"], "tunectl mounts"),
    (["udev", "monitor", "--count", "x"], "tunectl udev monitor"),
])
def test_a_usage_error_is_the_error_document(argv: list[str], where: str) -> None:
    r = run_cli(*argv, "--json") if "--json" not in argv else run_cli(*argv)
    error = _error(r, "usage", 2)
    assert error["where"] == where and error["hint"] == f"`{where} --help` lists the arguments"
    assert "usage:" not in r.out  # stdout is the one document


def test_a_usage_error_in_text_keeps_the_usage_line_and_the_prefix() -> None:
    r = run_cli("status", "--bogus")
    assert r.code == 2 and r.out == ""
    lines = r.err.splitlines()
    assert lines[0].startswith("usage: tunectl ")
    assert lines[-2] == "tunectl: error: unrecognized arguments: --bogus"
    r = run_cli("udev", "monitor", "--count", "x")
    assert r.err.splitlines()[-2] == "tunectl: error: udev monitor: argument --count: invalid int value: 'x'"
    assert lines[-1] == "hint: `tunectl --help` lists the arguments"


def test_an_unknown_device_is_the_error_document(tun: Tunectl) -> None:
    error = _error(tun("plan", "-p", "contract", "sdz", "--json"), "unknown-device", 2)
    assert error["where"] == "sdz" and "sdz" in error["message"] and "sda" in error["hint"]


def test_a_bad_profile_is_the_error_document(tun: Tunectl, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nclasses:\n  ssd: {scheduler: nope}\n")
    error = _error(tun("apply", "--check", "-p", str(bad), "--json"), "profile", 2)
    assert error["where"] == f"{bad}:3:20"
    assert [(d["line"], d["path"]) for d in error["diagnostics"]] == [(3, "$.classes.ssd.scheduler")]


def test_a_missing_profile_has_the_prefix_like_every_other_error(tun: Tunectl) -> None:
    r = tun("plan", "-p", "no-such-profile")
    assert r.code == 2 and r.err.startswith("tunectl: error: profile 'no-such-profile' not found"), r.err
    error = _error(tun("plan", "-p", "no-such-profile", "--json"), "profile", 2)
    assert error["where"] is None and "no-such-profile" in error["diagnostics"][0]["message"]


def test_the_error_document_states_the_exit_code_of_every_class(tun: Tunectl, tmp_path: Path) -> None:
    state = tmp_path / "state-file"
    state.write_text("")  # a file where the state directory should be: exit 5
    profile = tmp_path / "profiles" / "contract.yaml"
    r = run_cli("--sysfs-root", str(tun.tree.root), "--state-dir", str(state), "apply", "-p", str(profile), "--json")
    assert r.doc["error"]["exit_code"] == r.code == 5 and r.doc["error"]["code"] == "state"


def test_import_tuned_document(tmp_path: Path) -> None:
    conf = tmp_path / "mine" / "tuned.conf"
    conf.parent.mkdir()
    conf.write_text("[main]\nsummary=mine\n[disk]\nreadahead=>4096\nelevator=mq-deadline\n[sysctl]\nvm.swappiness=10\n")
    r = run_cli("profile", "import-tuned", str(conf.parent), "--json")
    assert r.code == 0 and r.doc["format"] == "tunectl-profile-import-tuned" and r.doc["unconverted"]


@pytest.fixture(params=["tunectl", "tunectl_info"])
def ansible_module(request, tmp_path):
    """An Ansible module of the collection, a reader of tunectl's documents that ships with it
    (StepFailed, Tunectl and error_text come from its module_utils)."""
    import importlib.util
    import sys

    from tests.ansible_helpers import MODULES, collections_path

    sys.path.insert(0, str(collections_path(tmp_path)))
    try:
        spec = importlib.util.spec_from_file_location(f"tunectl_module_{request.param}", MODULES / f"{request.param}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        from ansible_collections.tunectl.tunectl.plugins.module_utils import tunectl_cli
    except ImportError:
        pytest.skip("ansible is not installed")
    finally:
        sys.path.remove(str(collections_path(tmp_path)))
    module.error_text = tunectl_cli.error_text
    return module


def test_the_ansible_module_reads_the_error_document(ansible_module) -> None:
    module = ansible_module
    doc = run_cli("status", "--bogus", "--json").doc
    assert module.error_text(doc) == ("unrecognized arguments: --bogus\n"
                                      "hint: `tunectl --help` lists the arguments")


def test_a_document_that_drifts_from_its_schema_is_caught() -> None:
    good = run_cli("--version", "--json").out
    check_documents(good)
    doc = json.loads(good)
    with pytest.raises(AssertionError):
        check_documents(json.dumps(dict(doc, surprise=1)))
    with pytest.raises(AssertionError):
        check_documents(json.dumps(dict(doc, version=doc["version"] + 1)))


def test_every_command_group_is_listed() -> None:
    assert {n.split("-")[0] for n in schema.VERSIONS} - {"version", "error"} == set(COMMANDS)


def test_the_ansible_module_reads_the_versions_this_tunectl_prints(ansible_module) -> None:
    module = ansible_module
    reads = module.READS
    assert reads == {k: schema.VERSIONS[k.removeprefix("tunectl-")] for k in reads}

    class Fake:
        def __init__(self, doc: dict) -> None:
            self.doc = doc

        def run_command(self, argv, environ_update):
            return 0, json.dumps(self.doc), ""

    newer = {"format": "tunectl-verify", "version": schema.VERSIONS["verify"] + 1, "in_sync": True}
    reads = dict(reads, **{"tunectl-verify": schema.VERSIONS["verify"]})  # a format every module may read
    with pytest.raises(module.StepFailed,
                       match=rf"printed tunectl-verify version \d+; this module reads version {schema.VERSIONS['verify']}"):
        module.Tunectl(Fake(newer), "tunectl", reads).run(["verify"], (0,))
    with pytest.raises(module.StepFailed, match="printed None version None; this module reads no such format"):
        module.Tunectl(Fake({"in_sync": True}), "tunectl", reads).run(["verify"], (0,))
    doc = dict(newer, version=schema.VERSIONS["verify"])
    assert module.Tunectl(Fake(doc), "tunectl", reads).run(["verify"], (0,)) == doc


def _schema_words(node: object, out: set[str]) -> set[str]:
    """Every property name, enum value and const anywhere in a schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                out.update(value)
            elif key == "enum" and isinstance(value, list):
                out.update(str(v) for v in value)
            elif key == "const":
                out.add(str(value))
            _schema_words(value, out)
    elif isinstance(node, list):
        for value in node:
            _schema_words(value, out)
    return out


# Named in a CHANGELOG line but rightly absent from that format's schema: a key the version removed, sysfs files
# the line explains by, and a value of a free-text field.
NOT_KEYS = {("explain", "kernel_default"), ("preload-replay", "stat"), ("preload-replay", "inflight"),
            ("preload-replay", "none")}


def test_every_key_a_changelog_line_names_is_in_that_formats_schema() -> None:
    """A reader writes code against the CHANGELOG's words: each `key` a line names for `tunectl-NAME` is a key (or a
    value) its shipped schema has, so a rename in one and not the other fails here."""
    text = (REPO / "tunectl" / "schema" / "CHANGELOG.md").read_text()
    missing = []
    for line in text.splitlines():
        head = re.match(r"- `tunectl-([\w-]+)` \d+", line)
        if not head or head.group(1) not in schema.VERSIONS:
            continue
        known = _schema_words(schema.load(head.group(1)), set())
        for word in re.findall(r"`([a-z_][a-z0-9_]*)`", line):
            if word not in known and (head.group(1), word) not in NOT_KEYS:
                missing.append(f"tunectl-{head.group(1)}: `{word}`")
    assert not missing, missing
