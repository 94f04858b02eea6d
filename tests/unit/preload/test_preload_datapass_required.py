"""A missing compiled data pass fails its tests in CI and under scripts/test, and is a skip that says how to build
it elsewhere (tests/README.md)."""

from __future__ import annotations

import pytest

from tests.preload_helpers import DATAPASS_BUILD, need_datapass


@pytest.mark.parametrize("environ", [{"CI": "true"}, {"TUNECTL_REQUIRE_DATAPASS": "1"}], ids=["ci", "required"])
def test_not_built_fails_where_it_is_required(environ: dict[str, str]) -> None:
    with pytest.raises(pytest.fail.Exception, match="build_ext --inplace"):
        need_datapass(None, environ)


def test_not_built_elsewhere_is_a_skip_that_says_how_to_build_it() -> None:
    with pytest.raises(pytest.skip.Exception) as skip:
        need_datapass(None, {"CI": "false"})
    assert DATAPASS_BUILD in str(skip.value)


def test_built_neither() -> None:
    need_datapass(object(), {"CI": "true"})
