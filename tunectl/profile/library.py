"""The profile library: the search path, finding and listing profiles, and checking a file (with a cache)."""

from __future__ import annotations

import contextlib
import os
import sys
from functools import lru_cache
from pathlib import Path

from tunectl.digests import sha256
from tunectl.profile.plain_yaml import read_plain
from tunectl.profile.reader import MAX_PROFILE_BYTES, Diagnostic, Document, decode_profile
from tunectl.profile.yaml_events import parse_yaml
from tunectl.system import trust
from tunectl.system.cache import ValidationCache
from tunectl.system.roots import setting

DEFAULT_PROFILE = "default"
TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    # Only here: `X | Y` outside an annotation is evaluated at import, a TypeError before Python 3.10.
    ProfileRef = str | Path  # a name on the search path, or a file (a Path is always a file)


def shipped_profile_dir() -> Path:
    """Profiles shipped with the package (installed as tunectl/profiles, or ./profiles in a checkout)."""
    package = Path(__file__).parent.parent
    installed = package / "profiles"
    if installed.is_dir():
        return installed
    return package.parent / "profiles"


def default_search_path(env: dict | None = None) -> list[Path]:
    extra = [Path(p) for p in (setting(os.environ if env is None else env, "TUNECTL_PROFILE_PATH") or "").split(":")
             if p]
    return extra + [Path("/etc/tunectl/profiles"), shipped_profile_dir()]


def looks_like_path(ref: ProfileRef) -> bool:
    return isinstance(ref, Path) or "/" in ref or ref.endswith((".yaml", ".yml"))


def find_profile(ref: ProfileRef, search_path: list[Path], relative_to: Path | None = None,
                 skip: Path | None = None) -> Path | None:
    """The file for `ref`: a path (relative to `relative_to`), or a name on the search path.

    `skip` is the file doing the asking: ``extends: balanced`` inside
    /etc/tunectl/profiles/balanced.yaml means the next balanced on the path.
    """
    if looks_like_path(ref):
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        return p if _is_file(p) else None
    skip_key = file_key(skip) if skip is not None else None
    for d in search_path:
        for ext in (".yaml", ".yml"):
            candidate = d / f"{ref}{ext}"
            if _is_file(candidate) and (skip_key is None or file_key(candidate) != skip_key):
                return candidate
    return None


def _is_file(path: Path) -> bool:
    """Path.is_file(), also False for a name the OS refuses outright (ENAMETOOLONG, EACCES on a parent)."""
    try:
        return path.is_file()
    except OSError:
        return False


def file_key(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return str(path.absolute())


def list_profiles(search_path: list[Path]) -> list[tuple[str, Path]]:
    """(name, file) for every profile on the search path; earlier directories shadow later ones."""
    seen: dict[str, Path] = {}
    for d in search_path:
        if d.is_dir():
            for f in sorted(d.glob("*.y*ml")):
                seen.setdefault(f.stem, f)
    return sorted(seen.items())


def read_profile_bytes(path: Path, trusted: bool = False, resolved: str | None = None) -> tuple[bytes | None,
                                                                                            list[Diagnostic]]:
    """The file's bytes (at most MAX_PROFILE_BYTES + 1 are read), or a diagnostic.

    A link root or the user owns is resolved first (an administrator's choice; another user's is refused), then the file is opened
    without following links and without blocking: a named pipe or a device is
    refused, not read. `trusted`: it and its directories must be root's alone.
    `resolved`: the path the caller resolved and judged (an ``extends:`` that must stay
    on the search path); the file there is read through no link, so what was judged is
    what is read.
    """
    try:
        where = resolved or trust.resolve_own_links(path)  # root's or the user's links only, never another user's
        # decides: as root, a profile another user can change would choose what root writes to sysfs (SPEC 4a)
        return trust.read_regular(where, MAX_PROFILE_BYTES, trusted, resolved=True, decides=True), []
    except trust.Untrusted as e:
        return None, [Diagnostic(str(path), 1, 1, "$", f"cannot be used: {e.message}; {e.hint}")]
    except OSError as e:
        return None, [Diagnostic(str(path), 1, 1, "$", f"cannot read: {e.strerror or e}")]


def _passed_before(raw: bytes, file: str, verdict: dict) -> Document | None:
    """A text the checker passed before, parsed again but not checked again; None to check it after all.

    The settings come from the text, never from the cache entry (which holds
    the warnings only). A text in the plain subset most profiles use is read
    without PyYAML, whose import costs ~25 ms of CPU (`plain_yaml`: the same
    Document, or None); any other is parsed by PyYAML. The check that is
    skipped costs jsonschema's and more.
    """
    text, _ = decode_profile(raw, file)
    if text is None:
        return None
    doc = read_plain(text, file)
    if doc is None:
        doc, diags = parse_yaml(text, file)
        if doc.data is None or any(d.severity == "error" for d in diags):
            return None
    if not_a_profile(doc) is not None:
        return None
    try:
        doc.warnings = Document.warnings_of(file, verdict)
    except (ValueError, KeyError, TypeError):
        return None
    return doc


# The files the verdict on a text depends on besides the text, beside this package: the checker, the catalogue,
# the schema, and the readers (a cache hit's data comes from plain_yaml or yaml_events, whose reading it trusts).
CHECKER_SOURCES = ("profile/reader.py", "profile/yaml_events.py", "profile/plain_yaml.py", "profile/checks.py",
                   "profile/schema.py", "attributes.py", "units.py", "schema/profile.schema.json")


@lru_cache(maxsize=1)
def checker_sources_digest() -> str:
    """SHA-256 of CHECKER_SOURCES' bytes, read by path (nothing imported): what a shipped verdict was found by."""
    package = Path(__file__).parent.parent
    digest = sha256()
    for source in CHECKER_SOURCES:
        with contextlib.suppress(OSError):
            digest.update((package / source).read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _checker_digest() -> bytes:
    """What the verdict on a text depends on besides the text: this checker's files, tunectl's version, and
    jsonschema's and referencing's versions (an upgrade can change a verdict: a keyword, a meta-schema, a $ref)."""
    from tunectl import __version__

    return sha256(f"{__version__}\0{_validator_versions()}\0{checker_sources_digest()}".encode()).digest()


def _validator_versions() -> str:
    """The installed jsonschema's and referencing's versions (jsonschema resolves ``$ref`` through referencing)."""
    return f"{_installed_version('jsonschema')} {_installed_version('referencing')}"


def _installed_version(package: str) -> str:
    """An installed package's version, read without importing it (a cache hit must not pay for that).

    The metadata directories beside the package import would find (``jsonschema-4.26.0.dist-info``,
    ``jsonschema_specifications-....dist-info``; a Debian ``.egg-info``) name the versions: one stat per
    sys.path entry and one listing, ~0.1 ms. A layout without them falls back to importlib.metadata (~60 ms).
    """
    for entry in sys.path:
        where = entry or "."
        if os.path.isfile(os.path.join(where, package, "__init__.py")):
            with contextlib.suppress(OSError):
                names = sorted(n for n in os.listdir(where) if n.lower().startswith((f"{package}-", f"{package}_"))
                               and n.endswith((".dist-info", ".egg-info")))
                if names:
                    return " ".join(names)
            break
    else:
        # Not a directory on sys.path: ask the finders import would ask. Absent (Debian 12's jsonschema 4.10 does
        # not use referencing) is a version of its own, found without importing importlib.metadata.
        if not any(_finds(finder, package) for finder in sys.meta_path):
            return "none"
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def _finds(finder: object, package: str) -> bool:
    find_spec = getattr(finder, "find_spec", None)
    try:
        return find_spec is not None and find_spec(package, None) is not None
    except (ImportError, ValueError):
        return False


def _sha256(*parts: bytes) -> str:
    return sha256(*parts).hexdigest()


PROFILE_KEYS = frozenset({"name", "description", "extends", "classes", "devices", "mounts", "alignment"})


def not_a_profile(doc: Document) -> Diagnostic | None:
    """One line for a file that is no profile at all, which says nothing of what it holds (it may be a secret)."""
    if doc.data is None:
        return None  # empty, or a YAML syntax error: the reader's diagnostics quote nothing
    if not isinstance(doc.data, dict):
        return Diagnostic(doc.file, 1, 1, "$", "not a profile: not a YAML mapping")
    if doc.data and not PROFILE_KEYS.intersection(k for k in doc.data if isinstance(k, str)):
        return Diagnostic(doc.file, 1, 1, "$", f"not a profile: none of its keys is a profile key "
                                               f"({', '.join(sorted(PROFILE_KEYS))})")
    return None


def check_file(path: Path, cache: ValidationCache | None = None,
               trusted: bool = False, resolved: str | None = None) -> tuple[Document, list[Diagnostic]]:
    """Parse and check one file: the Document and every diagnostic (errors and warnings).

    A file that passed the checks before (same bytes, same checker) is not
    checked again: importing jsonschema costs more than the rest of a `verify`
    run. Only successes are cached, in `cache` (see tunectl.system.cache: an
    entry is used only when it is trusted and names this text and checker).
    With a cache, a shipped profile's text as shipped is not checked either:
    its verdict was found when tunectl was built (`tunectl.profile.shipped`).
    Without one (`profile validate`), every file is checked.
    """
    file = str(path)
    raw, diags = read_profile_bytes(path, trusted, resolved)
    if raw is None:
        return Document(file, None), diags
    text_sha256 = _sha256(raw)
    if cache is not None:
        from tunectl.profile import shipped

        # A shipped profile as it was shipped, and the checker that passed it: its verdict is known (found when
        # tunectl was built, and tested); a checker changed since (a patched checks.py) checks it again.
        cached = shipped.VERDICTS.get(text_sha256)
        if cached is not None and checker_sources_digest() != shipped.CHECKER:
            cached = None
        if cached is None and cache.dir is not None:
            cached = cache.get(_sha256(_checker_digest(), raw), text_sha256, _checker_digest().hex())
        doc = _passed_before(raw, file, cached) if cached is not None else None
        if doc is not None:
            doc.sha256 = text_sha256
            return doc, list(doc.warnings)
    # Only a file not seen before is checked: the checker loads only then (jsonschema only for a text it cannot pass).
    from tunectl.profile.checks import check_document, limit_diagnostics

    text, diags = decode_profile(raw, file)
    if text is None:
        return Document(file, None), diags
    # A text in the plain subset is read without PyYAML, as on a cache hit: read_plain gives the Document
    # parse_yaml would, and parse_yaml has no diagnostic for any text read_plain reads (None: PyYAML reads it).
    plain = read_plain(text, file)
    doc, diags = (plain, []) if plain is not None else parse_yaml(text, file)
    stranger = not_a_profile(doc)
    if stranger is not None:
        return Document(file, None), [stranger]
    if doc.data is not None:
        # Problems the builder found (duplicate keys, bad aliases, ...) and the schema's, without saying twice
        # that a value the builder already rejected has the wrong type.
        seen = {d.path for d in diags}
        diags = limit_diagnostics(diags + [d for d in check_document(doc) if d.path not in seen])
    doc.warnings = [d for d in diags if d.severity == "warning"]
    doc.sha256 = text_sha256
    if cache is not None and cache.dir is not None and not any(d.severity == "error" for d in diags):
        cache.put(_sha256(_checker_digest(), raw), text_sha256, _checker_digest().hex(), doc.verdict())
    return doc, diags
