"""Checks of what the kernel derived from a device's topology: typed warnings, one per device and kind.

Pure: takes Device records (and a plan), returns DeviceWarning records; the
kernel facts live in `tunectl.attributes` (kernel_read_ahead_kb, io_opt_doubt).
"""

from __future__ import annotations

from collections.abc import Iterable

from tunectl.attributes import derived_from_doubtful_io_opt
from tunectl.devices.model import Device
from tunectl.record import field, record
from tunectl.status import Status
from tunectl.tuning.plan import Setting

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

BOGUS_IO_OPT_READ_AHEAD = "read-ahead-from-bogus-io-opt"


@record
class DeviceWarning:
    """A warning about one device's reported topology (a bogus optimal I/O size, ...), with the facts behind it."""

    device: str
    identity: str
    kind: str  # a stable id, e.g. BOGUS_IO_OPT_READ_AHEAD
    message: str
    hint: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"device": self.device, "identity": self.identity, "kind": self.kind, "message": self.message,
                "hint": self.hint, **self.facts}

    def __str__(self) -> str:
        return f"tunectl: warning: {self.device}: {self.message}" + (f"\nhint: {self.hint}" if self.hint else "")


def read_ahead_warnings(devices: Iterable[Device], settings: Iterable[Setting] = ()) -> list[DeviceWarning]:
    """Devices whose read-ahead is (and, after `settings`, stays) what the kernel derived from a bogus io_opt.

    The kernel sets read-ahead to twice io_opt; a USB bridge reporting 33553920 gets
    65532 KiB, and random reads fetch 64 MiB each. A plan that moves read_ahead_kb
    elsewhere cures it; one that leaves it (no setting, or a range it lies in) does not.
    """
    planned = {s.device: s.after for s in settings if s.attribute == "read_ahead_kb" and s.status == Status.CHANGE}
    out = []
    for dev in devices:
        live = dev.queue.get("read_ahead_kb")
        after = planned.get(dev.name, live)
        doubt = derived_from_doubtful_io_opt(live, dev.optimal_io_size, dev.physical_block_size)
        if doubt is None or (isinstance(after, int) and after != live):
            continue
        out.append(DeviceWarning(
            dev.name, dev.identity, BOGUS_IO_OPT_READ_AHEAD,
            f"read_ahead_kb {live} is what the kernel derives from the optimal I/O size the device reports "
            f"(twice {dev.optimal_io_size} bytes), a size util-linux ignores: {doubt}; "
            f"a random read may pull in up to {live} KiB",
            f"cap it in the profile, e.g. read_ahead_kb: {{max: 1024}} in a devices: entry matching "
            f"{dev.name}'s model or serial (the kernel sets it again whenever it re-reads the device's limits)",
            {"read_ahead_kb": live, "optimal_io_size": dev.optimal_io_size,
             "physical_block_size": dev.physical_block_size}))
    return out
