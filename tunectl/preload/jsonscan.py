"""`loads`: JSON text decoded as `json.loads` decodes it, by json's own C scanner, without importing json.

`import json` costs a boot-time replay ten more modules before its first read (json's four and, through
json.decoder's patterns, re's six and enum), each a cold read and bytecode to run under a boot's emulated or
busy CPU (#30's boot pair). A list's lines are decoded here by the scanner json.loads itself calls
(`_json.make_scanner`, json.decoder.JSONDecoder's defaults); anything it does not take whole (bad JSON, a value
with more after it, a byte-order mark, bytes, a Python without `_json`) goes to json.loads, which then raises
(or returns) exactly what it always did.
"""

from __future__ import annotations

try:
    from _json import make_scanner as _make_scanner
except ImportError:  # a Python built without json's C accelerator: json.loads does it all
    _make_scanner = None

_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE: what json.loads skips before and after the value


class _Defaults:
    """The attributes json's C scanner reads from its decoder: json.decoder.JSONDecoder()'s own defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_scan = _make_scanner(_Defaults()) if _make_scanner is not None else None


def loads(text: str):  # noqa: ANN201 (any JSON value, as json.loads)
    """`json.loads(text)`: the same value, or (through json.loads itself) the same error."""
    if _scan is not None and type(text) is str and not text.startswith("\ufeff"):
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration:  # no value where one was expected: json.loads says where
            pass
        except SystemError:  # CPython 3.11's C scanner (_json), not a general catch: on bad JSON inside a value it
            # raises JSONDecodeError only when json.decoder is loaded (never in a replay), else SystemError
            # "returned NULL without setting an exception"; json.loads (below) loads it and says where. Do not widen.
            pass
        else:
            if end == len(text) or not text[end:].strip(_WHITESPACE):
                return value
    import json

    return json.loads(text)
