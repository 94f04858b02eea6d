"""Random and mutated profiles through the real CLI, in-process: never a traceback, always a verdict, fast.

Invalid input exits 2 with at least one ``file:line:col:`` line; valid input
exits 0. Every run is timed: each must take under a second of CPU time, and the
largest time is printed at the end of the module (run with ``-s`` to see it). CPU time, not the
clock: the bound is on tunectl's work (a parser gone quadratic), and the suite shares the machine
(the VM tier's guest runs beside it; at load 5 the clock read 1.17 s for a 0.25 s validate).
"""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import DATA as TEST_DATA
from tests.harness import run_cli
from tunectl.attributes import IOSCHED, QUEUE, SCHEDULERS
from tunectl.cli import main
from tunectl.devices.classes import CLASSES, DM_TYPES
from tunectl.profile.library import shipped_profile_dir
from tunectl.profile.reader import MAX_PROFILE_BYTES

LIMIT_SECONDS = 1.0
DIAGNOSTIC = re.compile(r"^.+:\d+:\d+: \$")
TIMINGS: dict[str, float] = {}
# Mutated YAML and random documents meet PyYAML's parser and jsonschema's validator on their error paths, where
# the libraries' versions differ most: scripts/test runs this module's slow tests on Debian's own libraries too.
pytestmark = pytest.mark.libraries
SHIPPED_TEXTS = [p.read_text() for p in sorted(shipped_profile_dir().glob("*.yaml"))]
FUZZ = settings(max_examples=int(os.environ.get("TUNECTL_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def report_timings():
    yield
    if TIMINGS:
        worst = max(TIMINGS, key=TIMINGS.get)
        print(f"\nprofile fuzz: slowest validate {TIMINGS[worst] * 1000:.1f} ms ({worst}); "
              + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in sorted(TIMINGS.items())))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def validate(workdir: Path, content: str | bytes, label: str) -> tuple[int, str, float]:
    path = workdir / "fuzzed.yaml"
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    env = {"TUNECTL_STATE_DIR": str(workdir / "state"), "TUNECTL_PROFILE_PATH": str(workdir)}
    start = time.process_time()
    # propagate: an unexpected exception escapes as a real traceback and fails the test.
    r = run_cli("profile", "validate", str(path), env=env, propagate=True)
    elapsed = time.process_time() - start
    TIMINGS[label] = max(TIMINGS.get(label, 0.0), elapsed)
    code, text = r.code, r.err
    assert elapsed < LIMIT_SECONDS, f"{label}: {elapsed:.3f}s"
    assert not (workdir / "state").exists()
    return code, text, elapsed


def assert_invalid(code: int, err: str) -> None:
    assert code == 2, err
    assert any(DIAGNOSTIC.match(line) for line in err.splitlines()), err


def assert_verdict(code: int, err: str) -> None:
    assert code in (0, 2)
    if code == 2:
        assert_invalid(code, err)
    else:
        assert all(": warning: " in line for line in err.splitlines()), err


# --- valid profiles, built from the catalogue ---------------------------------------------------

def _number_or_range(draw, number: st.SearchStrategy) -> object:
    """A number, or a range {min}, {max}, {min, max} of numbers (min <= max once units are resolved)."""
    a, b = draw(number), draw(number)
    if draw(st.booleans()):
        return a
    if isinstance(a, int) and isinstance(b, int) and a > b:
        a, b = b, a
    both = [{"min": a, "max": b}] if isinstance(a, int) and isinstance(b, int) else []  # sizes: only one bound
    return draw(st.sampled_from([{"min": a}, {"max": b}, *both]))


def _settings(draw, allow_below: bool) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        chosen = draw(st.sampled_from(SCHEDULERS))
        out["scheduler"] = draw(st.sampled_from([chosen, [chosen], [chosen, *[s for s in SCHEDULERS if s != chosen][:1]]]))
        knobs = IOSCHED[chosen]
        if knobs and draw(st.booleans()):
            names = draw(st.lists(st.sampled_from(sorted(knobs)), min_size=1, max_size=4, unique=True))
            out["iosched"] = {n: _number_or_range(draw, st.integers(knobs[n].minimum, knobs[n].maximum)) for n in names}
    if draw(st.booleans()):
        out["read_ahead_kb"] = _number_or_range(draw, st.one_of(st.integers(0, 65536),
                                                                 st.integers(0, 64).map(lambda m: f"{m} MiB"),
                                                                 st.integers(0, 65536).map(lambda k: f"{k}KiB")))
    if draw(st.booleans()):
        ints = sorted(n for n, a in QUEUE.items() if a.is_int and n != "read_ahead_kb")
        names = draw(st.lists(st.sampled_from(ints), min_size=1, max_size=3, unique=True))
        out["queue"] = {n: _number_or_range(draw, st.integers(QUEUE[n].minimum, QUEUE[n].maximum)) for n in names}
        if draw(st.booleans()):
            out["queue"]["write_cache"] = draw(st.sampled_from(QUEUE["write_cache"].choices))
    if allow_below and draw(st.booleans()):
        out["below"] = _settings(draw, allow_below=False)
    return out


# udev's glob dialect (checks.glob_problem): printable ASCII, *, ?, simple bracket sets, no blanks at the ends.
_GLOB_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="\"\\%$,|`[]")
GLOB = st.lists(st.one_of(_GLOB_CHARS, st.just(" "), st.sampled_from(["*", "?", "[0-9]", "[!a-c]", "[xy]"])),
                min_size=1, max_size=12).map("".join).map(lambda g: g.strip() or "*")


@st.composite
def match_keys(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(["kernel", "model", "vendor", "serial", "wwn", "bus", "class", "dm_type",
                                          "rotational", "removable", "size"]), min_size=1, max_size=4, unique=True))
    out: dict = {}
    for key in keys:
        if key in ("kernel", "model", "vendor", "serial", "wwn"):
            out[key] = draw(GLOB)
        elif key == "bus":
            out[key] = draw(st.one_of(GLOB, st.lists(GLOB, min_size=1, max_size=3)))
        elif key == "class":
            out[key] = draw(st.one_of(st.sampled_from(CLASSES), st.lists(st.sampled_from(CLASSES), min_size=1, unique=True)))
        elif key == "dm_type":
            out[key] = draw(st.one_of(st.sampled_from(DM_TYPES), st.lists(st.sampled_from(DM_TYPES), min_size=1, unique=True)))
        elif key in ("rotational", "removable"):
            out[key] = draw(st.booleans())
        else:
            lo = draw(st.integers(0, 1 << 40))
            out[key] = draw(st.sampled_from([{"min": lo}, {"max": lo}, {"min": lo, "max": lo * 2},
                                             {"min": f"{lo >> 30} GiB"}]))
    return out


@st.composite
def valid_profiles(draw) -> dict:
    profile: dict = {}
    if draw(st.booleans()):
        profile["name"] = draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z"))
    if draw(st.booleans()):
        profile["description"] = draw(st.text(max_size=80))
    if draw(st.booleans()):
        profile["extends"] = draw(st.sampled_from(["default", "balanced", "throughput-performance", "desktop"]))
    classes = draw(st.lists(st.sampled_from(CLASSES), unique=True, max_size=5))
    profile["classes"] = {c: _settings(draw, allow_below=True) for c in classes}
    if draw(st.booleans()):
        profile["devices"] = [dict(_settings(draw, allow_below=True), match=draw(match_keys()))
                              for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        profile["mounts"] = [{"match": draw(match_keys()),
                              "options": draw(st.lists(st.from_regex(r"\A[A-Za-z0-9_.=:/@+-]{1,12}\Z"), max_size=3)),
                              "discard": draw(st.sampled_from(["online", "periodic", "off"]))}]
    if draw(st.booleans()):
        profile["alignment"] = {"boundary_kib": draw(st.integers(4, 1048576))}
    return profile


@pytest.mark.slow
@FUZZ
@given(profile=valid_profiles(), flow=st.booleans())
def test_valid_profiles_exit_0(workdir: Path, profile: dict, flow: bool) -> None:
    text = yaml.safe_dump(profile, allow_unicode=True, default_flow_style=flow, sort_keys=False)
    code, err, _ = validate(workdir, text, "valid")
    # Inherited knobs can meet a scheduler chosen here: that is a warning, never an error.
    assert code == 0, f"{err}\n{text}"
    assert all(": warning: inherited iosched knobs" in line for line in err.splitlines()), err


# --- invalid and mutated profiles ---------------------------------------------------------------

KEYS = ["name", "description", "extends", "classes", "devices", "mounts", "alignment", "scheduler", "read_ahead_kb",
        "iosched", "queue", "below", "match", *CLASSES, *sorted({k for knobs in IOSCHED.values() for k in knobs}),
        *QUEUE, "../../x", "a/b", "<<", ""]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from([*SCHEDULERS, "deadline", "cfq", "noop", "4 MiB", "128 MiB", "150 ms", "yes", "off", "~",
                     "2001-01-01", "0x1F", "1:30", "\u202e", "\U0001f4be"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=10)), inner, max_size=5)),
    max_leaves=40,
)


@pytest.mark.slow
@FUZZ
@given(data=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6))
def test_random_structures_get_a_verdict(workdir: Path, data: dict) -> None:
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    assert_verdict(*validate(workdir, text, "random structure")[:2])


@pytest.mark.slow
@FUZZ
@given(data=VALUES)
def test_random_documents_get_a_verdict(workdir: Path, data) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    assert_verdict(*validate(workdir, text, "random document")[:2])


YAML_NOISE = st.text(alphabet=st.sampled_from(list(":-[]{}#&*!|>'\"%@`,?\t\n \\0x9aé\u0085\u2028\ufeff\x01")), max_size=12)


@st.composite
def mutated_shipped(draw) -> str:
    text = draw(st.sampled_from(SHIPPED_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        kind = draw(st.sampled_from(["insert", "delete", "replace", "dup-line", "swap-lines", "indent"]))
        if kind in ("dup-line", "swap-lines", "indent"):
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if kind == "dup-line":
                lines.insert(j, lines[i])
            elif kind == "swap-lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines[i] = draw(st.sampled_from([" ", "  ", "\t", "- "])) + lines[i]
            text = "\n".join(lines)
            continue
        pos = draw(st.integers(0, len(text)))
        end = min(len(text), pos + draw(st.integers(0, 20)))
        noise = draw(st.one_of(YAML_NOISE, st.sampled_from(KEYS), st.text(max_size=8)))
        text = text[:pos] + ("" if kind == "delete" else noise) + text[end if kind != "insert" else pos:]
    return text


@pytest.mark.slow
@FUZZ
@given(text=mutated_shipped())
def test_mutated_shipped_profiles_get_a_verdict(workdir: Path, text: str) -> None:
    assert_verdict(*validate(workdir, text, "mutated")[:2])


@FUZZ
@given(text=st.text(max_size=300))
def test_unicode_text_gets_a_verdict(workdir: Path, text: str) -> None:
    assert_verdict(*validate(workdir, text, "unicode text")[:2])


@FUZZ
@given(junk=st.binary(max_size=400))
def test_binary_junk_gets_a_verdict(workdir: Path, junk: bytes) -> None:
    assert_verdict(*validate(workdir, junk, "binary junk")[:2])


@FUZZ
@given(depth=st.integers(1, 5000), opener=st.sampled_from(["[", "{a: ", "- ", "a:\n  ", "? "]))
def test_deep_nesting(workdir: Path, depth: int, opener: str) -> None:
    code, err, _ = validate(workdir, "classes:\n  ssd:\n    queue: " + opener * depth, "deep nesting")
    assert_invalid(code, err)


# --- fixed hard cases ---------------------------------------------------------------------------

BIG = 10 * 1024 * 1024


@pytest.mark.parametrize("label", ["10 MB of random bytes", "10 MB of YAML", "10 MB valid profile then padding"])
def test_10_mb_file_is_rejected_fast(workdir: Path, label: str) -> None:
    if label == "10 MB of random bytes":
        content: bytes | str = os.urandom(BIG)
    elif label == "10 MB of YAML":
        content = "classes:\n  ssd:\n    queue: [" + "1, " * (BIG // 3) + "]\n"
    else:
        content = SHIPPED_TEXTS[0] + "#" * BIG
    code, err, elapsed = validate(workdir, content, label)
    assert_invalid(code, err)
    assert err.startswith(f"{workdir / 'fuzzed.yaml'}:1:1: $: file is larger than")
    assert elapsed < 0.2


@pytest.mark.parametrize(("label", "text"), [
    ("empty", ""),
    ("one NUL", "\0"),
    ("almost 1 MiB flow list", "classes: [" + "1," * 500_000 + "]\n"),
    ("almost 1 MiB of keys", "".join(f"k{i}: {i}\n" for i in range(70_000))),
    ("almost 1 MiB string", "description: " + "x" * 1_000_000 + "\n"),
    ("almost 1 MiB unclosed brackets", "a: " + "[" * 1_000_000),
    ("alias bomb", "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        f"b{i}: &b{i} [{', '.join(['*a' if i == 0 else f'*b{i - 1}'] * 8)}]\n" for i in range(12))),
    ("recursive alias", "a: &a [*a]\n"),
    ("many errors", "classes:\n" + "".join(f"  c{i}: {{}}\n" for i in range(5000))),
])
def test_hard_cases(workdir: Path, label: str, text: str) -> None:
    assert len(text.encode()) <= MAX_PROFILE_BYTES  # these are parsed, not refused for their size
    code, err, _ = validate(workdir, text, label)
    assert_invalid(code, err)
    assert len(err.splitlines()) <= 101


# --- regressions found by the fuzz ----------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    # A merge key's value was read with the path of a key that never came: ('classes', None).
    ("classes:\n  <<: *a\n", ["2:3: $.classes: YAML merge keys", "2:7: $.classes['<<']: alias *a has no anchor"]),
    ("classes:\n  ssd:\n    <<: *a\n    read_ahead_kb: 1\n", ["3:9: $.classes.ssd['<<']: alias *a has no anchor"]),
    # A refused key's value is not reported under the previous key's name.
    ("classes:\n  ssd: {}\n  ssd: *b\n", ["3:8: $.classes.ssd: alias *b has no anchor"]),
    ("classes:\n  nvme: {}\n  [a]: *c\n", ["3:8: $.classes: alias *c has no anchor"]),
])
def test_alias_under_refused_key_is_a_diagnostic(workdir: Path, text: str, expected: list[str]) -> None:
    code, err, _ = validate(workdir, text, "regression")
    assert_invalid(code, err)
    for fragment in expected:
        assert any(fragment in line for line in err.splitlines()), err


def test_diagnostic_path_is_always_a_string() -> None:
    from tunectl.profile.reader import Diagnostic, json_path

    assert json_path(("classes", None, 3, True, "../x")) == "$.classes[?][3][?]['../x']"
    d = Diagnostic("f", 1, 1, ("classes", None), "m")  # type: ignore[arg-type]
    assert d.path == "$.classes[?]" and str(d) == "f:1:1: $.classes[?]: m"


# --- YAML-token mutation of the shipped and the malformed test profiles, through three commands -----

def _malformed_test_profiles() -> list[str]:
    """Every literal profile text that tests/unit/profile/test_profile_errors.py feeds to `validate_text`."""
    import ast

    tree = ast.parse((Path(__file__).parent / "test_profile_errors.py").read_text())
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "validate_text" and len(node.args) > 1:
            try:
                value = ast.literal_eval(node.args[1])
            except ValueError:
                continue
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, str) and len(value) < 5000:
                texts.append(value)
    return texts


MALFORMED_TEXTS = _malformed_test_profiles()
TEST_DATA_TEXTS = [p.read_text() for p in sorted(TEST_DATA.glob("*.yaml"))]
SEED = 9
MUTANTS = int(os.environ.get("TUNECTL_FUZZ_MUTANTS", "1000"))
HUGE = ["9" * 400, "-" + "9" * 5000, "1e400", "-1e400", "0x" + "f" * 300, "0b" + "1" * 200, ".inf", "-.inf", ".nan",
        "1_000_000_000_000_000_000", "18446744073709551616", "2147483648", "-0", "0o777", "1:30:00"]
TOKENS = {
    "anchor": ["&a ", "&b ", "&a&b ", "& ", "&\u00e9 "],
    "alias": ["*a", "*b", "*undefined", "* ", "*a*a", "[*a, *a, *a]", "{<<: *a}"],
    "merge": ["<<: *a", "<<: [*a, *b]", "<<: {}", "<<: x", "<<: ", "<<: &a {read_ahead_kb: 1}", "? <<\n: *a"],
    "tag": ["!!str ", "!!int ", "!!float ", "!!bool ", "!!null ", "!!binary ", "!!timestamp ", "!!set ", "!!omap ",
            "!!python/object:os.system ", "!!python/name:os.system ", "!custom ", "!<tag:x> ", "! ", "!!map ",
            "!!seq "],
    "flow": ["[", "]", "{", "}", "[]", "{}", "[[[[", "}}}", "{a: [", ", ", "[a, {b: c}]", "? [a]: b"],
    "control": ["\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\x85", "\u2028", "\ufeff", "\t", "\r", "\r\n", "\x0c",
                "\ud800", "\U0010ffff"],
    "huge": HUGE,
    "structure": ["---\n", "...\n", "%YAML 1.1\n", "%TAG ! tag:x:\n", "- ", ": ", "? ", "|\n", ">-\n", "#", "'", '"'],
}


def _mutate(rng, text: str) -> str:
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(sorted(TOKENS))
        token = rng.choice(TOKENS[kind])
        lines = text.split("\n")
        where = rng.choice(["offset", "value", "line", "anchor-and-alias"])
        if where == "offset" or not lines:
            pos = rng.randint(0, len(text))
            cut = rng.choice([0, 0, 1, rng.randint(0, 12)])
            text = text[:pos] + token + text[pos + cut:]
        elif where == "value":
            i = rng.randrange(len(lines))
            key, sep, _ = lines[i].partition(": ")
            lines[i] = f"{key}{sep or ': '}{token}"
            text = "\n".join(lines)
        elif where == "line":
            i = rng.randrange(len(lines))
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip(" "))]
            lines.insert(i, indent + token)
            text = "\n".join(lines)
        else:  # an anchor on one value and an alias to it elsewhere: the case that found the merge-key crash
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            key, sep, value = lines[i].partition(": ")
            if sep:
                lines[i] = f"{key}: &a {value}"
            indent = lines[j][: len(lines[j]) - len(lines[j].lstrip(" "))]
            lines.insert(j, indent + rng.choice(["<<: *a", "x: *a", "- *a", "*a : 1", "read_ahead_kb: *a"]))
            text = "\n".join(lines)
    return text


def _mutants() -> list[tuple[str, str]]:
    import random

    rng = random.Random(SEED)
    seeds = ([("shipped", t) for t in SHIPPED_TEXTS] + [("malformed", t) for t in MALFORMED_TEXTS]
             + [("test data", t) for t in TEST_DATA_TEXTS])
    return [(label, _mutate(rng, text)) for label, text in (rng.choice(seeds) for _ in range(MUTANTS))]


@pytest.fixture(scope="module")
def fuzz_tree(tmp_path_factory: pytest.TempPathFactory):
    from tests.fakesys import FakeTree, all_topologies

    tree = FakeTree.create(tmp_path_factory.mktemp("fuzz-tree"))
    all_topologies(tree)
    return tree


COMMANDS = {
    "profile validate": lambda path: ["profile", "validate", path],
    "plan": lambda path: ["plan", "-p", path],
    "udev render": lambda path: ["udev", "render", "-p", path],
}


def test_malformed_test_profiles_were_found() -> None:
    assert len(MALFORMED_TEXTS) >= 30, MALFORMED_TEXTS


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_yaml_token_mutants_get_a_verdict(workdir: Path, fuzz_tree, command: str) -> None:
    """Every mutant exits 0 or 2 with a diagnostic; never an internal error, a traceback or a write."""
    path = workdir / "mutant.yaml"
    state = workdir / "fuzz-state"
    env = {"TUNECTL_STATE_DIR": str(state), "TUNECTL_PROFILE_PATH": str(workdir),
           "TUNECTL_SYSFS_ROOT": str(fuzz_tree.root), "TUNECTL_UDEV_ROOT": str(fuzz_tree.udev_root)}
    codes: dict[int, int] = {}
    started = time.perf_counter()
    for n, (label, text) in enumerate(_mutants()):
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        out, err = io.StringIO(), io.StringIO()
        code = main(COMMANDS[command](str(path)), env=env, stdout=out, stderr=err)
        codes[code] = codes.get(code, 0) + 1
        errors = err.getvalue()
        if "internal error" in errors or "Traceback" in errors or code not in (0, 2):
            # Once more with --propagate, so the failure shows the traceback.
            main(["--propagate", *COMMANDS[command](str(path))], env=env, stdout=io.StringIO(), stderr=io.StringIO())
            pytest.fail(f"mutant {n} of a {label} profile: exit {code}\n{errors}\n--- profile:\n{text}")
        if code == 2:
            assert any(DIAGNOSTIC.match(line) or line.startswith("tunectl: error: ")
                       for line in errors.splitlines()), f"mutant {n}: {errors}\n{text}"
        assert not state.exists(), f"mutant {n}: {command} wrote state"
    TIMINGS[f"{command} x{MUTANTS}"] = time.perf_counter() - started
    print(f"\n{command}: exit codes {codes}")
    assert codes.get(2, 0) > MUTANTS // 2 and codes.get(0, 0) > 0, codes  # the mutants reach both verdicts


def test_profile_name_too_long_for_the_filesystem(workdir: Path) -> None:
    """Found by the token fuzz: ENAMETOOLONG from the search-path lookup was an internal error."""
    code, err, _ = validate(workdir, "extends: " + "x" * 300 + "\nclasses: {}\n", "regression")
    assert_invalid(code, err)
    assert ": no such profile on the search path" in err
