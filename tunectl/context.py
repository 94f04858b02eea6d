"""Everything environmental in one object, so the CLI and tests run the same code.

`Context.create` decides once whether the run looks at the real machine
(`tunectl.system.roots`); every edge takes its root, and the subprocess runner,
from here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tunectl.profile.library import default_search_path
from tunectl.system import runner as runners
from tunectl.system.modules import KernelModules
from tunectl.system.roots import UDEV_DATA, Roots, check_trusted
from tunectl.system.state import StateStore
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb


@dataclass
class Context:
    sysfs: Sysfs
    udev: UdevDb
    state: StateStore
    search_path: list[Path]
    env: Mapping[str, str] = field(default_factory=dict)
    modules: KernelModules = field(default_factory=KernelModules.none)
    roots: Roots | None = None  # None: built from the sysfs root and `env` (tests that assemble a Context by hand)
    run: Callable[..., runners.Completed] = runners.run

    def __post_init__(self) -> None:
        if self.roots is None:
            self.roots = Roots.choose(self.env, str(self.sysfs.root), str(self.udev.root), str(self.state.dir))

    @classmethod
    def create(cls, sysfs_root: str | None = None, state_dir: str | None = None, udev_root: str | None = None,
               env: Mapping[str, str] | None = None) -> Context:
        env = dict(os.environ if env is None else env)
        roots = Roots.choose(env, sysfs_root, udev_root, state_dir)
        check_trusted(roots)
        modules = KernelModules(roots.modules, env.get("TUNECTL_KERNEL_RELEASE") or os.uname().release)
        state = StateStore(roots.state)
        if roots.uses_real_state():
            state.fake_roots = [path for _, path in roots.fakes()]
        udev = UdevDb(roots.udev_data, confined=os.path.realpath(roots.udev_data) != UDEV_DATA)
        return cls(Sysfs(roots.sys, confined=not roots.real), udev, state,
                   default_search_path(env), env, modules, roots)

    @property
    def real(self) -> bool:
        """The run looks at the running kernel (not a tree that describes another machine)."""
        assert self.roots is not None
        return self.roots.real
