"""YAML parser events -> plain data with positions, under tunectl's limits (depth, values, one document).

Built from the parser's event stream rather than yaml.compose: libyaml's composer recurses per
nesting level and crashes the interpreter on deeply nested input, and a composed node graph
expands aliases without limit. `parse_yaml` is the entry: text -> Document. Pure: works on text.
"""

from __future__ import annotations

import copy
import re

from tunectl.profile.reader import (
    MAX_DEPTH,
    MAX_PROFILE_BYTES,
    MAX_VALUES,
    Diagnostic,
    Document,
    PathT,
    json_path,
    line_col,
    short,
)

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any


def depth_capped_loader() -> Any:
    """The pure-Python loader, made to see the end of the stream once flow nesting passes MAX_DEPTH.

    Its scanner looks ahead up to 1024 characters for a simple key and walks every open flow
    level at each token: 5000 nested '[' cost seconds. Everything up to the cut is read as
    usual, so the builder still meets level MAX_DEPTH + 1 (each flow level is one of its levels)
    and stops there with its own message, before the parser complains about the early end.
    """
    import yaml

    class DepthCappedLoader(yaml.SafeLoader):
        def fetch_more_tokens(self) -> None:
            if self.flow_level > MAX_DEPTH + 1:
                self.fetch_stream_end()
                return
            super().fetch_more_tokens()

    return DepthCappedLoader


def read_events(text: str, doc: Document, loader: Any) -> tuple[Builder, Exception | None]:
    """Feed the parser's events to a builder until it stops; the YAML or decoding error, if any."""
    import yaml

    builder = Builder(doc)
    try:
        for event in yaml.parse(text, Loader=loader):
            if builder.feed(event):
                break
    except (yaml.YAMLError, UnicodeError) as e:
        return builder, e
    return builder, None


_TAG = "tag:yaml.org,2002:"
_MAP_TAGS = (None, "!", _TAG + "map")
_SEQ_TAGS = (None, "!", _TAG + "seq")


class _Frame:
    """One open mapping or list. A plain class, not a dataclass: this module is imported by every command that
    reads a profile, and generating a dataclass's methods costs ~1 ms of CPU at each start."""

    __slots__ = ("value", "path", "anchor", "start_count", "is_map", "keep", "expect_key", "key", "skip_value",
                 "items", "is_key")

    def __init__(self, value: Any, path: PathT, anchor: str | None, start_count: int, is_map: bool, keep: bool,
                 is_key: bool = False) -> None:
        self.value = value  # dict or list being filled; None when the content is thrown away
        self.path = path
        self.anchor = anchor
        self.start_count = start_count
        self.is_map = is_map
        self.keep = keep
        self.expect_key = True
        self.key: str | None = None  # the key whose value comes next; None after a key that is not a scalar
        self.skip_value = False  # a duplicate or unusable key: its value is read and thrown away
        self.items = 0
        self.is_key = is_key  # a mapping or list used as a key (an error): not attached as a value


class Builder:
    """YAML events -> plain Python data with the position of every key and value."""

    def __init__(self, doc: Document) -> None:
        import yaml.resolver

        self.doc = doc
        self.diags: list[Diagnostic] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.count = 0
        self.documents = 0
        self.root: Any = None
        self.stopped = False
        self.resolver = yaml.resolver.Resolver()

    def _error(self, pos: tuple[int, int], path: PathT, message: str) -> None:
        self.diags.append(Diagnostic(self.doc.file, pos[0], pos[1], json_path(path), message))

    def _stop(self, pos: tuple[int, int], path: PathT, message: str) -> bool:
        self._error(pos, path, message)
        self.stopped = True
        return True

    def feed(self, event: Any) -> bool:
        """Take one event; True when parsing should stop (limits exceeded)."""
        import yaml

        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                return self._stop(_pos(event), (), "a profile is one YAML document; a second one starts here")
            return False
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = self.stack.pop()
            if frame.anchor is not None:
                self.open_anchors.discard(frame.anchor)
                self.anchors[frame.anchor] = (frame.value, self.count - frame.start_count)
            if not frame.is_key:
                self._attach(frame.value)
            return False
        if isinstance(event, yaml.NodeEvent):
            return self._node(event)
        return False

    def _node(self, event: Any) -> bool:
        import yaml

        pos = _pos(event)
        parent = self.stack[-1] if self.stack else None
        self.count += 1
        if self.count > MAX_VALUES:
            return self._stop(pos, parent.path if parent else (),
                              f"more than {MAX_VALUES} values (aliases count each time they are used); "
                              "a profile is much smaller")
        if parent is not None and parent.is_map and parent.expect_key:
            return self._key(event, parent, pos)
        if parent is None:
            path, keep = (), True
        elif parent.is_map:
            # A value whose key was refused (merge key, duplicate, a list as key) still has a path for its diagnostics.
            path = parent.path if parent.key is None else parent.path + (parent.key,)
            keep = parent.keep and not parent.skip_value
        else:
            path, keep = parent.path + (parent.items,), parent.keep
        if keep:
            self.doc.value_pos[path] = pos
        if isinstance(event, yaml.AliasEvent):
            value = self._alias(event, path, pos)
            self._attach(value if keep else None)
            return self.stopped
        if isinstance(event, yaml.ScalarEvent):
            value = self._scalar(event, path, pos)
            if event.anchor is not None:
                self.anchors[event.anchor] = (value, 1)
            self._attach(value if keep else None)
            return False
        is_map = isinstance(event, yaml.MappingStartEvent)
        if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            self._error(pos, path, f"YAML tag {event.tag} is not supported in a profile")
        if len(self.stack) >= MAX_DEPTH:
            return self._stop(pos, path, f"nested more than {MAX_DEPTH} levels deep; a profile is much flatter")
        container: Any = ({} if is_map else []) if keep else None
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Frame(container, path, event.anchor, self.count, is_map, keep))
        return False

    def _key(self, event: Any, parent: _Frame, pos: tuple[int, int]) -> bool:
        import yaml

        parent.expect_key = False
        parent.skip_value = True
        parent.key = event.value if isinstance(event, yaml.ScalarEvent) else None
        if not isinstance(event, yaml.ScalarEvent):
            self._error(pos, parent.path, "mapping keys must be plain names, not lists, mappings or aliases")
            if not isinstance(event, yaml.AliasEvent):
                if len(self.stack) >= MAX_DEPTH:
                    return self._stop(pos, parent.path, f"nested more than {MAX_DEPTH} levels deep")
                self.stack.append(_Frame(None, parent.path, None, self.count,
                                         isinstance(event, yaml.MappingStartEvent), keep=False, is_key=True))
            return False
        key = event.value
        if event.implicit[0] and event.tag is None and key == "<<":
            self._error(pos, parent.path, "YAML merge keys (<<) are not supported; use extends: or an alias")
            return False
        if not parent.keep:
            return False
        first = self.doc.key_pos.get(parent.path + (key,))
        if first is not None:
            self._error(pos, parent.path + (key,), f"duplicate key {key!r} (first at line {first[0]}); "
                        "YAML would silently keep only the last one")
            return False
        parent.skip_value = False
        self.doc.key_pos[parent.path + (key,)] = pos
        return False

    def _attach(self, value: Any) -> None:
        if not self.stack:
            self.root = value
            return
        parent = self.stack[-1]
        if parent.is_map:
            if parent.keep and not parent.skip_value:
                parent.value[parent.key] = value
            parent.expect_key = True
            parent.skip_value = False
        else:
            if parent.keep:
                parent.value.append(value)
            parent.items += 1

    def _alias(self, event: Any, path: PathT, pos: tuple[int, int]) -> Any:
        name = event.anchor
        if name in self.open_anchors:
            self._error(pos, path, f"alias *{name} refers to a node that contains it")
            return None
        if name not in self.anchors:
            self._error(pos, path, f"alias *{name} has no anchor &{name} before it")
            return None
        value, size = self.anchors[name]
        self.count += size
        if self.count > MAX_VALUES:
            self._stop(pos, path, f"more than {MAX_VALUES} values (aliases count each time they are used); "
                       "a profile is much smaller")
            return None
        return copy.deepcopy(value)

    def _scalar(self, event: Any, path: PathT, pos: tuple[int, int]) -> Any:
        """Scalars as YAML 1.2 reads them: only true/false are booleans; yes/no/on/off and dates stay strings."""
        import yaml.nodes

        text, tag = event.value, event.tag
        if tag is None and event.implicit[0]:
            tag = self.resolver.resolve(yaml.nodes.ScalarNode, text, (True, False))
        elif tag in (None, "!"):
            tag = _TAG + "str"
        kind = tag[len(_TAG):] if tag.startswith(_TAG) else None
        try:
            if kind == "null":
                return None
            if kind == "bool":
                if text.lower() in ("true", "false"):
                    return text.lower() == "true"
                if event.tag is not None:
                    raise ValueError(text)
                return text
            if kind == "int":
                return text if ":" in text else _yaml_int(text)
            if kind == "float":
                return text if ":" in text else _yaml_float(text)
            if kind in ("str", "timestamp", "value", "merge"):
                return text
        except ValueError:
            self._error(pos, path, f"{short(text)} is not a valid YAML {kind}")
            return None
        self._error(pos, path, f"YAML tag {tag} is not supported in a profile")
        return None


def _pos(event: Any) -> tuple[int, int]:
    return event.start_mark.line + 1, event.start_mark.column + 1


def _yaml_int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    if digits.startswith("0b"):
        return sign * int(digits[2:], 2)
    return sign * int(digits, 10)  # 0755 is 755, as in YAML 1.2; ValueError past 4300 digits


def _yaml_float(text: str) -> float:
    lowered = text.replace("_", "").lower()
    if lowered.lstrip("+-") == ".inf":
        return float("-inf") if lowered.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    return float(lowered)


def parse_yaml(text: str, file: str) -> tuple[Document, list[Diagnostic]]:
    """YAML text -> Document; syntax errors, duplicate keys and oversize input become diagnostics.

    `doc.data` is None when nothing usable was read (syntax error, a limit
    exceeded, an empty file); otherwise it holds what was read, and the
    diagnostics are problems that still leave the rest worth checking.
    The events become data in the Builder below; PyYAML is imported here, on use (~25 ms).
    """
    import yaml
    import yaml.reader

    doc = Document(file, None)
    if len(text) > MAX_PROFILE_BYTES:
        return doc, [Diagnostic(file, 1, 1, "$", f"file is larger than {MAX_PROFILE_BYTES} bytes; "
                                "a profile is a small YAML file")]
    bad = re.search("\0", text) or yaml.reader.Reader.NON_PRINTABLE.search(text)
    if bad:
        line, col = line_col(text, bad.start())
        what = "NUL byte: a profile is YAML text, not binary data" if bad.group() == "\0" else \
            f"YAML does not allow the control character U+{ord(bad.group()):04X} here"
        return doc, [Diagnostic(file, line, col, "$", what)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    builder, error = read_events(text, doc, loader)
    if error is not None and loader is not yaml.SafeLoader:
        # libyaml (0.2.5 and later) has a nesting limit of its own, 1000 levels, which its scanner
        # hits while it looks ahead for simple keys, before tunectl has seen the 33rd level. The
        # pure-Python parser has no such limit: on any libyaml error the text is read again by it,
        # so tunectl's own limits fire first and the diagnostic is the same whatever libyaml does.
        retry = Document(file, None)
        again, _ = read_events(text, retry, depth_capped_loader())
        if again.stopped:
            doc.value_pos, doc.key_pos = retry.value_pos, retry.key_pos
            return doc, again.diags
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        context = ""
        if error.context and error.context_mark and mark and \
                (error.context_mark.line, error.context_mark.column) != (mark.line, mark.column):
            context = f" ({error.context} started at line {error.context_mark.line + 1}, column {error.context_mark.column + 1})"
        problem = (error.problem or str(error)).strip()
        return doc, [*builder.diags, Diagnostic(file, line, col, "$", f"YAML syntax: {problem}{context}")]
    if error is not None:
        return doc, [*builder.diags, Diagnostic(file, 1, 1, "$", f"YAML error: {error}")]
    if builder.stopped:
        return doc, builder.diags
    if builder.root is None and not builder.diags:
        return doc, [Diagnostic(file, 1, 1, "$", "the profile is empty (nothing but comments or white space)")]
    doc.data = builder.root
    return doc, builder.diags
