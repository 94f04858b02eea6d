"""Profile errors: one test per error class, with the exact message and position.

Every case runs the real CLI in-process (`tunectl profile validate FILE`) in a
scratch directory, with a fresh state directory, so the uncached checker runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.harness import REPO, CliResult, run_cli
from tunectl.profile.reader import MAX_PROFILE_BYTES, json_path
from tunectl.profile.resolve import load_profile, resolve_profile
from tunectl.system.cache import ValidationCache

VALID = "name: ok\nclasses:\n  ssd: {scheduler: none}\n"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run tunectl in `tmp_path` (file names in messages stay short); profiles there are on the search path."""
    monkeypatch.chdir(tmp_path)
    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "TUNECTL_PROFILE_PATH": "."}

    def run(*argv: str) -> CliResult:
        return run_cli(*argv, env=env, propagate=True)

    return run


def write(name: str, content: str | bytes) -> str:
    path = Path(name)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return name


def validate_text(cli, text: str | bytes, name: str = "p.yaml") -> CliResult:
    return cli("profile", "validate", write(name, text))


def assert_errors(result: CliResult, *lines: str) -> None:
    assert result.code == 2, result
    assert result.lines == list(lines)
    assert "Traceback" not in result.err
    assert result.out == ""


# --- YAML itself -----------------------------------------------------------------------------

def test_yaml_syntax_error_keeps_its_position(cli) -> None:
    r = validate_text(cli, "name: x\nclasses:\n  ssd: {scheduler: [none\n  nvme: {}\n")
    problem = "did not find expected ',' or ']'" if yaml.__with_libyaml__ else "expected ',' or ']', but got '<stream end>'"
    assert_errors(r, f"p.yaml:4:7: $: YAML syntax: {problem} (while parsing a flow sequence started at line 3, column 20)")


def test_yaml_tab_indentation(cli) -> None:
    r = validate_text(cli, "classes:\n\tssd: {}\n")
    problem = "found character that cannot start any token" if yaml.__with_libyaml__ else \
        "found character '\\t' that cannot start any token"
    assert_errors(r, f"p.yaml:2:1: $: YAML syntax: {problem}")


def test_duplicate_key(cli) -> None:
    r = validate_text(cli, "name: a\nclasses:\n  ssd:\n    read_ahead_kb: 128\n    read_ahead_kb: 256\n")
    assert_errors(r, "p.yaml:5:5: $.classes.ssd.read_ahead_kb: duplicate key 'read_ahead_kb' (first at line 4); "
                     "YAML would silently keep only the last one")


def test_duplicate_key_and_schema_errors_together(cli) -> None:
    r = validate_text(cli, "name: a\nname: b\nclasses:\n  ssd: {scheduler: nonee}\n  nvme: {scheduler: *x}\n")
    assert_errors(r,
                  "p.yaml:2:1: $.name: duplicate key 'name' (first at line 1); YAML would silently keep only the last one",
                  "p.yaml:4:20: $.classes.ssd.scheduler: unknown scheduler 'nonee'; did you mean 'none'?",
                  "p.yaml:5:21: $.classes.nvme.scheduler: alias *x has no anchor &x before it")


def test_a_misspelt_scheduler_is_offered_the_current_name_not_the_legacy_one(cli) -> None:
    """'nope' is as close to 'noop' as to 'none'; noop only warns (write 'none' instead), so none is offered."""
    r = validate_text(cli, "name: a\nclasses:\n  ssd: {scheduler: nope}\n")
    assert_errors(r, "p.yaml:3:20: $.classes.ssd.scheduler: unknown scheduler 'nope'; did you mean 'none'?")


def test_yaml_features_a_profile_does_not_use(cli) -> None:
    r = validate_text(cli, "a: &x [1, 2]\nb: *x\nc: *y\nd: !foo bar\n? [x]\n: 1\n<<: {a: 1}\n---\nx: 1\n")
    assert_errors(r,
                  "p.yaml:3:4: $.c: alias *y has no anchor &y before it",
                  "p.yaml:4:4: $.d: YAML tag !foo is not supported in a profile",
                  "p.yaml:5:3: $: mapping keys must be plain names, not lists, mappings or aliases",
                  "p.yaml:7:1: $: YAML merge keys (<<) are not supported; use extends: or an alias",
                  "p.yaml:8:1: $: a profile is one YAML document; a second one starts here")


def test_yaml_1_2_scalars(cli) -> None:
    """yes/no/on/off are strings (so `discard: off` works), only true/false are booleans."""
    r = validate_text(cli, "classes:\n  ssd: {scheduler: none}\nmounts:\n  - match: {rotational: no}\n    discard: off\n")
    assert_errors(r, "p.yaml:4:25: $.mounts[0].match.rotational: expected true/false, got a string ('no')")
    ok = validate_text(cli, "classes:\n  ssd: {scheduler: none}\nmounts:\n  - match: {rotational: false}\n    discard: off\n")
    assert ok.code == 0 and ok.err == ""


# --- keys and names ----------------------------------------------------------------------------

def test_unknown_key_with_did_you_mean(cli) -> None:
    r = validate_text(cli, "name: a\ndescripton: x\nclasses:\n  ssd:\n    read_ahead: 128\n    iosched: {read_expir: 100}\n")
    assert_errors(r,
                  "p.yaml:2:1: $.descripton: unknown key 'descripton'; did you mean 'description'?",
                  "p.yaml:5:5: $.classes.ssd.read_ahead: unknown key 'read_ahead'; did you mean 'read_ahead_kb'?",
                  "p.yaml:6:15: $.classes.ssd.iosched.read_expir: unknown iosched knob 'read_expir'; "
                  "did you mean 'read_expire'?")


def test_unknown_key_without_a_close_match_lists_the_keys(cli) -> None:
    r = validate_text(cli, "name: a\nzzzz: 1\n")
    assert_errors(r, "p.yaml:2:1: $.zzzz: unknown key 'zzzz'; expected one of: "
                     "alignment, classes, description, devices, extends, mounts, name")


def test_unknown_class_with_did_you_mean(cli) -> None:
    r = validate_text(cli, "classes:\n  rotatinal: {scheduler: none}\ndevices:\n  - match: {class: [ssd, nvmee]}\n"
                           "    scheduler: none\n")
    assert_errors(r,
                  "p.yaml:2:3: $.classes.rotatinal: unknown device class 'rotatinal'; did you mean 'rotational'?",
                  "p.yaml:4:26: $.devices[0].match.class[1]: unknown device class 'nvmee'; did you mean 'nvme'?")


def test_bad_scheduler_with_did_you_mean(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd: {scheduler: mq-dedline}\n  nvme: {scheduler: [none, kyberr]}\n"
                           "  mmc: {scheduler: fifo}\n")
    assert_errors(r,
                  "p.yaml:2:20: $.classes.ssd.scheduler: unknown scheduler 'mq-dedline'; did you mean 'mq-deadline'?",
                  "p.yaml:3:28: $.classes.nvme.scheduler[1]: unknown scheduler 'kyberr'; did you mean 'kyber'?",
                  "p.yaml:4:20: $.classes.mmc.scheduler: unknown scheduler 'fifo'; expected one of: "
                  "none, mq-deadline, bfq, kyber, deadline, cfq, noop")


def test_legacy_scheduler_is_a_warning_and_mapped(cli) -> None:
    r = validate_text(cli, "classes:\n  rotational:\n    scheduler: deadline\n  ssd: {scheduler: [noop, cfq]}\n")
    assert r.code == 0
    assert r.lines == [
        "p.yaml:3:16: $.classes.rotational.scheduler: warning: legacy scheduler 'deadline' is mapped to 'mq-deadline' "
        "on blk-mq kernels; write that instead",
        "p.yaml:4:21: $.classes.ssd.scheduler[0]: warning: legacy scheduler 'noop' is mapped to 'none' "
        "on blk-mq kernels; write that instead",
        "p.yaml:4:27: $.classes.ssd.scheduler[1]: warning: legacy scheduler 'cfq' is mapped to 'bfq' "
        "on blk-mq kernels; write that instead",
    ]
    assert r.out == "p.yaml: ok (3 warnings)\n"
    shown = cli("--json", "profile", "show", "p.yaml")
    assert shown.code == 0
    classes = json.loads(shown.out)["profile"]["classes"]
    assert classes["rotational"]["scheduler"] == ["mq-deadline"]
    assert classes["ssd"]["scheduler"] == ["none", "bfq"]


def test_knob_not_of_the_chosen_scheduler(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd:\n    scheduler: mq-deadline\n    iosched: {slice_idle: 0, read_expire: 100}\n"
                           "  nvme:\n    scheduler: [none, kyber]\n    iosched: {front_merges: 0}\n")
    assert_errors(r,
                  "p.yaml:4:15: $.classes.ssd.iosched.slice_idle: 'slice_idle' is a knob of bfq, "
                  "not of the chosen scheduler mq-deadline",
                  "p.yaml:7:15: $.classes.nvme.iosched.front_merges: 'front_merges' is a knob of mq-deadline, "
                  "not of the chosen scheduler none or kyber")


def test_knob_added_under_an_inherited_scheduler(cli) -> None:
    write("base.yaml", "classes:\n  ssd:\n    scheduler: mq-deadline\n")
    r = validate_text(cli, "extends: base\nclasses:\n  ssd:\n    iosched: {slice_idle: 0}\n")
    assert_errors(r, "p.yaml:4:15: $.classes.ssd.iosched.slice_idle: 'slice_idle' is a knob of bfq, "
                     "not of the chosen scheduler mq-deadline (inherited from base.yaml:3)")


def test_scheduler_replacing_an_inherited_one_warns_about_its_knobs(cli) -> None:
    write("base.yaml", "classes:\n  ssd:\n    scheduler: mq-deadline\n    iosched: {read_expire: 100}\n")
    r = validate_text(cli, "extends: base\nclasses:\n  ssd:\n    scheduler: bfq\n")
    assert r.code == 0
    assert r.lines == ["p.yaml:4:16: $.classes.ssd.scheduler: warning: inherited iosched knobs 'read_expire' "
                       "(base.yaml:4) do not apply to the chosen scheduler bfq; plan will skip them"]


# --- values --------------------------------------------------------------------------------------

def test_out_of_range(cli) -> None:
    r = validate_text(cli, "classes:\n  rotational:\n    scheduler: mq-deadline\n"
                           "    iosched: {read_expire: 0, fifo_batch: 5000}\n"
                           "    read_ahead_kb: 70000\n    queue: {nr_requests: 2, wbt_lat_usec: -2}\n"
                           "alignment: {boundary_kib: 2}\n")
    assert_errors(r,
                  "p.yaml:4:28: $.classes.rotational.iosched.read_expire: 0 is out of range: allowed 1 to 3600000 ms",
                  "p.yaml:4:43: $.classes.rotational.iosched.fifo_batch: 5000 is out of range: allowed 1 to 1024 requests",
                  "p.yaml:5:20: $.classes.rotational.read_ahead_kb: 70000 is out of range: allowed 0 to 65536 KiB",
                  "p.yaml:6:26: $.classes.rotational.queue.nr_requests: 2 is out of range: allowed 4 to 65536 requests",
                  "p.yaml:6:43: $.classes.rotational.queue.wbt_lat_usec: -2 is out of range: allowed -1 to 1000000000 us",
                  "p.yaml:7:27: $.alignment.boundary_kib: 2 is out of range: allowed 4 to 1048576 KiB")


def test_huge_number_is_out_of_range_not_a_crash(cli) -> None:
    r = validate_text(cli, f"classes:\n  ssd:\n    read_ahead_kb: {'9' * 200}\n")
    assert_errors(r, "p.yaml:3:20: $.classes.ssd.read_ahead_kb: a 200-digit number is out of range: allowed 0 to 65536 KiB")
    r = validate_text(cli, f"classes:\n  ssd:\n    read_ahead_kb: {'9' * 5000}\n")
    assert_errors(r, f"p.yaml:3:20: $.classes.ssd.read_ahead_kb: '{'9' * 55}...' is not a valid YAML int")


def test_wrong_type(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd:\n    scheduler: mq-deadline\n"
                           "    iosched: {read_expire: \"150 ms\", write_expire: 1.5, front_merges: true}\n"
                           "    read_ahead_kb: [1]\n    queue: {write_cache: 1}\n"
                           "devices:\n  - match: {rotational: yes}\n    scheduler: 5\nmounts: {}\n")
    assert_errors(r,
                  "p.yaml:4:28: $.classes.ssd.iosched.read_expire: expected an integer number of ms or a range "
                  "{min: N, max: M}, got a string ('150 ms')",
                  "p.yaml:4:52: $.classes.ssd.iosched.write_expire: expected an integer number of ms or a range "
                  "{min: N, max: M}, got a number (1.5)",
                  "p.yaml:4:71: $.classes.ssd.iosched.front_merges: expected an integer or a range {min: N, max: M}, "
                  "got a boolean",
                  "p.yaml:5:20: $.classes.ssd.read_ahead_kb: expected an integer number of KiB or a string or a range "
                  "{min: N, max: M} (read-ahead window: KiB as an integer 0-65536, or a size such as \"4 MiB\", "
                  "or a range {min: N, max: M} of those), got a list",
                  "p.yaml:6:26: $.classes.ssd.queue.write_cache: expected one of: write back, write through; got an integer (1)",
                  "p.yaml:8:25: $.devices[0].match.rotational: expected true/false, got a string ('yes')",
                  "p.yaml:9:16: $.devices[0].scheduler: expected a scheduler name or a list (I/O scheduler, or a "
                  "preference list: the first one the device offers wins), got an integer (5)",
                  "p.yaml:10:9: $.mounts: expected a list, got a mapping")


def test_integral_float_is_not_an_integer(cli) -> None:
    """JSON Schema calls 150.0 an integer; sysfs would refuse "150.0"."""
    r = validate_text(cli, "classes:\n  ssd:\n    scheduler: mq-deadline\n    iosched: {read_expire: 150.0}\n")
    assert_errors(r, "p.yaml:4:28: $.classes.ssd.iosched.read_expire: expected an integer number of ms or a range "
                     "{min: N, max: M}, got a number (150.0)")


def test_bad_unit_string(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd: {read_ahead_kb: \"4 parsecs\"}\n  nvme: {read_ahead_kb: \"1000 B\"}\n"
                           "devices:\n  - match: {size: {min: ten GiB}}\n    read_ahead_kb: \"4MiB\"\n")
    assert_errors(r,
                  "p.yaml:2:24: $.classes.ssd.read_ahead_kb: '4 parsecs' is not a valid size: a number with an optional "
                  "unit B, K/KiB, M/MiB, G/GiB, T/TiB, e.g. \"4 MiB\"",
                  "p.yaml:3:25: $.classes.nvme.read_ahead_kb: '1000 B' is not a whole number of KiB",
                  "p.yaml:5:25: $.devices[0].match.size.min: 'ten GiB' is not a valid size: a number with an optional "
                  "unit B, K/KiB, M/MiB, G/GiB, T/TiB, e.g. \"100 GiB\"")


def test_units_that_are_accepted(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd: {read_ahead_kb: \"4 MiB\"}\n  nvme: {read_ahead_kb: 4096}\n"
                           "  mmc: {read_ahead_kb: \"64MiB\"}\ndevices:\n  - match: {size: {min: \"100 GiB\", max: 2 TiB}}\n"
                           "    read_ahead_kb: \"512 KiB\"\n")
    assert r.code == 0 and r.err == ""
    shown = json.loads(cli("--json", "profile", "show", "p.yaml").out)["profile"]
    assert [shown["classes"][c]["read_ahead_kb"] for c in ("ssd", "nvme", "mmc")] == [4096, 4096, 65536]
    assert shown["devices"][0]["match"]["size"] == {"min": 100 << 30, "max": 2 << 40}
    assert shown["devices"][0]["read_ahead_kb"] == 512


def test_read_ahead_over_the_limit_with_a_unit(cli) -> None:
    r = validate_text(cli, "classes:\n  rotational:\n    read_ahead_kb: \"128 MiB\"\n")
    assert_errors(r, "p.yaml:3:20: $.classes.rotational.read_ahead_kb: '128 MiB' is 131072 KiB, out of range: "
                     "allowed 0 to 65536 KiB")


def test_size_bounds_that_no_device_can_meet(cli) -> None:
    r = validate_text(cli, "devices:\n  - match: {size: {min: 10 GiB, max: 1 GiB}}\n    scheduler: none\n")
    assert_errors(r, "p.yaml:2:19: $.devices[0].match.size: min ('10 GiB') is larger than max ('1 GiB'); no device can match")


def test_ranges(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd:\n    scheduler: {min: 1}\n    read_ahead_kb: {min: 4096, max: 128}\n"
                           "    iosched: {read_expire: {max: 0}, fifo_batch: {min: 9, maks: 3}}\n"
                           "    queue: {write_cache: {max: 1}, nr_requests: {}}\n"
                           "  rotational: {read_ahead_kb: {min: 1 MiB, max: 4 KiB}}\n"
                           "  nvme: {read_ahead_kb: {max: 128 MiB}}\n")
    assert_errors(r,
                  "p.yaml:3:16: $.classes.ssd.scheduler: a range {min, max} is only for integer settings (read_ahead_kb, "
                  "iosched knobs, numeric queue attributes); 'scheduler' is not a number",
                  "p.yaml:4:20: $.classes.ssd.read_ahead_kb: min (4096) is larger than max (128); no value fits the range",
                  "p.yaml:5:34: $.classes.ssd.iosched.read_expire.max: 0 is out of range: allowed 1 to 3600000 ms",
                  "p.yaml:5:59: $.classes.ssd.iosched.fifo_batch.maks: unknown key 'maks'; expected one of: max, min",
                  "p.yaml:6:26: $.classes.ssd.queue.write_cache: a range {min, max} is only for integer settings "
                  "(read_ahead_kb, iosched knobs, numeric queue attributes); 'write_cache' is not a number",
                  "p.yaml:6:49: $.classes.ssd.queue.nr_requests: must not be empty: give at least one key",
                  "p.yaml:7:31: $.classes.rotational.read_ahead_kb: min ('1 MiB') is larger than max ('4 KiB'); "
                  "no value fits the range",
                  "p.yaml:8:31: $.classes.nvme.read_ahead_kb.max: '128 MiB' is 131072 KiB, out of range: "
                  "allowed 0 to 65536 KiB")


def test_ranges_that_are_accepted_and_replace_whole_in_extends(cli) -> None:
    write("base.yaml", "name: base\nclasses:\n  ssd: {read_ahead_kb: {min: 128, max: 1 MiB}}\n")
    r = validate_text(cli, "name: child\nextends: base\nclasses:\n  ssd:\n    read_ahead_kb: {min: 4 MiB}\n"
                           "    queue: {wbt_lat_usec: {min: -1, max: 2000}}\n"
                           "devices:\n  - match: {kernel: sd*}\n    below: {iosched: {read_lat_nsec: {max: 1000000}}}\n")
    assert r.code == 0 and r.err == "", r
    shown = json.loads(cli("--json", "profile", "show", "p.yaml").out)["profile"]
    assert shown["classes"]["ssd"]["read_ahead_kb"] == {"min": 4096}  # not {min: 4096, max: 1024}
    assert shown["classes"]["ssd"]["queue"] == {"wbt_lat_usec": {"min": -1, "max": 2000}}
    explained = cli("profile", "show", "--explain", "p.yaml").out
    assert "read_ahead_kb: {min: 4096}" in explained and "(a floor: raised to 4096 when below, never lowered)" in explained


@pytest.mark.parametrize("name", ["../../x", "a/b", "/abs", "Nr_requests"])
def test_unsafe_queue_attribute_name(cli, name: str) -> None:
    r = validate_text(cli, f"classes:\n  ssd:\n    queue: {{{json.dumps(name)}: 1}}\n")
    assert_errors(r, f"p.yaml:3:13: $.classes.ssd.queue{json_path((name,))[1:]}: queue attribute name {name!r} is not "
                     "allowed: use lower-case letters, digits and _ only (no path separators, no '..')")


def test_unsafe_iosched_knob_name(cli) -> None:
    r = validate_text(cli, "classes:\n  ssd:\n    iosched: {\"..\": 1}\n")
    assert_errors(r, "p.yaml:3:15: $.classes.ssd.iosched['..']: iosched knob name '..' is not allowed: "
                     "use lower-case letters, digits and _ only (no path separators, no '..')")


@pytest.mark.parametrize(("glob", "shown"), [
    ("'ST\"4000*'", "'ST\"4000*'"),          # a quote would end the udev rule's string
    ('"AB\\nCD"', "'AB\\nCD'"),              # a newline would start a new rule
    ('"sd*\\n"', "'sd*\\n'"),                # a trailing newline too (Python's $ would let it through)
    ('"x,y"', "'x,y'"),
])
def test_glob_with_a_quote_or_newline(cli, glob: str, shown: str) -> None:
    r = validate_text(cli, f"devices:\n  - match: {{model: {glob}}}\n    scheduler: none\n")
    assert_errors(r, f"p.yaml:2:20: $.devices[0].match.model: {shown} is not a valid glob: a shell glob (*, ?, [...]) "
                     "without quotes, newlines, commas, '%', '$' or backslashes")


# --- what a udev rule cannot hold (`udev render` trusts these checks) ------------------------------

# Each would change a rule's meaning or break out of it: udev alternation (|), substitutions (% $),
# quoting, and bracket sets on which fnmatch(3) and Python's fnmatchcase disagree.
EVIL = ['x"', 'x", RUN+="/bin/sh', "a,b", "a\nb", "a%kb", "$env{X}", "a\\b", "a|b", "a`id`", " lead", "trail ", "\u00e9",
        "[^a]", "[[:alpha:]]", "[z-a]", "[abc", "a\x00b", "\t"]


@pytest.mark.parametrize("value", EVIL)
@pytest.mark.parametrize("key", ["kernel", "model", "vendor", "serial", "wwn", "bus"])
def test_match_glob_a_udev_rule_cannot_hold(cli, key: str, value: str) -> None:
    r = validate_text(cli, f"devices:\n  - match: {{{key}: {json.dumps(value)}}}\n    read_ahead_kb: 64\n")
    assert r.code == 2 and len(r.lines) == 1, r
    assert r.lines[0].startswith(f"p.yaml:2:{15 + len(key)}: $.devices[0].match.{key}: "), r
    r = validate_text(cli, f"devices:\n  - match: {{bus: [ata, {json.dumps(value)}]}}\n    read_ahead_kb: 64\n")
    assert r.code == 2 and r.lines[0].startswith("p.yaml:2:24: $.devices[0].match.bus[1]: "), r


@pytest.mark.parametrize(("glob", "message"), [
    ("'ST4000|WD*'", "'ST4000|WD*': character '|' cannot be put into a udev rule; globs may use letters, digits, "
                     "punctuation without \" \\ % $ , | ` and *, ?, [...]"),
    ("'[^a]*'", "'[^a]*': the bracket expression at character 1 is not one udev and tunectl read alike; "
                "use simple sets such as [0-9], [a-f] or [!0-9]"),
    ("'sd[z-a]'", "'sd[z-a]': the bracket expression at character 3 is not one udev and tunectl read alike; "
                  "use simple sets such as [0-9], [a-f] or [!0-9]"),
    ("' ST4000'", "' ST4000' starts or ends with blanks, which udev and tunectl compare differently; remove them"),
])
def test_match_glob_messages(cli, glob: str, message: str) -> None:
    r = validate_text(cli, f"name: g\ndevices:\n  - match: {{model: {glob}}}\n    scheduler: none\n")
    assert_errors(r, f"p.yaml:3:20: $.devices[0].match.model: {message}")
    r = cli("udev", "render", "-p", "p.yaml")
    assert r.code == 2 and r.out == "" and f"p.yaml:3:20: $.devices[0].match.model: {message}" in r.err


def test_mount_match_globs_are_not_udev_globs(cli) -> None:
    r = validate_text(cli, "mounts:\n  - match: {model: 'ST4000|WD*'}\n    options: [noatime]\n")
    assert r.code == 0, r


@pytest.mark.parametrize(("settings", "where"), [
    ({"scheduler": ['bfq"']}, "$.classes.ssd.scheduler[0]"),
    ({"scheduler": ["bfq", "x\nRUN"]}, "$.classes.ssd.scheduler[1]"),
    ({"iosched": {"read_expire": '150", RUN+="/bin/sh'}}, "$.classes.ssd.iosched.read_expire"),
    ({"iosched": {"read_expire": True}}, "$.classes.ssd.iosched.read_expire"),
    ({"iosched": {"read_expire": 0}}, "$.classes.ssd.iosched.read_expire"),
    ({"iosched": {'x"': 1}}, json_path(("classes", "ssd", "iosched", 'x"'))),
    ({"queue": {"../../../kernel/x": 1}}, "$.classes.ssd.queue['../../../kernel/x']"),
    ({"queue": {"nr_requests": "64"}}, "$.classes.ssd.queue.nr_requests"),
    ({"queue": {"read_ahead_kb": 64}}, "$.classes.ssd.queue.read_ahead_kb"),
    ({"queue": {"write_cache": 'write back", RUN+="x'}}, "$.classes.ssd.queue.write_cache"),
    ({"read_ahead_kb": 70000}, "$.classes.ssd.read_ahead_kb"),
    ({"read_ahead_kb": "4096 parsecs"}, "$.classes.ssd.read_ahead_kb"),
])
def test_value_a_udev_rule_cannot_hold(cli, settings: dict, where: str) -> None:
    r = validate_text(cli, json.dumps({"name": "v", "classes": {"ssd": settings}}, indent=1))
    assert r.code == 2 and len(r.lines) == 1 and f": {where}: " in r.lines[0], r
    assert r.lines[0].startswith("p.yaml:"), r


@pytest.mark.parametrize("name", ["a\nSUBSYSTEM", 'x"', "-x", "", "a b", "x" * 65])
def test_profile_name_a_rules_file_cannot_hold(cli, name: str) -> None:
    r = validate_text(cli, f"name: {json.dumps(name)}\nclasses: {{}}\n")
    assert r.code == 2 and len(r.lines) == 1 and r.lines[0].startswith("p.yaml:1:7: $.name: "), r


def test_file_name_that_is_no_profile_name(cli) -> None:
    r = validate_text(cli, "classes: {}\n", name="my profile.yaml")
    assert_errors(r, "my profile.yaml:1:1: $: the file name 'my profile' is not a valid profile name and there is "
                     "no name: key; add one (profile name: letters, digits, '.', '_', '-'; defaults to the file name)")
    r = validate_text(cli, "name: mine\nclasses: {}\n", name="my profile.yaml")
    assert r.code == 0, r


def test_mount_option_with_a_newline(cli) -> None:
    r = validate_text(cli, "mounts:\n  - match: {class: ssd}\n    options: [\"noatime\\n\"]\n")
    assert_errors(r, "p.yaml:3:15: $.mounts[0].options[0]: 'noatime\\n' is not a valid mount option: "
                     "letters, digits and _ . = : / @ + - only")


def test_missing_match_and_empty_match(cli) -> None:
    r = validate_text(cli, "devices:\n  - scheduler: none\n  - match: {}\n    scheduler: none\n")
    assert_errors(r, "p.yaml:2:5: $.devices[0]: missing required key 'match'",
                  "p.yaml:3:12: $.devices[1].match: must not be empty: give at least one key")


# --- extends -------------------------------------------------------------------------------------

def test_missing_extends_parent(cli) -> None:
    r = validate_text(cli, "name: child\nextends: balancd\nclasses:\n  ssd: {scheduler: none}\n")
    assert_errors(r, "p.yaml:2:10: $.extends: 'balancd': no such profile on the search path (chain: p.yaml -> balancd); "
                     "did you mean 'balanced'?")


def test_missing_extends_parent_further_up_the_chain(cli) -> None:
    write("mid.yaml", "# mid\nextends: ./gone.yaml\n")
    r = validate_text(cli, "extends: mid\n")
    assert_errors(r, "mid.yaml:2:10: $.extends: './gone.yaml': no such file (chain: p.yaml -> mid.yaml -> ./gone.yaml)")


def test_extends_cycle_with_the_chain(cli) -> None:
    write("a.yaml", "name: a\nextends: b\n")
    write("b.yaml", "name: b\nextends: ./c.yaml\n")
    write("c.yaml", "name: c\nclasses: {}\nextends: a\n")
    r = cli("profile", "validate", "a.yaml")
    assert_errors(r, "c.yaml:3:10: $.extends: extends cycle: a.yaml -> b.yaml -> c.yaml -> a.yaml")


def test_extends_itself_by_path(cli) -> None:
    r = validate_text(cli, "extends: ./p.yaml\n")
    assert_errors(r, "p.yaml:1:10: $.extends: extends cycle: p.yaml -> p.yaml")


def test_same_name_extends_the_next_on_the_search_path(cli, tmp_path: Path) -> None:
    """/etc/tunectl/profiles/balanced.yaml with `extends: balanced` builds on the shipped balanced."""
    write("balanced.yaml", "name: balanced\nextends: balanced\nclasses:\n  nvme: {read_ahead_kb: 256}\n")
    r = cli("--json", "profile", "show", "balanced")
    assert r.code == 0, r
    shown = json.loads(r.out)
    assert shown["files"][0] == "balanced.yaml" and shown["files"][1].endswith("profiles/balanced.yaml")
    assert shown["profile"]["classes"]["nvme"]["read_ahead_kb"] == 256
    assert shown["profile"]["classes"]["rotational"]["read_ahead_kb"] == {"min": 1024}  # from the shipped balanced


def test_errors_in_every_file_of_the_chain_at_once(cli) -> None:
    write("base.yaml", "classes:\n  ssd: {schedular: none}\n")
    r = validate_text(cli, "extends: base\nclasses:\n  nvme: {read_ahead_kb: -1}\n")
    assert_errors(r,
                  "p.yaml:3:25: $.classes.nvme.read_ahead_kb: -1 is out of range: allowed 0 to 65536 KiB",
                  "base.yaml:2:9: $.classes.ssd.schedular: unknown key 'schedular'; did you mean 'scheduler'?")


# --- the file itself ------------------------------------------------------------------------------

def test_empty_file(cli) -> None:
    assert_errors(validate_text(cli, ""), "p.yaml:1:1: $: the profile is empty (nothing but comments or white space)")
    assert_errors(validate_text(cli, "# only a comment\n\n"),
                  "p.yaml:1:1: $: the profile is empty (nothing but comments or white space)")


def test_top_level_list(cli) -> None:
    assert_errors(validate_text(cli, "- classes\n- ssd\n"),
                  "p.yaml:1:1: $: not a profile: not a YAML mapping")


def test_top_level_scalar(cli) -> None:
    assert_errors(validate_text(cli, "just text\n"),
                  "p.yaml:1:1: $: not a profile: not a YAML mapping")


def test_nul_bytes(cli) -> None:
    assert_errors(validate_text(cli, b"name: a\nclasses: {}\x00\n"),
                  "p.yaml:2:12: $: NUL byte: a profile is YAML text, not binary data")


def test_not_utf8(cli) -> None:
    assert_errors(validate_text(cli, b"name: a\ndescription: caf\xe9\n"),
                  "p.yaml:2:17: $: not UTF-8 text: byte 0xe9 cannot be decoded")


def test_control_character(cli) -> None:
    assert_errors(validate_text(cli, "name: a\x1b[31m\n"),
                  "p.yaml:1:8: $: YAML does not allow the control character U+001B here")


def test_oversize_file(cli) -> None:
    text = "classes: {}\n" + "#" * MAX_PROFILE_BYTES
    assert_errors(validate_text(cli, text), f"p.yaml:1:1: $: file is larger than {MAX_PROFILE_BYTES} bytes; "
                                            "a profile is a small YAML file")


def test_deep_nesting(cli) -> None:
    r = validate_text(cli, "a: " + "[" * 100_000)
    assert r.code == 2
    assert r.lines[0].startswith("p.yaml:1:35: $.a[0][0]") and r.lines[0].endswith(
        ": nested more than 32 levels deep; a profile is much flatter")


DEEP = {
    "flow": ("a: " + "[" * 100_000, "p.yaml:1:35: $.a[0][0]"),
    "flow mapping": ("a: " + "{b: " * 2000, "p.yaml:1:128: $.a.b.b"),
    "block": ("".join(" " * i + "k:\n" for i in range(1200)) + " " * 1200 + "x\n", "p.yaml:33:33: $.k.k.k"),
    "compact sequence": ("- " * 1500 + "x\n", "p.yaml:1:65: $[0][0]"),
}


@pytest.mark.parametrize("parser", ["libyaml", "python"])
@pytest.mark.parametrize("case", sorted(DEEP))
def test_deep_nesting_any_parser(cli, monkeypatch: pytest.MonkeyPatch, case: str, parser: str) -> None:
    """tunectl's own depth limit fires first, whatever the YAML parser's own limit (libyaml: 1000 since 0.2.5)."""
    if parser == "python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("this PyYAML is built without libyaml")
    text, where = DEEP[case]
    r = validate_text(cli, text)
    assert r.code == 2
    assert r.lines[0].startswith(where), r.lines
    assert "nested more than 32 levels deep" in r.lines[0]


def test_deep_nesting_under_a_stricter_libyaml(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """A libyaml that refuses nesting earlier than tunectl (here at 20 levels) still gives tunectl's message."""
    real_parse = yaml.parse

    def strict_parse(text, Loader):  # noqa: N803 (yaml.parse's own keyword)
        depth = 0
        for event in real_parse(text, Loader=Loader):
            if not issubclass(Loader, yaml.SafeLoader) and isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth >= 20:
                    raise yaml.parser.ParserError(None, None, "exceeded maximum nesting depth", event.start_mark)
            yield event

    monkeypatch.setattr(yaml, "parse", strict_parse)
    monkeypatch.setattr(yaml, "CSafeLoader", getattr(yaml, "CSafeLoader", yaml.Loader), raising=False)
    r = validate_text(cli, DEEP["flow"][0])
    assert r.lines[0].startswith("p.yaml:1:35: $.a[0][0]") and r.lines[0].endswith("nested more than 32 levels deep; "
                                                                                    "a profile is much flatter")
    # 25 levels of empty lists are in the plain subset, which tunectl reads without libyaml (plain_yaml): made a text
    # outside it (as any text with a tag, an anchor, a multi-line scalar is), it meets libyaml's limit
    monkeypatch.setattr("tunectl.profile.library.read_plain", lambda text, file: None)
    shallow = validate_text(cli, "a: " + "[" * 25 + "]" * 25 + "\n")
    assert shallow.lines[0].startswith("p.yaml:1:22: $: YAML syntax: exceeded maximum nesting depth"), shallow.lines


def test_alias_bomb(cli) -> None:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    text += "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
    r = validate_text(cli, text)
    assert_errors(r, "p.yaml:5:10: $.a4[0]: more than 10000 values (aliases count each time they are used); "
                     "a profile is much smaller")


def test_missing_file_and_unknown_name(cli) -> None:
    r = cli("profile", "validate", "nope.yaml", "balancd")
    assert r.code == 2
    assert r.lines[0] == "tunectl: error: nope.yaml: no such profile file"
    assert r.lines[1].startswith("tunectl: error: profile 'balancd' not found on the search path (")
    assert r.lines[1].endswith("); did you mean 'balanced'?")


# --- all at once, as data, from every command ----------------------------------------------------

MANY = "name: a\ndescripton: x\nclasses:\n  ssd:\n    scheduler: mq-dedline\n    read_ahead_kb: \"128 MiB\"\n"


def test_all_errors_at_once_sorted_by_position(cli) -> None:
    r = validate_text(cli, MANY)
    assert [line.split(": ")[0] for line in r.lines] == ["p.yaml:2:1", "p.yaml:5:16", "p.yaml:6:20"]


def test_json_gives_the_same_as_data(cli) -> None:
    r = cli("--json", "profile", "validate", write("p.yaml", MANY), write("good.yaml", VALID))
    assert r.code == 2 and r.err == ""
    doc = json.loads(r.out)
    assert doc["ok"] is False
    bad, good = doc["files"]
    assert good == {"file": "good.yaml", "ok": True, "name": "ok", "diagnostics": []}
    assert bad["ok"] is False
    assert bad["diagnostics"][0] == {"file": "p.yaml", "line": 2, "column": 1, "path": "$.descripton",
                                     "message": "unknown key 'descripton'; did you mean 'description'?", "severity": "error"}
    text = validate_text(cli, MANY)
    assert [f"{d['file']}:{d['line']}:{d['column']}: {d['path']}: {d['message']}" for d in bad["diagnostics"]] == text.lines


@pytest.mark.parametrize("argv", [
    ["profile", "show", "p.yaml"],
    ["plan", "-p", "p.yaml"],
    ["verify", "-p", "p.yaml"],
    ["apply", "--check", "-p", "p.yaml"],
    ["status", "-p", "p.yaml"],
])
def test_every_command_that_loads_a_profile_reports_the_lines(cli, tmp_path: Path, argv: list[str]) -> None:
    write("p.yaml", MANY)
    (tmp_path / "sys" / "block").mkdir(parents=True)
    r = cli("--sysfs-root", str(tmp_path / "sys"), *argv)
    assert r.code == 2
    assert r.lines[:3] == validate_text(cli, MANY).lines
    assert r.lines[3].startswith("hint: ")
    r = cli("--json", "--sysfs-root", str(tmp_path / "sys"), *argv)
    assert r.code == 2
    doc = json.loads(r.out)
    assert doc["ok"] is False and [e["line"] for e in doc["error"]["diagnostics"]] == [2, 5, 6]
    assert doc["format"] == "tunectl-error" and doc["error"]["code"] == "profile" and doc["error"]["where"] == "p.yaml:2:1"


def test_json_path_quotes_what_is_not_a_name() -> None:
    assert json_path(("classes", "ssd", "iosched", "read_expire")) == "$.classes.ssd.iosched.read_expire"
    assert json_path(("devices", 0, "match")) == "$.devices[0].match"
    assert json_path(("queue", "../../x")) == "$.queue['../../x']"
    assert json_path(("queue", "it's")) == "$.queue['it\\'s']"


# --- the cache ----------------------------------------------------------------------------------

def test_cache_keeps_positions_and_warnings_and_never_hides_errors(tmp_path: Path) -> None:
    cache = ValidationCache(tmp_path / "state" / "validated")
    base = tmp_path / "base.yaml"
    child = tmp_path / "child.yaml"
    base.write_text("classes:\n  ssd:\n    scheduler: deadline\n")
    child.write_text("extends: ./base.yaml\nclasses:\n  ssd:\n    iosched: {read_expire: 100}\n")
    fresh, diags = resolve_profile(child, [], None)
    cached_first, _ = resolve_profile(child, [], cache)
    assert len(list(cache.dir.iterdir())) == 2
    cached, cached_diags = resolve_profile(child, [], cache)  # both files from the cache now
    assert fresh is not None and cached is not None and cached_first is not None
    assert cached.data == fresh.data and cached.positions == fresh.positions
    assert [str(d) for d in cached_diags] == [str(d) for d in diags] == [
        f"{base}:3:16: $.classes.ssd.scheduler: warning: legacy scheduler 'deadline' is mapped to 'mq-deadline' "
        "on blk-mq kernels; write that instead"]
    # The knob check across files runs on cached documents too, with their positions.
    child.write_text("extends: ./base.yaml\nclasses:\n  ssd:\n    iosched: {slice_idle: 1}\n")
    with pytest.raises(Exception) as e:
        load_profile(child, [], cache)
    assert f"{child}:4:15: $.classes.ssd.iosched.slice_idle: 'slice_idle' is a knob of bfq" in str(e.value)
    assert f"(inherited from {base}:3)" in str(e.value)
    # A changed file is a different digest: its errors are found, not a stale success.
    base.write_text("classes:\n  ssd:\n    scheduler: nope\n")
    _, diags = resolve_profile(child, [], cache)
    assert any("unknown scheduler 'nope'" in str(d) for d in diags)


@pytest.mark.parametrize("package", ["jsonschema", "referencing"])
def test_a_verdict_cached_under_one_jsonschema_is_not_used_under_another(tmp_path: Path, package: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An upgrade of jsonschema, or of referencing (through which it resolves `$ref`), can change a verdict: its
    version (read from the metadata beside the package import would find, without importing it) is part of the
    checker's digest, so the text is checked again."""
    import jsonschema  # noqa: F401 -- the real ones stay imported; the fake packages below only name a version

    pytest.importorskip(package, reason=f"{package} is not installed (Debian 12's jsonschema 4.10 does not use it)")

    from tunectl.profile import library

    def installed(version: str | None) -> str:
        site = tmp_path / f"site-{version}"
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        if version is not None:
            (site / f"{package}-{version}.dist-info").mkdir()
        monkeypatch.setattr(sys, "path", [str(site), *sys.path])
        library._checker_digest.cache_clear()
        return library._installed_version(package)

    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        cache = ValidationCache(tmp_path / "state" / "validated")
        profile = tmp_path / "p.yaml"
        profile.write_text(VALID)
        assert installed("4.0.0") == f"{package}-4.0.0.dist-info"
        load_profile(profile, [], cache)
        load_profile(profile, [], cache)
        assert len(list(cache.dir.iterdir())) == 1  # checked once, then a hit
        assert installed("5.0.0") == f"{package}-5.0.0.dist-info"
        load_profile(profile, [], cache)
        assert len(list(cache.dir.iterdir())) == 2  # checked again under the new version
        # No metadata beside the package: importlib.metadata answers (slower, still the version).
        from importlib import metadata
        assert installed(None) == metadata.version(package)
    finally:
        library._checker_digest.cache_clear()


def test_validate_never_writes_the_cache(cli, tmp_path: Path) -> None:
    validate_text(cli, VALID)
    assert not (tmp_path / "state").exists()
    assert os.listdir(tmp_path) == ["p.yaml"]


def test_a_cached_verdict_never_supplies_a_setting_the_text_does_not_hold(tmp_path: Path) -> None:
    """Issue #34: an entry (root's, so trusted) given `data` the text does not hold: the settings still come
    from the text; an entry that is not a verdict makes the text be checked again."""
    cache = ValidationCache(tmp_path / "state" / "validated")
    profile = tmp_path / "p.yaml"
    profile.write_text("name: mine\nclasses:\n  ssd: {read_ahead_kb: 128}\n")
    first = load_profile(profile, [], cache)
    (entry,) = cache.dir.iterdir()
    stored = json.loads(entry.read_text())
    assert "data" not in stored["document"]  # the verdict only
    forged = dict(stored["document"], data={"name": "mine", "classes": {"ssd": {"read_ahead_kb": 16384},
                                                                         "hdd": {"scheduler": "none"}}})
    entry.write_text(json.dumps(dict(stored, document=forged)))
    again = load_profile(profile, [], cache)
    assert again.data == first.data and again.data["classes"] == {"ssd": {"read_ahead_kb": 128}}
    entry.write_text(json.dumps(dict(stored, document={"warnings": "not a list of warnings"})))
    assert load_profile(profile, [], cache).data == first.data


@pytest.mark.parametrize("warnings", [
    [{"line": "a"}, {}],  # a line in words beside a number: sorting them stopped plan with an internal error
    [{"path": ["classes"], "message": {"m": 1}}],  # unhashable: an internal error
    [{"severity": "error", "message": "forged"}],  # an error the text does not have: plan refused the profile
    [{"line": 0, "col": -1}], [{"line": True}], [{"line": 1.5}], [{"message": None}], [{"extra": 1}],
])
def test_a_cached_verdict_whose_warnings_are_not_warnings_is_checked_again(tmp_path: Path, warnings: list) -> None:
    """A hand-edited entry (root's, so trusted) whose warnings are not what the checker writes: the text is
    checked again and its own warning is reported, never the entry's."""
    cache = ValidationCache(tmp_path / "state" / "validated")
    profile = tmp_path / "p.yaml"
    profile.write_text("name: mine\nclasses:\n  ssd: {scheduler: cfq}\n")
    fresh, diags = resolve_profile(profile, [], None)
    resolve_profile(profile, [], cache)
    (entry,) = cache.dir.iterdir()
    stored = json.loads(entry.read_text())
    (real,) = stored["document"]["warnings"]
    entry.write_text(json.dumps(dict(stored, document={"warnings": [dict(real, **w) for w in warnings]})))
    again, again_diags = resolve_profile(profile, [], cache)
    assert again is not None and fresh is not None and again.data == fresh.data
    assert [str(d) for d in again_diags] == [str(d) for d in diags] == [
        f"{profile}:3:20: $.classes.ssd.scheduler: warning: legacy scheduler 'cfq' is mapped to 'bfq' "
        "on blk-mq kernels; write that instead"]


def test_a_validator_package_not_installed_is_a_version_of_its_own_found_without_importlib_metadata() -> None:
    """Debian 12's jsonschema 4.10 does not use referencing: its absence is part of the digest ("none"), and
    finding that out must not import importlib.metadata (~60 ms a run) on a cache hit."""
    code = ("import sys\n"
            "from tunectl.profile.library import _installed_version\n"
            "print(_installed_version('tunectl_no_such_package'), 'importlib.metadata' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.split() == ["none", "False"], done.stderr


def test_a_name_on_an_empty_search_path_is_not_found_with_no_suggestion(tmp_path: Path) -> None:
    """No profile anywhere on the search path (a copy of tunectl without its profiles): a name is simply not found;
    the suggestion had asked difflib for zero matches, an internal error."""
    empty = tmp_path / "none"
    empty.mkdir()
    profile, diags = resolve_profile("balanced", [empty])
    assert profile is None
    assert diags == [f"profile 'balanced' not found on the search path ({empty})"]
