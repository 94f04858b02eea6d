"""tunectl.profile.schema.fits_schema against jsonschema's validator (`schema_validator`), on the profile
texts the other tests hold and on generated documents: it passes only what jsonschema passes, and it
passes every valid document it models (mappings with string keys, lists, strings, integers, booleans,
null), so a first check of a plain profile does not load jsonschema. A document it does not pass is
validated by jsonschema, whose errors are the diagnostics: no verdict or message depends on it."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.profile.test_profile_fuzz import (
    KEYS,
    MALFORMED_TEXTS,
    SHIPPED_TEXTS,
    TEST_DATA_TEXTS,
    VALUES,
    _mutants,
    valid_profiles,
)
from tunectl.profile.schema import fits_schema, schema_validator
from tunectl.profile.yaml_events import parse_yaml

# Its verdicts rest on how jsonschema treats odd input: scripts/test runs it on Debian's own libraries too. The
# generated and mutated ones are slow, as test_profile_fuzz.py's are: scripts/test runs them (--slow), a quick loop does not.
pytestmark = pytest.mark.libraries
FUZZ = settings(max_examples=int(os.environ.get("TUNECTL_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _modelled(value: object) -> bool:
    """What fits_schema decides itself: the values YAML gives a profile, less floats and non-string keys."""
    if isinstance(value, dict):
        return all(type(k) is str for k in value) and all(_modelled(v) for v in value.values())
    if isinstance(value, list):
        return all(_modelled(v) for v in value)
    return type(value) in (str, int, bool, type(None))


def assert_agrees(data: object) -> bool:
    valid = schema_validator().is_valid(data)
    fits = fits_schema(data)
    assert not fits or valid, data  # never passes what jsonschema refuses
    if _modelled(data):
        assert fits == valid, data  # and decides every document it models as jsonschema does
    return fits


def _documents(texts: list[str]) -> list[object]:
    out = []
    for text in texts:
        doc, _ = parse_yaml(text, "p.yaml")
        if doc.data is not None:
            out.append(doc.data)
    return out


def test_every_shipped_profile_fits_without_jsonschema() -> None:
    documents = _documents(SHIPPED_TEXTS)
    assert len(documents) == len(SHIPPED_TEXTS)
    assert all(assert_agrees(d) for d in documents)


def test_the_error_tests_profiles_and_test_data_are_decided_as_jsonschema_decides() -> None:
    documents = _documents(MALFORMED_TEXTS + TEST_DATA_TEXTS)
    verdicts = [assert_agrees(d) for d in documents]
    assert len(documents) > 30 and verdicts.count(False) > 15 and True in verdicts, (len(documents), verdicts)


@pytest.mark.slow
def test_mutated_texts_are_decided_as_jsonschema_decides() -> None:
    documents = _documents([text for _, text in _mutants()])
    verdicts = [assert_agrees(d) for d in documents]
    assert True in verdicts and False in verdicts


@pytest.mark.slow
@FUZZ
@given(profile=valid_profiles())
def test_generated_valid_profiles_fit(profile: dict) -> None:
    assert assert_agrees(profile)


@st.composite
def _one_leaf_changed(draw) -> object:
    """A valid profile with one value (or one key) anywhere in it replaced by a random one."""
    profile = draw(valid_profiles())
    places = []

    def walk(node: object) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            places.append((node, key))
            walk(child)

    walk(profile)
    if not places:
        return draw(VALUES)
    node, key = draw(st.sampled_from(places))
    if isinstance(node, dict) and draw(st.booleans()):
        node[draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)))] = node.pop(key)
    else:
        node[key] = draw(VALUES)
    return profile


@pytest.mark.slow
@FUZZ
@given(data=_one_leaf_changed())
def test_a_changed_value_or_key_is_decided_as_jsonschema_decides(data: object) -> None:
    assert_agrees(data)


@pytest.mark.slow
@FUZZ
@given(data=st.one_of(VALUES, st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6)))
def test_random_documents_are_decided_as_jsonschema_decides(data: object) -> None:
    assert_agrees(data)


@pytest.mark.parametrize("data", [
    {"classes": {"ssd": {"read_ahead_kb": 150.0}}},  # a float: JSON Schema's integer, not sysfs's
    {"classes": {"ssd": {"read_ahead_kb": True}}},  # a boolean is no integer
    {1: "x"},  # a key that is no string
    {"classes": {"ssd": {"scheduler": ["none", "none"]}}},  # uniqueItems
])
def test_what_it_does_not_pass_is_left_to_jsonschema(data: object) -> None:
    assert not fits_schema(data)
