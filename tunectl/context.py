"""Everything environmental in one object, so the CLI and tests run the same code."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tunectl.profile.library import default_search_path
from tunectl.system.modules import KernelModules
from tunectl.system.state import StateStore
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb

DEFAULT_SYSFS = "/sys"
DEFAULT_UDEV_DATA = "/run/udev/data"
DEFAULT_STATE_DIR = "/var/lib/tunectl"
DEFAULT_MODULES = "/lib/modules"


@dataclass
class Context:
    sysfs: Sysfs
    udev: UdevDb
    state: StateStore
    search_path: list[Path]
    env: Mapping[str, str] = field(default_factory=dict)
    modules: KernelModules = field(default_factory=KernelModules.none)

    @classmethod
    def create(cls, sysfs_root: str | None = None, state_dir: str | None = None, udev_root: str | None = None,
               env: Mapping[str, str] | None = None) -> Context:
        env = dict(os.environ if env is None else env)
        sysfs_root = sysfs_root or env.get("TUNECTL_SYSFS_ROOT") or DEFAULT_SYSFS
        udev_root = udev_root or env.get("TUNECTL_UDEV_ROOT")
        if udev_root is None:
            # A fake sysfs tree must not be described by the real machine's udev database.
            real = os.path.realpath(sysfs_root) == DEFAULT_SYSFS
            udev_root = DEFAULT_UDEV_DATA if real else os.path.join(sysfs_root, ".udev-data")
        state_dir = state_dir or env.get("TUNECTL_STATE_DIR") or DEFAULT_STATE_DIR
        return cls(Sysfs(sysfs_root), UdevDb(udev_root), StateStore(state_dir), default_search_path(env), env,
                   _modules(sysfs_root, env))


def _modules(sysfs_root: str, env: Mapping[str, str]) -> KernelModules:
    """The module tree of the running kernel; a fake sysfs tree is not described by the real machine's modules."""
    root = env.get("TUNECTL_MODULES_ROOT")
    if root is None:
        real = os.path.realpath(sysfs_root) == DEFAULT_SYSFS
        root = DEFAULT_MODULES if real else os.path.join(sysfs_root, ".modules")
    return KernelModules(root, env.get("TUNECTL_KERNEL_RELEASE") or os.uname().release)
