"""Which roots are the real machine's: a fake one is checked, confined, and never writes the real state."""

from __future__ import annotations

from pathlib import Path

from tunectl.system.roots import STATE, Roots


def test_the_real_machine_has_no_fake_root_even_where_lib_is_a_link_to_usr_lib() -> None:
    roots = Roots.choose({})
    assert roots.real and roots.fakes() == [] and roots.uses_real_state()


def test_every_root_a_variable_moves_is_fake_and_named_by_its_option(tmp_path: Path) -> None:
    env = {"TUNECTL_PROC_ROOT": str(tmp_path / "proc"), "TUNECTL_MODULES_ROOT": str(tmp_path / "modules")}
    roots = Roots.choose(env, sysfs_root=str(tmp_path / "sys"), state_dir=str(tmp_path / "state"))
    labels = [label for label, _ in roots.fakes()]
    assert labels == ["--sysfs-root / TUNECTL_SYSFS_ROOT", "--udev-root / TUNECTL_UDEV_ROOT", "TUNECTL_PROC_ROOT",
                      "TUNECTL_MODULES_ROOT"]
    assert not roots.uses_real_state() and Roots.choose(env, state_dir=STATE).uses_real_state()
