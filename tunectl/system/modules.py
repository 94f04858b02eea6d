"""The running kernel's module tree (``/lib/modules/<release>``): which I/O schedulers are loadable modules.

A scheduler built as a module is listed in ``queue/scheduler`` only once it is
loaded; writing its name makes the kernel load it (elv_iosched_store ->
request_module("<name>-iosched"), which modprobe resolves through the module's
alias). So tunectl counts a scheduler as offered when the device lists it *or*
the running kernel has it in ``modules.dep`` (and not in ``modules.builtin``,
whose entries are always listed).

The root is injected (``TUNECTL_MODULES_ROOT``; the running kernel's tree for the
real sysfs, nothing for a fake sysfs tree: tunectl.system.roots), like every other edge.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from tunectl.errors import UsageError
from tunectl.system.roots import setting

_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


def module_name(path: str) -> str | None:
    """``kernel/block/kyber-iosched.ko.zst`` -> ``kyber_iosched`` (kmod treats '-' and '_' alike), or None."""
    base = path.strip().rsplit("/", 1)[-1]
    for suffix in _SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)].replace("-", "_")
    return None


def parse_modules_dep(text: str) -> dict[str, str]:
    """modules.dep (``path: deps...`` per line) -> module name -> path relative to the release directory."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        path = line.split(":", 1)[0].strip()
        name = module_name(path) if path else None
        if name:
            out[name] = path
    return out


def parse_modules_builtin(text: str) -> set[str]:
    """modules.builtin (one path per line) -> module names built into the kernel."""
    return {name for name in (module_name(line) for line in text.splitlines() if line.strip()) if name}


def lines_naming(text: str, names: Collection[str]) -> str:
    """The lines of modules.dep or modules.builtin whose module (the file of the path before any ``:``) is one of
    `names` (``-`` and ``_`` alike), found by a substring scan, then a regular expression on those lines: a
    distribution kernel's ~6,000 other lines are never split (parsing them all took 2.4 s of every device
    command in a TCG guest, ~60 ms on a host)."""
    import re

    spelt = sorted({"[-_]".join(re.escape(part) for part in re.split("[-_]", name)) for name in names})
    if not spelt:
        return ""
    # The lines holding a name's longest part (str.find, in C), then the exact test on those few lines.
    lines = set()
    for name in names:
        part = max(re.split("[-_]", name), key=len)
        at = text.find(part) if part else -1
        while at != -1:
            line = _line_span(text, at)
            lines.add(line)
            at = text.find(part, line[1])  # on from the line's end: one look per line
    candidates = "\n".join(text[start:end] for start, end in sorted(lines))
    suffixes = "|".join(re.escape(s) for s in _SUFFIXES)
    pattern = re.compile(rf"^[ \t\r]*(?:[^\n:]*/)?(?:{'|'.join(spelt)})(?:{suffixes})[ \t\r]*(?::[^\n]*)?$", re.MULTILINE)
    return "\n".join(m.group(0) for m in pattern.finditer(candidates))


def _line_span(text: str, at: int) -> tuple[int, int]:
    """Where the line holding `text[at]` starts and ends (its newline, or the end of `text`)."""
    end = text.find("\n", at)
    return text.rfind("\n", 0, at) + 1, (len(text) if end == -1 else end)


def loadable_modules(dep_text: str | None, builtin_text: str | None, release_dir: str,
                     wanted: Collection[str] | None = None) -> dict[str, str]:
    """Module name -> absolute path of its file, for the modules in modules.dep that are not built in; `wanted`:
    only those modules (names as kmod spells them or with ``-``), the other lines never parsed."""
    if not dep_text:
        return {}
    if wanted is not None:
        dep_text, builtin_text = lines_naming(dep_text, wanted), lines_naming(builtin_text or "", wanted)
    builtin = parse_modules_builtin(builtin_text or "")
    return {name: os.path.join(release_dir, path) for name, path in parse_modules_dep(dep_text).items()
            if name not in builtin}


def kernel_release(env: Mapping[str, str]) -> str:
    """The release whose module tree is read: TUNECTL_KERNEL_RELEASE, else the running kernel's (`uname -r`).

    A release names one directory of the module root, as `uname -r` prints it; never a path. Joined to the root,
    an absolute one (or one with `..`) left it: the root's trust check (tunectl.system.roots.check_trusted) then
    judged a tree tunectl never read, and root read `modules.dep` wherever the value pointed, another user's
    directory included: a named pipe there hung every command, and `udev install` wrote rules that test that
    user's files. Such a value is a usage error naming the variable."""
    release = setting(env, "TUNECTL_KERNEL_RELEASE")
    if release is None:
        return os.uname().release
    if "/" in release or release in (".", ".."):
        raise UsageError(f"TUNECTL_KERNEL_RELEASE: {release!r} is not a kernel release: a release names one "
                         "directory of the module tree, never a path",
                         hint="give a release as `uname -r` prints it (6.1.0-13-amd64), and TUNECTL_MODULES_ROOT "
                              "for a module tree elsewhere", where="TUNECTL_KERNEL_RELEASE")
    return release


class KernelModules:
    """The module tree of one kernel release under an injected root; read once, on first use."""

    def __init__(self, root: str | os.PathLike | None, release: str) -> None:
        self.root = Path(root) if root is not None else None
        self.release = release
        self._loadable: dict[frozenset[str] | None, dict[str, str]] = {}  # by the modules asked for (None: all)

    @classmethod
    def none(cls) -> KernelModules:
        """No module tree (containers, fake trees): only what ``queue/scheduler`` lists is offered."""
        return cls(None, "")

    @property
    def release_dir(self) -> Path | None:
        return self.root / self.release if self.root is not None and self.release else None

    def _read(self, name: str) -> str | None:
        directory = self.release_dir
        if directory is None:
            return None
        try:
            return (directory / name).read_text(errors="replace")
        except OSError:
            return None  # no tree for this release (a container, a removed kernel): nothing is loadable

    def loadable(self, wanted: Collection[str] | None = None) -> dict[str, str]:
        """Module name (``-`` spelt ``_``) -> module file, for every module the kernel can load (`wanted`: of
        those modules only, far cheaper: the schedulers' three); {} without a tree."""
        key = None if wanted is None else frozenset(wanted)
        if key not in self._loadable:
            directory = self.release_dir
            self._loadable[key] = {} if directory is None else loadable_modules(
                self._read("modules.dep"), self._read("modules.builtin"), str(directory), key)
        return dict(self._loadable[key])
