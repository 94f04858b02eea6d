"""benchmarks.common.model_boots: the one VM session of the model-disk benchmarks (preload_boot, preload_model,
profiles, model_disks): every boot on the same images and shared directory, under the VM lock, a failed guest
step the end of the benchmark unless the caller reports it."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from benchmarks import common
from tests.vm import machine

KERNELS = [machine.Kernel("6.1.0-test-amd64", Path("/nonexistent/6.1")),
           machine.Kernel("6.12.0-test-amd64", Path("/nonexistent/6.12"))]


def lock_is_free(path: Path) -> bool:
    with open(path, "a") as other:  # another open file description: flock sees it as another holder
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


class Trial:
    def __init__(self) -> None:
        self.seen: list[dict] = []  # the boots machine.boot was asked for (nothing runs)
        self.results: list[dict] = []  # what each boot's guest wrote, in turn


@pytest.fixture
def trial(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Trial:
    made = Trial()
    seen = made.seen
    monkeypatch.setattr(common, "VM_LOCK", tmp_path / "vm.lock")
    monkeypatch.setattr(machine, "kernels", lambda: KERNELS)
    monkeypatch.setattr(machine, "BOOT_TIMEOUT", 1200)

    def boot(kernel, group, mach, images, shared, args=()):  # noqa: ANN001, ANN202
        seen.append({"kernel": kernel.release, "group": group, "images": images, "shared": shared, "args": args,
                     "locked": not lock_is_free(tmp_path / "vm.lock"),
                     "models": [d.model for d in mach.disks if d.model]})
        return machine.Boot(kernel, group, made.results.pop(0), 1.0, "", shared)

    monkeypatch.setattr(machine, "boot", boot)
    return made


def test_boots_share_the_images_and_hold_the_lock_until_released(trial: Trial, tmp_path: Path) -> None:
    trial.results += [{"errors": {}}, {"errors": {}}]
    boots = trial.seen
    with common.model_boots("trial") as vm:
        assert lock_is_free(tmp_path / "vm.lock")  # taken at the first boot, not while waiting to start
        vm.boot("bootpair1", ("files=10",))
        vm.boot("bootpair2")
        assert not lock_is_free(tmp_path / "vm.lock")
        vm.release()
        assert lock_is_free(tmp_path / "vm.lock")
        where = vm.where
    assert [b["group"] for b in boots] == ["bootpair1", "bootpair2"] and boots[0]["args"] == ("files=10",)
    assert all(b["locked"] for b in boots)
    assert boots[0]["images"] == boots[1]["images"] == where / "images" and boots[1]["shared"] == where / "shared"
    assert boots[0]["kernel"] == "6.1.0-test-amd64" and boots[0]["models"] == ["hdd-7200", "sd-a1"]
    assert not where.exists()  # the temporary directory goes with the session
    assert lock_is_free(tmp_path / "vm.lock")


def test_a_kept_directory_stays_and_a_longer_timeout_is_kept(trial: Trial, tmp_path: Path) -> None:
    trial.results.append({"errors": {"step": "boom"}})
    boots = trial.seen
    with common.model_boots("trial", "6.12", keep=tmp_path / "kept", timeout=3000) as vm:
        boot = vm.boot("profiles", strict=False)  # the caller reports the failed step
    assert boot.results["errors"] == {"step": "boom"} and boots[0]["kernel"] == "6.12.0-test-amd64"
    assert boots[0]["shared"] == tmp_path / "kept" / "shared" and machine.BOOT_TIMEOUT == 3000


def test_a_failed_guest_step_ends_a_strict_benchmark_with_the_guests_words(trial: Trial) -> None:
    trial.results.append({"errors": {"workload": "Traceback ... OSError"}})
    with pytest.raises(SystemExit, match="bootpair1 failed .*OSError"), common.model_boots("trial") as vm:
        vm.boot("bootpair1")


def test_a_missing_kernel_says_what_to_run(trial: Trial) -> None:
    with pytest.raises(SystemExit, match="no 5.10 guest kernel .*scripts/bootstrap --test"), \
            common.model_boots("trial", "5.10"):
        pass
