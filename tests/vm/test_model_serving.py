"""The model disks served by nbdkit, read from the host (no guest): data kept, every request as slow as the model.

Needs nbdkit and its python plugin (scripts/bootstrap --test); a few seconds, no qemu.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.vm import diskmodel, machine
from tests.vm.nbdclient import NbdClient


@pytest.fixture
def served(tmp_path: Path):  # noqa: ANN201 (a generator fixture)
    if shutil.which("nbdkit") is None:
        pytest.fail("nbdkit is not installed (scripts/bootstrap --test installs nbdkit and nbdkit-plugin-python)",
                    pytrace=False)
    images, shared = tmp_path / "images", tmp_path / "shared"
    images.mkdir()
    shared.mkdir()
    with machine.serve_models(machine.model_machine(), images, shared) as sockets:
        yield sockets, shared


def test_the_model_disks_hold_their_data(served) -> None:  # noqa: ANN001
    sockets, _ = served
    for name, size in (("mhdd", 1 << 30), ("msd", 512 << 20)):
        client = NbdClient(str(sockets / f"{name}.sock"))
        assert client.size == size
        client.write(size - 8192, b"tunectl!" * 1024)
        assert client.read(size - 8192, 8192) == b"tunectl!" * 1024
        assert client.read(0, 4096) == bytes(4096)
        client.close()


def test_every_request_takes_at_least_the_models_time(served) -> None:  # noqa: ANN001
    """Far-apart reads on the HDD: each answered no sooner than the model's completion, which the log shows."""
    sockets, shared = served
    client = NbdClient(str(sockets / "mhdd.sock"))
    offsets = [0, 1000 << 20, 8 << 20, 900 << 20, 16 << 20]
    took = []
    for offset in offsets:
        started = time.monotonic()
        client.read(offset, 4096)
        took.append(time.monotonic() - started)
    client.close()
    reads = [r for r in machine.requests(shared / "mhdd.requests") if r.op == "r"]
    assert [r.offset for r in reads] == offsets
    for r, seconds in zip(reads, took):
        assert r.how == "seek" and r.replied >= r.done
        assert seconds >= r.done - r.arrival
    long_seeks = [r.done - r.start for r in reads[1:]]
    assert min(long_seeks) >= diskmodel.HddParams().seek_average_ms / 1000  # 800+ MiB across a 1 GiB platter


def test_the_sd_model_costs_per_request(served) -> None:  # noqa: ANN001
    sockets, shared = served
    client = NbdClient(str(sockets / "msd.sock"))
    started = time.monotonic()
    for i in range(20):
        client.read(i * 4096, 4096)
    seconds = time.monotonic() - started
    client.close()
    assert seconds >= 20 * (626e-6 + 4096 / (100 * diskmodel.MB))  # no cache: sequential 4 KiB pays every time
