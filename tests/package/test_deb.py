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

from tests.completion_helpers import bash_probe, check_bash, check_zsh, zsh_probe
from tests.package.builds import Deb, data_pass, debian_env, run

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
            "/usr/share/doc/tunectl/copyright", "/etc/tunectl/profiles/",
            "/usr/lib/python3/dist-packages/tunectl/preload/_datapass.abi3.so"} | {f"/lib/systemd/system/{u}" for u in UNITS}
    assert want <= paths, sorted(want - paths)
    assert {"/usr/share/doc/tunectl/README.md", "/usr/share/doc/tunectl/README.md.gz"} & paths, sorted(paths)
    assert not [p for p in paths if p.startswith(("/usr/bin/", "/usr/lib/systemd/", "/etc/systemd/"))]
    # fio drags in ceph and gluster libraries: bench names it, the package only suggests it
    fields = {f: run(["dpkg-deb", "-f", str(deb.deb), f], env=debian_env(package_tmp)).stdout for f in
              ("Depends", "Recommends", "Suggests", "Architecture")}
    assert "fio" in fields["Suggests"] and "fio" not in fields["Recommends"] + fields["Depends"], fields
    # the one compiled file makes the package the build machine's architecture, and its libc a dependency
    assert fields["Architecture"].strip() == run(["dpkg", "--print-architecture"]).stdout.strip(), fields
    assert re.search(r"\blibc6 \(>= [\d.]+\)", fields["Depends"]), fields


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
    # Debian's python3 loads the compiled data pass the package ships
    assert data_pass(lambda script: in_root(root, script), root / "tmp/replay", "/tmp/replay") == "compiled"
    page = in_root(root, "man -P cat tunectl 2>&1; man -P cat 5 tunectl-profile | head -3").stdout
    assert "tunectl - " in page and "TUNECTL-PROFILE" in page, page
    # completion, as bash-completion and zsh load the installed scripts: every command, action and option
    (root / "tmp/probe.bash").write_text(bash_probe("/usr/share/bash-completion/completions/tunectl"))
    bash = in_root(root, "bash /tmp/probe.bash")
    assert check_bash(bash.stdout) == [], check_bash(bash.stdout)
    (root / "tmp/probe.zsh").write_text(zsh_probe("/usr/share/zsh/vendor-completions/_tunectl"))
    zsh = in_root(root, "zsh -f /tmp/probe.zsh")
    assert check_zsh(zsh.stdout) == [], zsh.stdout + zsh.stderr
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


@pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap not installed (scripts/bootstrap --test)")
def test_removal_takes_the_rules_away_and_purge_keeps_the_originals_while_applied(deb: Deb, bookworm: Path):
    """apply + udev install, then dpkg -r: no rules left to tune without the tool; dpkg -P: the journal stays
    while something is applied; after a rollback purge deletes it."""
    from tests.fakesys import FakeTree, sata_hdd

    root = bookworm
    before = snapshot(root)
    shutil.copy(deb.deb, root / "tmp" / deb.deb.name)
    in_root(root, f"dpkg -i /tmp/{deb.deb.name}")
    tree = FakeTree.create(root / "tmp" / "fake")  # a disk to tune: the chroot's /sys is the host's, read-only
    sata_hdd(tree, "sda")
    (root / "etc/tunectl/profiles/p1.yaml").write_text(
        "name: p1\nclasses:\n  rotational: {read_ahead_kb: 1024}\n")
    # The tree stands for the chroot's machine: its journal is the package's /var/lib/tunectl.
    fake = "--sysfs-root /tmp/fake/sys --udev-root /tmp/fake/udev"
    in_root(root, f"export TUNECTL_TREE_IS_THIS_MACHINE=1; tunectl apply {fake} -p p1 sda && tunectl udev install {fake}")
    rules = root / "etc/udev/rules.d/65-tunectl.rules"
    assert rules.read_text().startswith("# 65-tunectl.rules")

    removed = in_root(root, "dpkg -r tunectl")
    assert not rules.exists(), "removal left the rules to tune every event without the tool"
    assert "removed: /etc/udev/rules.d/65-tunectl.rules" in removed.stderr, removed.stdout + removed.stderr
    journal = root / "var/lib/tunectl/journal.json"
    assert journal.exists()
    purged = in_root(root, "dpkg -P tunectl")
    assert journal.exists() and "purge kept /var/lib/tunectl" in purged.stderr, purged.stdout + purged.stderr
    assert "tunectl rollback" in purged.stderr
    # what stays: the journal, and the user's own profile in /etc/tunectl
    assert {p for p in snapshot(root) - before if not p.startswith(("/var/lib/tunectl", "/tmp/", "/etc/tunectl"))} \
        == set()

    # reinstalled, rolled back: nothing is applied, and purge deletes the journal
    in_root(root, f"dpkg -i /tmp/{deb.deb.name} && TUNECTL_TREE_IS_THIS_MACHINE=1 tunectl rollback {fake}")
    assert (root / "tmp/fake/sys/block/sda/queue/read_ahead_kb").read_text().strip() != "1024"
    (root / "etc/tunectl/profiles/p1.yaml").unlink()
    in_root(root, "dpkg -P tunectl")
    assert not (root / "var/lib/tunectl").exists()
    assert {p for p in snapshot(root) - before if not p.startswith("/tmp/")} == set()
