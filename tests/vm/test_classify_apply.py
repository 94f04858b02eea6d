"""Classification and identity of every device class, and apply/verify/rollback with bfq and kyber as modules.

One boot per kernel (guest group `classify`); every assertion reads what the guest's
sysfs and udev showed, not tunectl's own report alone.
"""

from __future__ import annotations

import pytest

from tunectl.attributes import derived_read_ahead_kb, read_ahead_after_limits

SERIES = ["6.1", "6.12"]
CLASSES = {"nvme": "nvme", "hdd": "rotational", "ssd": "ssd", "sata": "ssd", "sd": "mmc", "virt": "virtio"}
ROLES = list(CLASSES)


@pytest.fixture(scope="module", params=SERIES)
def run(request: pytest.FixtureRequest, vm_boot) -> dict:
    results = vm_boot(request.param, "classify").results
    assert not results["errors"], results["errors"]
    return results


def _status(run: dict, role: str) -> dict:
    return run["status"]["devices"][run["disks"][role]]


def _udev_model(props: dict) -> str | None:
    enc = props.get("ID_MODEL_ENC")
    if enc:
        return bytes(enc, "ascii").decode("unicode_escape").strip()
    return props.get("ID_MODEL")


def test_every_device_class_is_present(run: dict) -> None:
    assert sorted(run["disks"]) == sorted(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_class(run: dict, role: str) -> None:
    assert _status(run, role)["class"] == CLASSES[role]


@pytest.mark.parametrize("role", ROLES)
def test_serial_is_udevs(run: dict, role: str) -> None:
    """The serial a `serial:` match sees is the product serial udev and lsblk show (ID_SCSI_SERIAL on SCSI)."""
    props = run["udev"][role]
    want = props.get("ID_SCSI_SERIAL") or props.get("ID_SERIAL_SHORT") or props.get("ID_SERIAL")
    assert _status(run, role)["serial"] == want


def test_scsi_ssd_with_wwn_reports_its_serial_not_the_wwn(run: dict) -> None:
    ssd = _status(run, "ssd")
    assert ssd["serial"] == "tcssd01"
    assert ssd["wwn"] == run["udev"]["ssd"]["ID_WWN"] == "0x5000c500a1b2c3d4"


@pytest.mark.parametrize("role", ROLES)
def test_wwn_is_udevs(run: dict, role: str) -> None:
    assert _status(run, role)["wwn"] == run["udev"][role].get("ID_WWN")


@pytest.mark.parametrize("role", ROLES)
def test_model_is_udevs_or_the_kernels(run: dict, role: str) -> None:
    model = _udev_model(run["udev"][role]) or run["sysfs_identity"][role]["device/name"]
    assert _status(run, role)["model"] == model


def test_sd_card_model_is_its_name(run: dict) -> None:
    assert _status(run, "sd")["model"] == run["sysfs_identity"]["sd"]["device/name"] == "QEMU!"


@pytest.mark.parametrize("role", ROLES)
def test_bus_is_udevs_where_udev_has_one(run: dict, role: str) -> None:
    props = run["udev"][role]
    expected = props.get("ID_BUS") or {"nvme": "nvme", "sd": "mmc", "virt": "virtio"}[role]
    assert _status(run, role)["bus"] == expected


def test_schedulers_are_modules_not_loaded_at_boot(run: dict) -> None:
    assert run["modules_at_boot"] == []
    assert "bfq" not in run["before"]["hdd"]["schedulers"]


def test_apply_loads_the_modules(run: dict) -> None:
    assert run["apply"]["code"] == 0, run["apply"]["stderr"]
    assert run["modules_after_apply"] == ["bfq", "kyber_iosched"]


WANTED = {
    "hdd": ("bfq", {"slice_idle": "0", "low_latency": "0"}, "1024"),
    "ssd": ("kyber", {"read_lat_nsec": "1000000"}, "384"),  # devices: {serial: tcssd01} over the class's 256
    "sata": ("kyber", {"read_lat_nsec": "1000000"}, "256"),
    "nvme": ("kyber", {"write_lat_nsec": "5000000"}, None),
    "sd": ("bfq", {"back_seek_max": "8192"}, "640"),  # devices: {model: <device/name>}
    "virt": ("mq-deadline", {"read_expire": "100"}, None),
}


@pytest.mark.parametrize("role", ROLES)
def test_apply_writes_scheduler_knobs_and_read_ahead(run: dict, role: str) -> None:
    scheduler, knobs, read_ahead = WANTED[role]
    after = run["after_apply"][role]
    assert after["scheduler"] == scheduler
    for knob, value in knobs.items():
        assert after["iosched"][knob] == value, knob
    assert after["read_ahead_kb"] == (read_ahead or run["before"][role]["read_ahead_kb"])


def test_apply_writes_nr_requests(run: dict) -> None:
    assert run["after_apply"]["virt"]["nr_requests"] == "64"


def test_verify_in_sync_after_apply(run: dict) -> None:
    assert run["verify"]["code"] == 0, run["verify"]


@pytest.mark.parametrize("role", ROLES)
def test_rollback_restores_the_kernels_values(run: dict, role: str) -> None:
    assert run["rollback"]["code"] == 0, run["rollback"]["stderr"]
    before, after = run["before"][role], run["after_rollback"][role]
    for key in ("scheduler", "read_ahead_kb", "nr_requests", "iosched"):
        assert after[key] == before[key], key


@pytest.mark.parametrize("role", [*ROLES, "loop"])
def test_read_ahead_is_what_tunectls_model_of_this_kernel_predicts(run: dict, role: str) -> None:
    """Measured before tunectl touched a device (guest `read_ahead_generations`): the read_ahead_kb the device
    started with is the one `owners`/`explain` call "kernel default" (attributes.derived_read_ahead_kb, for this
    release and the device's limits), and after a hand-set value and a write of `rotational` or `max_sectors_kb`
    it is what attributes.read_ahead_after_limits says this release does."""
    seen = run["read_ahead_generations"][role]
    limits = (seen["rotational"] == 1, seen["optimal_io_size"], seen["max_sectors_kb"])
    print(run["kernel"], role, seen)
    assert seen["default"] == derived_read_ahead_kb(run["kernel"], *limits), seen
    for key, got in seen["after"].items():
        hand = int(key.split(":")[0])
        assert got == read_ahead_after_limits(run["kernel"], hand, *limits), (key, seen)
