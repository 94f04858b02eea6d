"""The plain subset of YAML most profiles are written in, read without PyYAML (whose import is ~25 ms of CPU).

Used by `library.check_file` for every text, checked or passed before (on a cache hit the settings
still come from parsing the text itself, never from the cache entry). `read_plain` gives exactly what
`yaml_events.parse_yaml` gives (data, its types, the position of every key and value) or None, and None
means "read it with PyYAML": anything outside the subset, however harmless, is None. The subset:
block mappings with plain-name keys, block sequences (one node per item, or a mapping that starts on
the dash's line), one-line flow mappings and lists, plain scalars that are words (strings, the
booleans and nulls of the YAML resolver) or decimal integers, and quoted scalars without escapes.
No tabs, anchors, aliases, tags, multi-line scalars, document markers or directives. The test
(`tests/unit/profile/test_plain_yaml.py`) compares it with `parse_yaml` on every shipped profile and
on generated texts. Pure: works on text.
"""

from __future__ import annotations

from tunectl.profile.reader import MAX_DEPTH, MAX_PROFILE_BYTES, MAX_VALUES, Document, PathT

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

# The YAML 1.1 resolver's booleans and nulls, as the builder (`yaml_events._scalar`) reads them:
# only true/false become booleans (yes/no/on/off stay strings, as every other word does).
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULLS = {"null", "Null", "NULL"}
_KEY_START = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_KEY_CHARS = _KEY_START | set("0123456789-")
_WORD_START = _KEY_START | set("/")
_DIGITS = set("0123456789")
_FLOW_WORD = _KEY_CHARS | set("/.")
# Line breaks and marks YAML 1.1 gives a meaning this reader does not model.
_REFUSED = ("\r", "\t", "\x85", "\u2028", "\u2029", "\ufeff")


class _Outside(Exception):
    """The text leaves the subset: read it with PyYAML."""


def read_plain(text: str, file: str) -> Document | None:
    """The Document `parse_yaml` would give for a text in the subset; None for any other text."""
    if len(text) > MAX_PROFILE_BYTES or any(c in text for c in _REFUSED) or not _printable(text):
        return None
    try:
        doc = _Reader(text, file).document()
    except (_Outside, IndexError, ValueError, RecursionError):  # ValueError: an int past 4300 digits
        return None
    return doc if len(doc.value_pos) + len(doc.key_pos) <= MAX_VALUES else None


def _printable(text: str) -> bool:
    """No control character (parse_yaml refuses them) and, beyond ASCII, only what Python calls printable."""
    if text.isascii():
        return not any(c < " " and c != "\n" or c == "\x7f" for c in text)
    return all(c.isprintable() or c == "\n" for c in text)


class _Reader:
    def __init__(self, text: str, file: str) -> None:
        self.doc = Document(file, None)
        # (line number, indent, content with the comment and trailing blanks cut) of each line that holds content
        self.lines: list[tuple[int, int, str]] = []
        for number, line in enumerate(text.split("\n"), 1):
            content = _cut_comment(line)
            if not content.strip():
                continue
            indent = len(content) - len(content.lstrip(" "))
            if indent == 0 and content.startswith(("---", "...", "%")):
                raise _Outside
            self.lines.append((number, indent, content))
        self.i = 0

    def document(self) -> Document:
        if not self.lines or self.lines[0][1] != 0:
            raise _Outside
        self.doc.data = self._block_mapping((), 0)
        if self.i != len(self.lines):
            raise _Outside
        return self.doc

    # --- block nodes ---------------------------------------------------------------------------

    def _block_mapping(self, path: PathT, indent: int) -> dict:
        """Keys at `indent`, from line self.i on."""
        self._depth(path)
        self.doc.value_pos[path] = (self.lines[self.i][0], indent + 1)
        out: dict = {}
        while self.i < len(self.lines):
            number, line_indent, content = self.lines[self.i]
            if line_indent < indent:
                break
            if line_indent != indent:
                raise _Outside  # a continued scalar, or a stray line: left to PyYAML
            self._count()
            key, after = _key(content, indent)
            if key in out:
                raise _Outside
            self.doc.key_pos[path + (key,)] = (number, indent + 1)
            self.i += 1
            rest = content[after:]
            if rest:
                value_col = after + len(rest) - len(rest.lstrip(" "))
                out[key] = self._inline(path + (key,), number, content, value_col)
            else:
                out[key] = self._nested(path + (key,), indent)
        return out

    def _nested(self, path: PathT, indent: int) -> Any:
        """The block node under `key:` with nothing after it: a mapping further in, or a sequence."""
        if self.i >= len(self.lines):
            raise _Outside  # an empty value (null): left to PyYAML
        _, line_indent, content = self.lines[self.i]
        if content[line_indent:].startswith("- ") and line_indent >= indent:
            return self._block_sequence(path, line_indent)
        if line_indent > indent:
            return self._block_mapping(path, line_indent)
        raise _Outside

    def _block_sequence(self, path: PathT, indent: int) -> list:
        self._depth(path)
        self.doc.value_pos[path] = (self.lines[self.i][0], indent + 1)
        out: list = []
        while self.i < len(self.lines):
            number, line_indent, content = self.lines[self.i]
            if line_indent != indent or not content[indent:].startswith("- "):
                break
            self._count()
            item_col = indent + 2
            while content[item_col:item_col + 1] == " ":
                item_col += 1
            item = path + (len(out),)
            if _starts_key(content, item_col):
                self.lines[self.i] = (number, item_col, content)  # the mapping's first key, as if on a line of its own
                out.append(self._block_mapping(item, item_col))
            else:
                self.i += 1
                out.append(self._inline(item, number, content, item_col))
        return out

    def _inline(self, path: PathT, number: int, content: str, col: int) -> Any:
        """A value that ends its line: a flow collection or a scalar."""
        first = content[col]
        if first in "{[":
            value, end = self._flow(path, number, content, col)
            if content[end:].strip():
                raise _Outside
            return value
        self.doc.value_pos[path] = (number, col + 1)
        return _block_scalar(content[col:])

    # --- flow nodes (on one line) --------------------------------------------------------------

    def _flow(self, path: PathT, number: int, content: str, col: int) -> tuple[Any, int]:
        self._depth(path)
        self.doc.value_pos[path] = (number, col + 1)
        is_map = content[col] == "{"
        close = "}" if is_map else "]"
        out: Any = {} if is_map else []
        at = _skip(content, col + 1)
        if content[at] == close:
            return out, at + 1
        while True:
            if is_map:
                key, at = _key(content, at)
                if key in out:
                    raise _Outside
                self.doc.key_pos[path + (key,)] = (number, at - len(key))  # `at` is just past the ':'
                if content[at:at + 1] != " ":
                    raise _Outside  # {a:1} holds the scalar 'a:1'
                at = _skip(content, at)
                out[key], at = self._flow_node(path + (key,), number, content, at)
            else:
                value, at = self._flow_node(path + (len(out),), number, content, at)
                out.append(value)
            at = _skip(content, at)
            if content[at] == close:
                return out, at + 1
            if content[at] != ",":
                raise _Outside
            at = _skip(content, at + 1)
            if content[at] in ",]}":
                raise _Outside  # an empty entry or a trailing comma: left to PyYAML

    def _flow_node(self, path: PathT, number: int, content: str, at: int) -> tuple[Any, int]:
        self._count()
        if content[at] in "{[":
            return self._flow(path, number, content, at)
        self.doc.value_pos[path] = (number, at + 1)
        if content[at] in "'\"":
            return _quoted(content, at)
        end = at
        while end < len(content) and content[end] in _FLOW_WORD:
            end += 1
        if end == at or (end < len(content) and content[end] not in " ,]}"):
            raise _Outside
        return _word(content[at:end]), end

    def _depth(self, path: PathT) -> None:
        if len(path) >= MAX_DEPTH:
            raise _Outside

    def _count(self) -> None:
        """Past MAX_VALUES the text is PyYAML's, whose builder stops there: not read to its end first (a 1 MiB
        flow list of numbers took 2 s of CPU here, 0.13 s to parse_yaml's limit)."""
        if len(self.doc.value_pos) + len(self.doc.key_pos) > MAX_VALUES:
            raise _Outside


def _cut_comment(line: str) -> str:
    """The line without its comment and trailing blanks; a '#' inside quotes is no comment: left to PyYAML."""
    at = line.find("#")
    while at != -1:
        if at == 0 or line[at - 1] == " ":
            if "'" in line[:at] or '"' in line[:at]:
                raise _Outside
            return line[:at].rstrip(" ")
        at = line.find("#", at + 1)
    return line.rstrip(" ")


def _starts_key(content: str, at: int) -> bool:
    if content[at] not in _KEY_START:
        return False
    end = at
    while end < len(content) and content[end] in _KEY_CHARS:
        end += 1
    return content[end:end + 1] == ":" and content[end + 1:end + 2] in ("", " ")


def _key(content: str, at: int) -> tuple[str, int]:
    """A plain-name key at `at` followed by ':' (then a blank or the end); the key and the index of ':'."""
    if content[at] not in _KEY_START:
        raise _Outside
    end = at
    while end < len(content) and content[end] in _KEY_CHARS:
        end += 1
    if content[end:end + 1] != ":" or content[end + 1:end + 2] not in ("", " "):
        raise _Outside
    return content[at:end], end + 1


def _skip(content: str, at: int) -> int:
    while content[at] == " ":
        at += 1
    return at


def _quoted(content: str, at: int) -> tuple[str, int]:
    quote = content[at]
    end = content.find(quote, at + 1)
    if end == -1:
        raise _Outside
    inner = content[at + 1:end]
    if "\\" in inner:
        raise _Outside
    return inner, end + 1


def _block_scalar(text: str) -> Any:
    """A scalar that runs to the end of its line (comment cut)."""
    if text[0] in "'\"":
        value, end = _quoted(text, 0)
        if text[end:].strip():
            raise _Outside
        return value
    if text[0] in _DIGITS or text[0] == "-":
        return _word(text)
    if text[0] not in _WORD_START or ": " in text or text.endswith(":"):
        raise _Outside
    if " " not in text:
        return _word(text)
    return text


def _word(text: str) -> Any:
    """A plain scalar as the resolver and the builder read it; integers in decimal only."""
    digits = text[1:] if text.startswith("-") else text
    if digits and all(c in _DIGITS for c in digits):
        if len(digits) > 1 and digits[0] == "0":
            raise _Outside  # 0755: YAML 1.1 octal, read as decimal by the builder: left to PyYAML
        return int(text)
    if text[0] not in _WORD_START:
        raise _Outside
    if text in _BOOLS:
        return _BOOLS[text]
    return None if text in _NULLS else text
