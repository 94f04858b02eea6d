"""Shared fixtures: fake sysfs trees that behave like the kernel (see tests/fakesys.py)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, all_topologies
from tests.versions import describe

# SIGINT as this pytest was started with it, before any test ran. A background job of a non-interactive shell
# (`pytest ... &` in a script, some CI runners) starts with it ignored, and so does every program a test starts:
# the tests marked sigint, which send Ctrl-C or need its default disposition, then fail in ways that do not say
# why. They error instead, with this message; nothing is reset (the tests see what a user's shell gives) and
# nothing is skipped (a CI run must not lose them unnoticed).
SIGINT_IGNORED = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
# (`setsid` and a `bash -m` without a terminal inherit the ignored disposition too; `env --default-signal=INT`
# gives the default back to the program it starts.)
SIGINT_IGNORED_MESSAGE = ("this pytest was started with SIGINT ignored (a background job of a non-interactive "
                          "shell); start it in the foreground, or through `env --default-signal=INT`")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return describe() + ([f"SIGINT: ignored from the start; the tests marked sigint error ({SIGINT_IGNORED_MESSAGE})"]
                         if SIGINT_IGNORED else [])


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked sigint errors when this pytest was started with SIGINT ignored (`SIGINT_IGNORED_MESSAGE`).
    After the skips: a root test skipped as not root is skipped still."""
    if SIGINT_IGNORED and item.get_closest_marker("sigint") is not None:
        pytest.fail(SIGINT_IGNORED_MESSAGE, pytrace=False)


# The real systemd-udevd and scoped rules files of the root udev tests (fixtures `udevd`, `rules`);
# two fake disks and a state directory for the journal tests (fixture `pair`).
pytest_plugins = ("tests.udevd", "tests.journal_helpers")


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables whole and uncoloured whatever the shell running pytest exports; a test sets COLUMNS itself."""
    for name in ("COLUMNS", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """Scratch space for fake trees: tmpfs (/dev/shm) when writable, else tmp_path.

    A tree is a thousand tiny files; on a journalled disk building one costs ~10x more.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield request.getfixturevalue("tmp_path")
        return
    scratch = Path(tempfile.mkdtemp(prefix="tunectl-fake-", dir=shm))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def empty_fake_tree(fake_root: Path) -> FakeTree:
    """A FakeTree with no devices: ``<scratch>/sys`` and its udev database ``<scratch>/udev``."""
    return FakeTree.create(fake_root)


@pytest.fixture
def fake_tree(empty_fake_tree: FakeTree) -> FakeTree:
    """Every topology of tests/fakesys.py in one tree; ``.topologies`` maps topology -> names.

    sda (SATA HDD), sdb (SATA SSD) + dm-0 (LUKS2 on sdb2), nvme0n1, vda (virtio),
    mmcblk0 + dm-1 (verity on mmcblk0p2/p3), sdc + sdd -> md0 -> dm-2 (LVM), zram0, loop0.
    """
    all_topologies(empty_fake_tree)
    return empty_fake_tree


@pytest.fixture
def no_proc(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No /proc: every open of /proc/self/fd or /proc/self/fd/N fails ENOENT, as with no procfs at /proc; the
    list: the descriptors' entries tried."""
    tried: list[str] = []
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if isinstance(path, str) and (path == "/proc/self/fd" or path.startswith("/proc/self/fd/")):
            if path != "/proc/self/fd":
                tried.append(path)
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    return tried


# Paths a test names because they do not exist, and this machine's own tunectl paths: no test may create one
# (a unit test once wrote root-owned state into /nonexistent). Checked at the session's end against its start.
GUARD_ROOT = Path(os.environ.get("TUNECTL_TEST_GUARD_ROOT", "/"))  # another root only for the guard's own test
_MACHINE_PATHS = ("var/lib/tunectl", "etc/tunectl", "run/tunectl")
_NOT_THERE = ("nonexistent", "no-such", "nosuch")


def stray_paths(root: Path) -> set[str]:
    """The guarded paths under `root` that exist: its entries named like a path that does not exist, and
    tunectl's own paths on this machine (a few stats and one listing)."""
    try:
        named = {str(root / n) for n in os.listdir(root) if n.lower().startswith(_NOT_THERE)}
    except OSError:
        named = set()
    return named | {str(root / p) for p in _MACHINE_PATHS if os.path.lexists(root / p)}


def machine_state(root: Path) -> tuple[tuple[str, int, int, int], ...]:
    """What each of this machine's own tunectl paths under `root` holds: (path, inode, size, mtime) of every entry,
    links not followed; empty when none exists (one lstat each, a walk only of one that exists)."""
    seen = []
    for rel in _MACHINE_PATHS:
        top = root / rel
        try:
            st = os.lstat(top)
        except OSError:
            continue
        seen.append((str(top), st.st_ino, st.st_size, st.st_mtime_ns))
        for parent, dirs, files in os.walk(top):
            for name in sorted(dirs + files):
                try:
                    st = os.lstat(os.path.join(parent, name))
                except OSError:
                    continue
                seen.append((os.path.join(parent, name), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(seen))


def machine_paths_changed(before: tuple[tuple[str, int, int, int], ...],
                          after: tuple[tuple[str, int, int, int], ...]) -> list[str]:
    """The paths made, removed or written between two `machine_state` snapshots, sorted."""
    was, now = {e[0]: e[1:] for e in before}, {e[0]: e[1:] for e in after}
    return sorted(p for p in was.keys() | now.keys() if was.get(p) != now.get(p))


@pytest.fixture(autouse=True)
def _machine_state_untouched() -> Iterator[None]:
    """Each test fails that creates or writes /var/lib/tunectl, /etc/tunectl or /run/tunectl on this machine (a
    test's tunectl must be given a state directory of its own: --state-dir or TUNECTL_STATE_DIR under tmp_path).
    The session check below still names strays of other kinds; this one names the test."""
    before = machine_state(GUARD_ROOT)
    yield
    changed = machine_paths_changed(before, machine_state(GUARD_ROOT))
    if changed:
        pytest.fail("this test created or wrote this machine's own tunectl state (give its tunectl a state "
                    "directory under tmp_path: --state-dir or TUNECTL_STATE_DIR): " + ", ".join(changed),
                    pytrace=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STRAY_BEFORE] = stray_paths(GUARD_ROOT)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_STRAY_BEFORE, None)
    if before is None:
        return
    made = sorted(stray_paths(GUARD_ROOT) - before)
    if made:
        session.config.get_terminal_writer().line(
            "tests created paths outside their temporary directories (remove them, and find the test that made "
            "them: use tmp_path): " + ", ".join(made), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STRAY_BEFORE = pytest.StashKey[set]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=os.environ.get("TUNECTL_SLOW") == "1",
                     help="also run the tests marked slow or ansible (fuzzers, property sweeps, playbook runs); "
                          "scripts/test always does (TUNECTL_SLOW=1 sets the same)")
    parser.addoption("--tier", choices=("all", "host", "vm"), default="all",
                     help="host: every test but the VM tier's (tests/vm); vm: only those. The others are not "
                          "collected. scripts/test runs the two apart, to run Debian's pass beside the VM tier")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """--tier: the other tier's directories and files are not collected (nor imported: a collection of the whole
    suite takes ~20-35 s on two cores). Paths given on the command line are collected all the same (pytest does
    not ask this hook about them): `pytest_collection_modifyitems` leaves out their tests."""
    tier = config.getoption("--tier")
    if tier != "all" and _tier_of(collection_path) not in ("", tier):
        return True
    return None


def _tier_of(path: Path) -> str:
    """The --tier `path` belongs to: vm (tests/vm), host (the rest of tests/), '' (tests/ itself, or outside)."""
    top = _directory_in_tests(path)
    return "" if not top else "vm" if top == "vm" else "host"


def _directory_in_tests(path: Path) -> str:
    """The first name of `path` under tests/ (unit, root, package, vm, or a file of tests/ itself), '' for tests/
    itself or a path outside it."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return ""
    return parts[0] if parts else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The root marker decides: a root test is skipped unless this runs as root, and `-m "not root"` leaves it out.

    Where a test lives agrees with its marker: none under tests/unit carries it, every one under tests/root does.
    Without --slow the quick loop leaves out the tests marked slow or ansible (reported as deselected), and so
    does --tier the other tier's tests named on the command line.
    """
    misplaced = [f"{item.nodeid}: {why}" for item in items for why in [_misplaced(item)] if why]
    if misplaced:
        raise pytest.UsageError("tests in the wrong tier (see tests/README.md):\n  " + "\n  ".join(misplaced))
    tier = config.getoption("--tier")
    if tier != "all":
        chosen = [item for item in items if _tier_of(item.path) == tier]
        if len(chosen) != len(items):
            kept = set(map(id, chosen))
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
            items[:] = chosen
    if not config.getoption("--slow"):
        quick = [item for item in items if "slow" not in item.keywords and "ansible" not in item.keywords]
        if len(quick) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in quick])
            items[:] = quick
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: real loop devices, udevd or parted (run as root, under the lock)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


TESTS = Path(__file__).resolve().parent


def _misplaced(item: pytest.Item) -> str:
    """Why `item` is in the wrong tier, or '' when it is where its root marker says."""
    tier = _directory_in_tests(item.path)
    root = item.get_closest_marker("root") is not None
    if tier == "unit" and root:
        return "carries the root marker under tests/unit; move it to tests/root/<package>/"
    if tier == "root" and not root:
        return "lacks the root marker under tests/root (pytestmark = pytest.mark.root)"
    return ""
