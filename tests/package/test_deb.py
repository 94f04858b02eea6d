"""The Debian package: lintian-clean, laid out as Debian expects, and installed, used and removed in a clean bookworm."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.package.builds import Deb, debian_env, run

pytestmark = pytest.mark.package

UNITS = ("tunectl-preload-collect.service", "tunectl-preload-collect.timer", "tunectl-preload-replay.service")


def test_lintian_reports_no_error_and_no_warning(deb: Deb, package_tmp: Path):
    done = run(["lintian", "--pedantic", "--fail-on", "none", str(deb.changes)], env=debian_env(package_tmp))
    tags = [line for line in done.stdout.splitlines() if line[:2] in ("E:", "W:")]
    assert tags == [], done.stdout


def test_deb_puts_each_file_where_debian_looks(deb: Deb, package_tmp: Path):
    listing = run(["dpkg-deb", "--contents", str(deb.deb)], env=debian_env(package_tmp)).stdout
    paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    want = {"/usr/sbin/tunectl", "/usr/lib/python3/dist-packages/tunectl/cli.py",
            "/usr/lib/python3/dist-packages/tunectl/profiles/default.yaml",
            "/usr/lib/python3/dist-packages/tunectl/schema/profile.schema.json",
            "/usr/share/man/man8/tunectl.8.gz", "/usr/share/man/man5/tunectl-profile.5.gz",
            "/usr/share/bash-completion/completions/tunectl", "/usr/share/zsh/vendor-completions/_tunectl",
            "/usr/share/doc/tunectl/copyright"} | {f"/lib/systemd/system/{u}" for u in UNITS}
    assert want <= paths, sorted(want - paths)
    assert not [p for p in paths if p.startswith(("/usr/bin/", "/usr/lib/systemd/", "/etc/systemd/"))]


def in_root(root: Path, script: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    """`sh -c script` chrooted in `root`, in a private mount namespace with the real /sys read-only and /proc."""
    inner = (f"mount --rbind /sys {root}/sys && mount --make-rslave {root}/sys && "
             f"mount -o remount,bind,ro {root}/sys && mount -t proc proc {root}/proc && "
             f"exec chroot {root} /bin/sh -c {shlex.quote(script)}")
    return run(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", inner],
               env=debian_env(root, TERM="dumb"), ok=ok)


def snapshot(root: Path) -> set[str]:
    """Every path in the root but the bookkeeping of dpkg, apt, man-db and logs."""
    skip = ("/var/lib/dpkg/", "/var/cache/", "/var/log/", "/proc/", "/sys/", "/tmp/", "/dev/")
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            rel = "/" + os.path.relpath(os.path.join(dirpath, name), root)
            if not rel.startswith(skip):
                found.add(rel)
    return found


@pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap not installed (scripts/bootstrap --test)")
def test_deb_installs_works_and_removes_cleanly_in_a_clean_bookworm(deb: Deb, bookworm: Path):
    root = bookworm
    before = snapshot(root)
    shutil.copy(deb.deb, root / "tmp" / deb.deb.name)
    in_root(root, f"dpkg -i /tmp/{deb.deb.name}")

    state = os.stat(root / "var/lib/tunectl")
    assert stat.S_ISDIR(state.st_mode) and stat.S_IMODE(state.st_mode) == 0o700 and state.st_uid == 0
    # Installed, not enabled: no unit of ours is wanted by anything.
    assert not [p for p in snapshot(root) - before if p.startswith("/etc/systemd/")], sorted(snapshot(root) - before)
    assert in_root(root, "deb-systemd-helper was-enabled tunectl-preload-replay.service", ok=(1,)).returncode == 1

    version = in_root(root, "tunectl --version").stdout
    assert version.startswith("tunectl ") and version.split()[1][0].isdigit(), version
    status = in_root(root, "command -v tunectl && tunectl status --json", ok=(0, 1))
    path, document = status.stdout.split("\n", 1)
    assert path == "/usr/sbin/tunectl"
    assert '"devices": [' in document and "Traceback" not in status.stderr + status.stdout, status.stderr
    table = in_root(root, "tunectl status", ok=(0, 1))
    # stderr holds at most notes (nothing applied yet: which profile is compared), never a warning or an error
    noise = [line for line in table.stderr.splitlines() if not line.startswith("tunectl: note: ")]
    assert re.search(r"^DEVICE +CLASS +SCHEDULER", table.stdout, re.M) and not noise, table.stdout + table.stderr
    page = in_root(root, "man -P cat tunectl 2>&1; man -P cat 5 tunectl-profile | head -3").stdout
    assert "tunectl - " in page and "TUNECTL-PROFILE" in page, page
    # bash completion, as bash-completion loads it: the script completes commands and their options.
    completion = in_root(root, "bash -c '. /usr/share/bash-completion/bash_completion; "
                               ". /usr/share/bash-completion/completions/tunectl; "
                               "COMP_WORDS=(tunectl st); COMP_CWORD=1; _shtab_tunectl tunectl st tunectl; "
                               "printf \"%s\\n\" \"${COMPREPLY[@]}\"'").stdout.split()
    assert "status" in completion, completion
    options = in_root(root, "bash -c '. /usr/share/bash-completion/bash_completion; "
                            ". /usr/share/bash-completion/completions/tunectl; "
                            "COMP_WORDS=(tunectl apply --); COMP_CWORD=2; _shtab_tunectl tunectl -- apply; "
                            "printf \"%s\\n\" \"${COMPREPLY[@]}\"'").stdout.split()
    assert {"--check", "--diff", "--profile"} <= set(options), options
    assert (root / "usr/share/zsh/vendor-completions/_tunectl").read_text().startswith("#compdef tunectl")

    in_root(root, "dpkg -r tunectl")
    left = snapshot(root) - before
    # Removal keeps the journal (rollback still needs it) and deb-systemd-helper's record of the units
    # (dpkg removes both on purge); nothing else of ours stays.
    ours = {p for p in left if not p.startswith("/var/lib/systemd/deb-systemd-helper-")}
    assert {p for p in ours if not p.startswith("/var/lib/tunectl")} == set(), sorted(ours)
    assert "/var/lib/tunectl" in ours
    in_root(root, "dpkg -P tunectl")
    assert snapshot(root) - before == set(), sorted(snapshot(root) - before)
