"""A machine's life across a reboot: two boots of the 6.1 kernel on the same disk images.

Boot 1 applies a scoped profile (state on an ext4 state disk) and installs the rules;
boot 2 mounts those rules as /etc/udev/rules.d before its udevd starts, so what the
devices show at boot is what the rules did on the boot's own coldplug. Then verify
(boot 1's scope) and rollback to the originals boot 1 journalled.
"""

from __future__ import annotations

import pytest

SCOPED = ["nvme", "hdd", "ssd", "sd"]
UNTOUCHED = ["sata", "virt"]
KEYS = ("scheduler", "read_ahead_kb", "iosched")


@pytest.fixture(scope="module")
def life(vm_boot) -> tuple[dict, dict]:
    first = vm_boot("6.1", "reboot1", images="life", kind="persistent")
    assert not first.results["errors"], first.results["errors"]
    second = vm_boot("6.1", "reboot2", images="life", kind="persistent",
                     rodirs=(("/etc/udev/rules.d", str(first.shared / "rules.d")),))
    assert not second.results["errors"], second.results["errors"]
    return first.results, second.results


def test_boot_1_applies_and_installs(life: tuple[dict, dict]) -> None:
    first, _ = life
    assert first["apply"]["code"] == 0, first["apply"]["stderr"]
    assert first["udev_install"]["code"] in (0, 3), first["udev_install"]["stderr"]  # 3: no udevd reload of that dir
    assert first["after_apply"]["hdd"]["scheduler"] == "bfq"
    assert first["journal"]


def test_boot_2_has_the_rules_from_its_start(life: tuple[dict, dict]) -> None:
    assert life[1]["rules_present"]


@pytest.mark.parametrize("role", SCOPED)
def test_the_rules_tuned_each_device_at_boot(life: tuple[dict, dict], role: str) -> None:
    first, second = life
    for key in KEYS:
        assert second["at_boot"][role][key] == first["after_apply"][role][key], key


@pytest.mark.parametrize("role", UNTOUCHED)
def test_devices_outside_the_profile_keep_the_kernels_values(life: tuple[dict, dict], role: str) -> None:
    first, second = life
    assert second["at_boot"][role]["scheduler"] == first["before"][role]["scheduler"]


def test_verify_in_sync_after_the_reboot(life: tuple[dict, dict]) -> None:
    verify = life[1]["verify"]
    assert verify["code"] == 0, verify
    assert verify["scope"] is not None


@pytest.mark.parametrize("role", SCOPED)
def test_rollback_restores_boot_1_originals(life: tuple[dict, dict], role: str) -> None:
    first, second = life
    assert second["rollback"]["code"] == 0, second["rollback"]["stderr"]
    for key in KEYS:
        assert second["after_rollback"][role][key] == first["before"][role][key], key
