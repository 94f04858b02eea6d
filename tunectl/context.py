"""Everything environmental in one object, so the CLI and tests run the same code.

`Context.create` decides once whether the run looks at the real machine
(`tunectl.system.roots`); every edge takes its root, and the subprocess runner,
from here. The profile search path and the subprocess runner are built on first
use: a command that needs neither (`preload replay` at boot) does not pay for
importing the profile library or subprocess.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from tunectl.system.modules import KernelModules, kernel_release
from tunectl.system.roots import UDEV_DATA, Roots, check_trusted, resolved_path, setting
from tunectl.system.state import StateStore
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.system.runner import Completed


def _run(*args, **kwargs) -> Completed:
    """tunectl.system.runner.run, imported when a command first runs a program."""
    from tunectl.system import runner

    return runner.run(*args, **kwargs)


class Context:
    def __init__(self, sysfs: Sysfs, udev: UdevDb, state: StateStore, search_path: list[Path] | None,
                 env: Mapping[str, str] | None = None, modules: KernelModules | None = None,
                 roots: Roots | None = None, run: Callable[..., Completed] = _run) -> None:
        """`search_path` None: the default path for `env`, found when first asked for. `roots` None: built
        from the sysfs root and `env` (tests that assemble a Context by hand)."""
        self.sysfs, self.udev, self.state = sysfs, udev, state
        self._search_path = search_path
        self.env: Mapping[str, str] = {} if env is None else env
        self.modules = KernelModules.none() if modules is None else modules
        self.roots = roots if roots is not None else \
            Roots.choose(self.env, str(sysfs.root), str(udev.root), str(state.dir))
        self.run = run

    @property
    def search_path(self) -> list[Path]:
        if self._search_path is None:
            from tunectl.profile.library import default_search_path

            self._search_path = default_search_path(dict(self.env))
        return self._search_path

    @search_path.setter
    def search_path(self, value: list[Path]) -> None:
        self._search_path = value

    @classmethod
    def create(cls, sysfs_root: str | None = None, state_dir: str | None = None, udev_root: str | None = None,
               env: Mapping[str, str] | None = None) -> Context:
        env = dict(os.environ if env is None else env)
        roots = Roots.choose(env, sysfs_root, udev_root, state_dir)
        check_trusted(roots)
        modules = KernelModules(roots.modules, kernel_release(env))
        state = StateStore(roots.state)
        # A fake tree keeps its own state, unless whoever set it up says the tree stands for this very machine
        # (a chroot's test bed, whose /sys is the host's): TUNECTL_TREE_IS_THIS_MACHINE=1. The tree is root's
        # alone by then (check_trusted), so no other user decides what the journal holds.
        if roots.uses_real_state() and setting(env, "TUNECTL_TREE_IS_THIS_MACHINE") != "1":
            state.fake_roots = [path for _, path in roots.fakes()]
        udev = UdevDb(roots.udev_data, confined=resolved_path(roots.udev_data) != resolved_path(UDEV_DATA))
        return cls(Sysfs(roots.sys, confined=not roots.real), udev, state, None, env, modules, roots)

    @property
    def real(self) -> bool:
        """The run looks at the running kernel (not a tree that describes another machine)."""
        assert self.roots is not None
        return self.roots.real
