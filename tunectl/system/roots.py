"""Where the machine is: the one module that names the real kernel, device and configuration paths.

`Roots.choose` decides once whether tunectl looks at the real machine (the sysfs
root is the real ``/sys``) or at a tree that describes another one. Every other
root follows from that answer: a fake sysfs tree never gets the real ``/dev``,
``/proc``, udev database or module tree, so a device node of this machine can
never be opened on behalf of a tree that describes another.
"""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Mapping

from tunectl.errors import UsageError
from tunectl.system import trust

SYS = "/sys"
DEV = "/dev"
PROC = "/proc"
FSTAB = "/etc/fstab"
UDEV_DATA = "/run/udev/data"
MODULES = "/lib/modules"
STATE = "/var/lib/tunectl"


def setting(env: Mapping[str, str], name: str) -> str | None:
    """The value of the environment variable `name` (every TUNECTL_* variable is read here), None when it is unset
    or empty: empty is unset, the convention for environment variables (XDG's base directories: "not set or
    empty"), so `TUNECTL_STATE_DIR= tunectl apply` uses /var/lib/tunectl. An option given '' is a usage error
    instead (`--state-dir ''`): an option is written on purpose, a variable is often exported empty. Blank (spaces
    or tabs only) is neither a value nor unset: a usage error, as `--state-dir ' '` is (else it named a directory
    ' ' in the working directory)."""
    value = env.get(name)
    if value and not value.strip():
        raise UsageError(f"{name}: the value is blank ({value!r}); set it to a value, or unset it (empty is unset "
                         "too)", hint=f"`unset {name}`, or give it a value (tunectl(8), ENVIRONMENT, lists the variables)",
                         where=name)
    return value or None


def under_dev(ref: str) -> str | None:
    """``/dev/sda`` -> ``sda``: the name of a device path below the conventional dev root; None for other names."""
    return ref[len(DEV) + 1:] if ref.startswith(DEV + "/") else None


def resolved_path(path: str | os.PathLike[str]) -> str:
    """`path` with its links followed as root may follow them (`trust.walk`): root's or the user's own links,
    through directories no other user can change (as `trust.check_root` judges them, sticky /tmp allowed). A path
    through anything else (another user's link or directory, a link removed while it is read by another user's
    loop on /tmp) is left as it is, absolute but not normalized: such a path is then no real root (a name that
    user can point at a tree of theirs later), and the trust checks that follow refuse it."""
    try:
        return trust.walk(os.fspath(path), missing_ok=True, judge=lambda st: trust.problem(st, final=False)).path
    except (OSError, trust.Untrusted):
        return os.path.join(os.getcwd(), path)


def is_real_sysfs(root: str | os.PathLike[str]) -> bool:
    """The sysfs root is the running kernel's ``/sys``: the one test of "is this the real machine?"."""
    return root == SYS or resolved_path(root) == SYS


def self_proc(*parts: str) -> str:
    """A path under this process's own ``/proc`` (fd links, process stat): never a fake root's."""
    return os.path.join(PROC, *parts)


class Roots(namedtuple("Roots", "real sys udev_data dev proc fstab modules state config", defaults=(None,))):
    """Immutable (a named tuple: dataclasses would cost every command's start-up several ms).

    real: bool, the sysfs root is the running kernel's /sys; sys, udev_data, fstab, modules, state: str;
    dev: None when no device node may be opened (a fake tree without TUNECTL_DEV_ROOT);
    proc: None when there are no live mounts (a fake tree without TUNECTL_PROC_ROOT);
    config: where /etc, /run and /usr/lib are (other writers' files, tunectl.owners); None: not read.
    """

    __slots__ = ()

    @classmethod
    def choose(cls, env: Mapping[str, str], sysfs_root: str | None = None, udev_root: str | None = None,
               state_dir: str | None = None) -> Roots:
        """Options win over TUNECTL_* variables, which win over the real machine's paths."""
        sys_root = sysfs_root or setting(env, "TUNECTL_SYSFS_ROOT") or SYS
        real = is_real_sysfs(sys_root)

        def pick(var: str, real_path: str, fake: str | None) -> str | None:
            return setting(env, var) or (real_path if real else fake)

        return cls(
            real=real,
            sys=sys_root,
            udev_data=udev_root or pick("TUNECTL_UDEV_ROOT", UDEV_DATA, os.path.join(sys_root, ".udev-data")),
            dev=pick("TUNECTL_DEV_ROOT", DEV, None),
            proc=pick("TUNECTL_PROC_ROOT", PROC, None),
            fstab=setting(env, "TUNECTL_FSTAB") or FSTAB,
            modules=pick("TUNECTL_MODULES_ROOT", MODULES, os.path.join(sys_root, ".modules")) or MODULES,
            state=state_dir or setting(env, "TUNECTL_STATE_DIR") or STATE,
            config=pick("TUNECTL_CONFIG_ROOT", "/", None),
        )

    def fakes(self) -> list[tuple[str, str]]:
        """(option or variable, path) of every root that is not the real machine's: a tree that describes another."""
        found = []
        for label, path, real_path in (("--sysfs-root / TUNECTL_SYSFS_ROOT", self.sys, SYS),
                                       ("--udev-root / TUNECTL_UDEV_ROOT", self.udev_data, UDEV_DATA),
                                       ("TUNECTL_DEV_ROOT", self.dev, DEV), ("TUNECTL_PROC_ROOT", self.proc, PROC),
                                       ("TUNECTL_MODULES_ROOT", self.modules, MODULES)):
            # both resolved: /lib/modules is /usr/lib/modules on a merged-/usr system
            if path is not None and path != real_path and resolved_path(path) != resolved_path(real_path):
                found.append((label, path))
        return found

    def uses_real_state(self) -> bool:
        """The state directory is the real machine's (its journal holds this machine's originals)."""
        return self.state == STATE or resolved_path(self.state) == resolved_path(STATE)

    def node(self, name: str) -> str | None:
        """The device node of kernel name `name`, or None when this run may not open device nodes."""
        return None if self.dev is None else os.path.join(self.dev, name)


def check_trusted(roots: Roots) -> None:
    """Every fake root and the configuration root, with the directories above, root's alone (or the user's own).

    A tree another user can change decides what root reads, writes and journals: a link
    in it to a root-only file, a udev database that names "originals", a mountinfo that
    asks for a remount. Such a root is refused (UsageError) before anything in it is read.
    """
    checked = roots.fakes()
    if roots.config is not None and resolved_path(roots.config) != "/":
        # read only (other writers' files, for who set a value), but read as root: a link in a tree another
        # user owns would show a line of any file root can read (a 0600 file's "writes 777")
        checked.append(("TUNECTL_CONFIG_ROOT", roots.config))
    for label, path in checked:
        try:
            trust.check_root(path)
        except trust.Untrusted as e:
            raise UsageError(f"the root {path} ({label}) cannot be trusted: {e.message}",
                             hint=f"{e.hint}; a tree tunectl reads or writes as root must be root's alone "
                                  "(or yours, when you run tunectl as yourself)", code="untrusted-root",
                             where=label) from None
        except OSError as e:
            raise UsageError(f"the root {path} ({label}) cannot be used: {e.strerror or e}",
                             hint="name an existing directory", code="untrusted-root", where=label) from None
