"""Read tuned's profiles: tuned.conf as tuned parses it, include chains, unit merge, variables.

Opens only the tuned.conf files (no sysfs, no subprocess). The result is tuned's own
model, merged the way tuned merges it; tuned_import turns that into a tunectl profile.
"""

from __future__ import annotations

import configparser
import contextlib
import copy
import errno
import os
import re
import stat
from collections.abc import Callable, Sequence

from tunectl.errors import UsageError
from tunectl.record import field, record
from tunectl.system import trust

_VARIABLE = re.compile(r"(?<!\\)\$\{(\w+)\}")
_PROFILE_DIR = re.compile(r"(?<!\\)\$\{i:PROFILE_DIR\}")

# Unit options that tuned's profile loader consumes itself (tuned/profiles/unit.py).
CONDITIONS = ("uname_regex", "cpuinfo_regex", "devices_udev_regex")
SCRIPTS = ("script_pre", "script_post")
_TRUE = ("true", "True", "1")


@record
class Unit:
    name: str
    type: str
    options: dict[str, str]
    enabled: bool = True
    replace: bool = False
    drop: list[str] = field(default_factory=list)
    devices: str = "*"
    extra: dict[str, str] = field(default_factory=dict)  # conditions and scripts


@record
class Profile:
    name: str
    path: str
    main: dict[str, str]
    units: dict[str, Unit]


def _make_unit(name: str, options: dict[str, str]) -> Unit:
    opts = dict(options)
    drop = opts.pop("drop", None)
    return Unit(
        name=name,
        type=opts.pop("type", name),
        enabled=opts.pop("enabled", "true") in _TRUE,
        replace=opts.pop("replace", "false") in _TRUE,
        drop=[d for d in re.split(r"\s*[,;]\s*", drop) if d] if drop else [],
        devices=opts.pop("devices", "*"),
        extra={k: opts.pop(k) for k in CONDITIONS + SCRIPTS if k in opts},
        options=opts,
    )


def merge(base: Profile, over: Profile) -> Profile:
    """tuned's Merger: the including (later) profile wins, per unit and per option."""
    base.main.update(over.main)
    for name, unit in over.units.items():
        old = base.units.get(name)
        if unit.replace or old is None:
            base.units[name] = copy.deepcopy(unit)
            continue
        # Quirk: type, enabled and devices are taken from the later unit even when it
        # does not set them, so a child's bare [disk] resets devices to "*".
        old.type, old.enabled, old.devices = unit.type, unit.enabled, unit.devices
        old.extra.update(unit.extra)
        for option in unit.drop:
            old.options.pop(option, None)
        old.options.update(unit.options)
    return base


def _read(path: str, what: str, chain: str, files: Files) -> str:
    try:  # a regular file only, read without waiting on a pipe
        return files.read(path)
    except trust.Untrusted as e:
        raise UsageError(f"cannot read {what} {path}: {e.found}{chain}", e.hint) from None
    except UnicodeDecodeError as e:
        raise UsageError(f"cannot read {what} {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                         f"{e.start}){chain}", "tuned reads its files as UTF-8: fix or convert that byte "
                         "(iconv -f LATIN1 -t UTF-8)") from None
    except OSError as e:
        reason = e.strerror or str(e)
        hint = ("name the profile's directory or its tuned.conf (a small INI file)" if e.errno == errno.EFBIG
                else "check the path and its permissions")
        raise UsageError(f"cannot read {what} {path}: {reason}{chain}", hint) from e


MAX_TUNED_BYTES = 4 << 20


def read_text(path: str) -> str:
    """A tuned file's text: a regular file, never a pipe or a device. Links are followed when root or the user
    owns them, never another user's (root would print a line of any file it can read in the parse error), and
    the resolved path is opened through no link, so a directory swapped for one meanwhile is refused."""
    return _whole(lambda: trust.read_regular(trust.resolve_own_links(path), MAX_TUNED_BYTES, resolved=True,
                                             decides=True, whole=True))  # as root: the profile would be root's


def _whole(read: Callable[[], bytes]) -> str:
    """The text of a tuned file `read` whole (`trust.read_whole`); OSError EFBIG when it is longer than
    MAX_TUNED_BYTES: its first bytes alone would lose every line after them and cut a value (readahead=40960
    read as 40)."""
    try:
        data = read()
    except trust.TooLarge:
        raise OSError(errno.EFBIG, f"larger than {MAX_TUNED_BYTES} bytes, not a tuned profile's file") from None
    return data.decode("utf-8")


class Files:
    """How tuned's files are reached: this machine's paths, links followed only when root's or the user's own
    (`read_text`). `TreeFiles` reaches those of a configuration tree instead."""

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def identity(self, path: str) -> object:
        """What tells two paths to one file apart from two files (an include cycle, a profile loaded twice)."""
        return os.path.realpath(path)

    def read(self, path: str) -> str:
        return read_text(path)

    def not_a_file(self, path: str) -> str | None:
        """What stands at `path` instead of the regular file tuned would read ("a named pipe, not a regular file",
        "a symbolic link loop"), as `read` reaches it; None when it is a regular file or nothing is there. Another
        user's link on the way is refused as `read` refuses it (trust.OthersLink), never followed."""
        try:
            st = os.lstat(trust.resolve_own_links(path))
        except trust.OthersLink:
            raise
        except trust.Untrusted as e:  # a link loop
            return e.found
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            return e.strerror or str(e)
        return _not_regular(st)


def _not_regular(st: os.stat_result) -> str | None:
    """`not_a_file`'s words for what it looked at: None for a regular file."""
    return None if stat.S_ISREG(st.st_mode) else trust.irregular(st.st_mode)


HOST = Files()


class TreeFiles(Files):
    """The files of the configuration tree `root`, as tuned running in that tree sees them: every path is the
    tree's, and every link on the way, an absolute one too, is resolved inside it (`trust.open_in_root`), so a
    tree's ``/etc/tuned/x -> /usr/lib/tuned/x`` is never this machine's directory of that name."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            return self._look(path)
        except OSError:
            return None

    def _look(self, path: str) -> os.stat_result:
        fd = trust.open_in_root(self.root, path, os.O_PATH)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def not_a_file(self, path: str) -> str | None:
        try:
            st = self._look(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            return "a symbolic link loop" if e.errno == errno.ELOOP else e.strerror or str(e)
        return _not_regular(st)

    def is_file(self, path: str) -> bool:
        st = self._stat(path)
        return st is not None and stat.S_ISREG(st.st_mode)

    def is_dir(self, path: str) -> bool:
        st = self._stat(path)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def identity(self, path: str) -> object:
        st = self._stat(path)
        return path if st is None else (st.st_dev, st.st_ino)

    def read(self, path: str) -> str:
        return _whole(lambda: trust.read_in_root(self.root, path, MAX_TUNED_BYTES, whole=True))


def parse_ini(text: str, path: str, chain: str = "") -> configparser.ConfigParser:
    # The options tuned itself uses: '=' only, inline '#' comments, duplicates tolerated,
    # case kept (sysfs paths), no interpolation (tuned reads raw values).
    parser = configparser.ConfigParser(
        delimiters=("=",),
        inline_comment_prefixes=("#",),
        strict=False,
        interpolation=None,
        allow_no_value=True,
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=path)
    except configparser.Error as e:
        hint = "tuned.conf must be INI: [section] then key=value"
        raise UsageError(f"cannot parse tuned profile {path}: {_ini_problem(e)}{chain}", hint) from None
    return parser


def _ini_problem(e: configparser.Error) -> str:
    """configparser's complaint on one line, with the line it names (its own text spans lines, quoted with \\n)."""
    if isinstance(e, configparser.MissingSectionHeaderError):
        return f"line {e.lineno}: {e.line.strip()!r} comes before any [section] header"
    if isinstance(e, configparser.ParsingError) and e.errors:
        lineno, line = e.errors[0]
        if line[:1] in ("'", '"'):  # configparser before 3.13 keeps the line as its repr
            import ast

            with contextlib.suppress(ValueError, SyntaxError):
                line = ast.literal_eval(line)
        more = f" (and {len(e.errors) - 1} more such line(s))" if len(e.errors) > 1 else ""
        return f"line {lineno}: {line.strip()!r} is neither key=value nor a [section] header{more}"
    return " ".join(str(e).split())


def _parse_profile(name: str, path: str, chain: str, files: Files) -> Profile:
    parser = parse_ini(_read(path, "tuned profile", chain, files), path, chain)
    profile_dir = os.path.dirname(path)
    sections: dict[str, dict[str, str]] = {}
    for section in parser.sections():
        sections[section] = {
            key: _PROFILE_DIR.sub(lambda _m: profile_dir, value or "") for key, value in parser.items(section, raw=True)
        }
    main = sections.pop("main", {})
    return Profile(name, path, main, {n: _make_unit(n, o) for n, o in sections.items()})


def _candidates(name: str, dirs: Sequence[str]) -> list[str]:
    # tuned 2.x: <dir>/<name>/tuned.conf; newer tuned: <dir>/profiles/<name>/tuned.conf.
    return [os.path.join(d, sub, name, "tuned.conf") for d in dirs for sub in ("", "profiles")]


def _chain(stack: Sequence[tuple[str, str]], last: str | None = None) -> str:
    names = [n for n, _ in stack] + ([last] if last else [])
    return " (include chain: " + " -> ".join(names) + ")" if len(names) > 1 else ""


class Loader:
    """Loads a profile and its includes depth-first, in tuned's merge order."""

    def __init__(self, dirs: Sequence[str], unconverted: list[str], files: Files = HOST) -> None:
        self.dirs = list(dirs)
        self.unconverted = unconverted
        self.files = files
        self.loaded: list[Profile] = []
        self.seen: set[object] = set()

    def load(self, name: str, path: str, stack: list[tuple[str, str]]) -> None:
        stack = stack + [(name, path)]
        self.seen.add(self.files.identity(path))
        profile = _parse_profile(name, path, _chain(stack), self.files)
        include = profile.main.pop("include", "").strip()
        if "${" in include:
            self.unconverted.append(
                f"[main] include={include} ({name}): computed by a tuned function at run time;"
                " the profile it names was not imported (import it yourself and use extends:)"
            )
        elif include:
            for ref in re.split(r"\s*[,;]\s*", include):
                optional = ref.startswith("-")
                inc_name = os.path.basename(ref.lstrip("-"))
                if inc_name:
                    inc_path = self._resolve(inc_name, optional, stack)
                    if inc_path:
                        self.load(inc_name, inc_path, stack)
        self.loaded.append(profile)

    def _resolve(self, name: str, optional: bool, stack: list[tuple[str, str]]) -> str | None:
        on_stack = {self.files.identity(p): n for n, p in stack}
        skipped = None
        for candidate in _candidates(name, self.dirs):
            if not self.files.is_file(candidate):
                continue
            # Like tuned, a file already loaded is passed over and the next directory is
            # tried: that is how /etc/tuned/foo can say include=foo to extend the system foo.
            if self.files.identity(candidate) in self.seen:
                skipped = skipped or candidate
                continue
            return candidate
        if skipped is not None:
            if self.files.identity(skipped) in on_stack:
                raise UsageError(
                    "tuned include cycle: " + " -> ".join([n for n, _ in stack] + [name]),
                    "files: " + " -> ".join(p for _, p in stack) + f" -> {skipped}",
                )
            return None  # already merged through another include (a diamond), as tuned does
        if optional:  # include=-name: load only if it exists
            return None
        raise _not_found(name, _candidates(name, self.dirs), self.files, _chain(stack, name))


def _not_a_file(path: str, files: Files) -> str | None:
    """`files.not_a_file`, another user's link said as what it is ("a symbolic link owned by nobody ..."): a
    refusal of this path in the words of the one that reads it."""
    try:
        return files.not_a_file(path)
    except trust.Untrusted as e:
        return e.about(path)


def _not_found(name: str, candidates: Sequence[str], files: Files, chain: str = "", more: str = "") -> UsageError:
    """tuned's "profile not found", with what stands at a candidate path instead of a regular tuned.conf (a named
    pipe, a directory, a link loop): tuned passes over it too (it takes only a regular file), and "not found"
    alone sends a user looking for a file that is there. `more`: the hint's end."""
    odd = [f"{c}: {what}" for c in candidates if (what := _not_a_file(c, files))]
    said = f" ({'; '.join(odd)}: tuned takes only a regular tuned.conf)" if odd else ""
    return UsageError(f"tuned profile '{name}' not found{chain}{said}", "searched " + ", ".join(candidates) + more)


def locate(ref: str, dirs: Sequence[str], files: Files = HOST) -> tuple[str, str]:
    """The profile name and tuned.conf path that `ref` (name, file or directory) means."""
    if os.sep in ref or files.is_file(ref):
        path = os.path.join(ref, "tuned.conf") if files.is_dir(ref) else ref
    else:
        found = [c for c in _candidates(ref, dirs) if files.is_file(c)]
        if found:
            return ref, found[0]
        if not files.is_dir(ref):
            raise _not_found(ref, _candidates(ref, dirs), files,
                             more="; or give the path of a tuned.conf or profile directory")
        path = os.path.join(ref, "tuned.conf")
    if not files.is_file(path):
        try:
            found = files.not_a_file(path) or "not found"
        except trust.Untrusted as e:  # another user's link: refused, never followed, as `read` refuses it
            raise UsageError(f"tuned profile file {path}: {e.about(path)}", e.hint) from None
        raise UsageError(f"tuned profile file {path}: {found}", "give a tuned.conf, a directory holding one, or a profile name")
    path = os.path.normpath(path)
    if os.path.basename(path) == "tuned.conf":
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        name = os.path.splitext(os.path.basename(path))[0]
    return name, path


def expand(value: str, variables: dict[str, str]) -> str:
    value = _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), value)
    return re.sub(r"\\(\$\{\w+\})", r"\1", value)  # tuned unescapes \${VAR}


def unresolved(value: str) -> str | None:
    if "${f:" in value:
        return "uses a tuned function (${f:...}), evaluated only by tuned on the running host"
    if "${" in value:
        return "refers to a tuned variable that is not defined"
    return None
