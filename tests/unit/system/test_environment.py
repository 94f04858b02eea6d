"""Every TUNECTL_* variable set empty is the variable unset (`TUNECTL_STATE_DIR= tunectl apply` uses
/var/lib/tunectl), the convention for environment variables, as XDG's base directories have it; an option given ''
is a usage error instead (tests/unit/cli/test_blank_values.py). One function reads them all
(`tunectl.system.roots.setting`), so no variable can take its own view of empty."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import tunectl
from tunectl.context import Context
from tunectl.errors import UsageError
from tunectl.profile.library import default_search_path
from tunectl.system.roots import STATE, Roots, setting
from tunectl.udev.install import tunectl_executable

PACKAGE = Path(tunectl.__file__).resolve().parent
ROOTS = ("TUNECTL_SYSFS_ROOT", "TUNECTL_UDEV_ROOT", "TUNECTL_DEV_ROOT", "TUNECTL_PROC_ROOT", "TUNECTL_FSTAB",
         "TUNECTL_MODULES_ROOT", "TUNECTL_STATE_DIR", "TUNECTL_CONFIG_ROOT")
OTHERS = ("TUNECTL_KERNEL_RELEASE", "TUNECTL_TREE_IS_THIS_MACHINE", "TUNECTL_PROFILE_PATH", "TUNECTL_EXECUTABLE")


def variable_reads() -> tuple[set[str], list[str]]:
    """The TUNECTL_* names read through `setting` (or Roots.choose's `pick`, which calls it), and every other
    read of one (`env.get("TUNECTL_X")`, `env["TUNECTL_X"]`) as FILE:LINE."""
    through, elsewhere = set(), []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and a.value.startswith("TUNECTL_")]
                if name in ("setting", "pick"):
                    through.update(names)
                elif name in ("get", "getenv", "pop", "setdefault") and names:
                    elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                    str(node.slice.value).startswith("TUNECTL_") and isinstance(node.ctx, ast.Load):
                elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return through, elsewhere


def test_every_variable_is_read_through_the_one_rule() -> None:
    through, elsewhere = variable_reads()
    assert elsewhere == [], "read around tunectl.system.roots.setting (empty would not be unset there)"
    assert through == set(ROOTS + OTHERS), "a variable this test does not pin (add it to ROOTS or OTHERS)"


@pytest.mark.parametrize("var", ROOTS)
def test_an_empty_root_variable_is_the_default(tmp_path: Path, var: str) -> None:
    assert Roots.choose({var: ""}) == Roots.choose({})
    assert Roots.choose({var: ""}).state == STATE
    fake = {"TUNECTL_SYSFS_ROOT": str(tmp_path)} if var != "TUNECTL_SYSFS_ROOT" else {}
    assert Roots.choose({**fake, var: ""}) == Roots.choose(fake)


def test_an_empty_kernel_release_is_the_running_kernels(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    ctx = Context.create(state_dir=state, env={"TUNECTL_KERNEL_RELEASE": ""})
    assert ctx.modules.release == os.uname().release


def test_an_empty_tree_is_this_machine_is_not_set(tmp_path: Path) -> None:
    """A fake tree never writes the real state directory unless TUNECTL_TREE_IS_THIS_MACHINE=1; empty is not 1."""
    tree = tmp_path / "sys"
    tree.mkdir()
    for env in ({}, {"TUNECTL_TREE_IS_THIS_MACHINE": ""}):
        ctx = Context.create(sysfs_root=str(tree), state_dir=STATE, env=env)
        assert ctx.state.fake_roots, env


def test_an_empty_profile_path_adds_no_directory() -> None:
    assert default_search_path({"TUNECTL_PROFILE_PATH": ""}) == default_search_path({})


def test_an_empty_executable_is_the_one_found_on_path(tmp_path: Path) -> None:
    exe = tmp_path / "tunectl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert tunectl_executable({"TUNECTL_EXECUTABLE": "", "PATH": str(tmp_path)}) == str(exe)


@pytest.mark.parametrize("var", ROOTS + OTHERS)
def test_every_blank_variable_is_refused_by_the_one_rule(var: str) -> None:
    with pytest.raises(UsageError, match=f"^{var}: the value is blank"):
        setting({var: "  "}, var)
    assert setting({var: "x"}, var) == "x" and setting({var: ""}, var) is None and setting({}, var) is None


@pytest.mark.parametrize("var", ROOTS + ("TUNECTL_KERNEL_RELEASE", "TUNECTL_PROFILE_PATH"))
def test_a_blank_variable_is_a_usage_error_naming_it(tmp_path: Path, var: str) -> None:
    """Spaces only are neither a value nor unset: `TUNECTL_STATE_DIR=' '` named a directory ' ' in the working
    directory. Said as `--state-dir ' '` is, exit 2, nothing made."""
    from tests.harness import run_cli

    env = {"TUNECTL_STATE_DIR": str(tmp_path / "state"), "PATH": os.environ.get("PATH", ""), var: " \t"}
    r = run_cli("status", "--json", env=env)
    assert r.code == 2, (r.code, r.err)
    assert f"{var}: the value is blank" in r.err and f"unset {var}" in r.err, r.err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("release", ["/home/user/rel", "../../../tmp/rel", "6.1.0-13-amd64/../../x", "..", "."])
def test_a_kernel_release_that_is_a_path_is_refused(tmp_path: Path, release: str) -> None:
    """A release is one directory of the module tree (`uname -r`). Joined to the root, an absolute one or one with
    `..` left it, past the root's trust check: root read `modules.dep` in any directory, another user's too (a
    named pipe put there hung every command). Exit 2 naming the variable, before anything is read."""
    from tests.harness import run_cli

    with pytest.raises(UsageError, match="^TUNECTL_KERNEL_RELEASE: .* is not a kernel release"):
        Context.create(state_dir=str(tmp_path / "state"), env={"TUNECTL_KERNEL_RELEASE": release})
    tree = tmp_path / "sys"
    tree.mkdir()
    env = {"TUNECTL_SYSFS_ROOT": str(tree), "TUNECTL_STATE_DIR": str(tmp_path / "state"),
           "PATH": os.environ.get("PATH", ""), "TUNECTL_KERNEL_RELEASE": release}
    r = run_cli("status", "--json", env=env)
    assert r.code == 2 and r.doc["error"]["code"] == "usage", (r.code, r.out, r.err)
    assert r.doc["error"]["where"] == "TUNECTL_KERNEL_RELEASE", r.json


def test_a_kernel_release_is_any_one_directory_name(tmp_path: Path) -> None:
    ctx = Context.create(state_dir=str(tmp_path / "state"), env={"TUNECTL_KERNEL_RELEASE": "6.12.0+deb13-amd64"})
    assert ctx.modules.release == "6.12.0+deb13-amd64"
