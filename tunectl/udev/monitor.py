"""`tunectl udev monitor`: follow block add/change events and verify each device once udev has run its rules.

The event source is pyudev's monitor on the *udev* netlink source: those events
are sent after udev has run every rule (ours included) for the device, so what
is planned then is what the rules left behind. Kernel-source events would race
udev's own writes. pyudev is imported here only, and only when the monitor runs.

`follow` is the loop without the OS: it takes any iterable of events, so tests
drive it with events of their own against a fake sysfs tree.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterable, Iterator

from tunectl.errors import ExitCode, TunectlError, UsageError
from tunectl.record import field, record
from tunectl.report import Report, painted
from tunectl.status import Status
from tunectl.tuning.plan import Setting
from tunectl.units import counted

TYPE_CHECKING = False  # typing costs start-up every command pays; the names are for checkers only
if TYPE_CHECKING:
    from typing import Any

ACTIONS = ("add", "change")


@record(frozen=True)
class BlockEvent:
    action: str
    device: str  # kernel name of a whole disk
    sequence: int | None = None


@record
class EventReport(Report):
    """One event as the monitor judged it, a report of the stream `udev monitor` prints (one line or one JSON
    line each): its verdict IN_SYNC, DRIFT, NOT_TUNED or VANISHED, from the one vocabulary (tunectl.status);
    the document spells IN_SYNC "in-sync" (`Verdict.word`), the text "in sync"; colour from the verdict."""

    time: str
    event: BlockEvent
    profile: str
    status: Status
    settings: int = 0  # how many settings the profile has for the device
    drift: list[Setting] = field(default_factory=list)
    reason: str = ""

    @property
    def exit_code(self) -> int:
        """What `tunectl verify` of this one device would exit with: 1 on drift, else 0. The monitor itself
        exits 0 however many events drifted (a stream ends by Ctrl-C or --count, not by a verdict)."""
        return ExitCode.DRIFT if self.status == Status.DRIFT else ExitCode.OK

    def to_json(self) -> dict:
        return {"time": self.time, "device": self.event.device, "action": self.event.action,
                "sequence": self.event.sequence, "profile": self.profile,
                "status": self.status.word("udev-monitor"), "in_sync": self.status in (Status.IN_SYNC, Status.NOT_TUNED),
                "settings": self.settings,
                "drift": [s.to_json() for s in self.drift], "reason": self.reason}

    def print_text(self, out: Any) -> None:
        out.print(self.line(paint=out.colour))

    def line(self, paint: bool = False) -> str:
        """The event's line for people; `paint`: its verdict word in the verdict's colour (a terminal)."""
        head = f"{self.time}  {self.event.device:<10} {self.event.action:<6}"
        word = painted(self.status.word("udev-monitor").replace("-", " "), self.status.colour if paint else None)
        if self.status == Status.DRIFT:
            parts = [f"{s.attribute} {_show(s.before)} -> {_show(s.after)}" + (f" ({s.reason})" if s.reason else "")
                     for s in self.drift]
            return f"{head} {word}: {'; '.join(parts)}"
        if self.status == Status.IN_SYNC:
            return f"{head} {word} ({counted(self.settings, 'setting')})"
        return f"{head} {word}: {self.reason}"


def _show(value: object) -> str:
    return "-" if value is None else ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


def follow(events: Iterable[BlockEvent | None], check: Callable[[str], tuple[str, list[Setting]]],
           profile: str, clock: Callable[[], str] = _now) -> Iterator[EventReport]:
    """One report per add/change event of a whole disk: `check(name)` plans it (profile name, settings)."""
    for event in events:
        if event is None or event.action not in ACTIONS:
            continue
        try:
            name, settings = check(event.device)
        except UsageError:
            yield EventReport(clock(), event, profile, Status.VANISHED, reason="no such device any more")
            continue
        profile = name
        relevant = [s for s in settings if s.device == event.device]
        drift = [s for s in relevant if s.is_drift]
        if drift:
            yield EventReport(clock(), event, profile, Status.DRIFT, len(relevant), drift)
        elif relevant:
            yield EventReport(clock(), event, profile, Status.IN_SYNC, len(relevant))
        else:
            yield EventReport(clock(), event, profile, Status.NOT_TUNED, reason="the profile has no setting for this device")


def udev_events(poll_seconds: float = 0.5) -> Iterator[BlockEvent | None]:
    """Block add/change events of whole disks from this machine's udev, after its rules ran.

    The first item is None, yielded once the socket listens: a caller can say
    "ready" knowing that no later event is lost. `follow` skips it.
    """
    try:
        import pyudev
    except ImportError:  # pragma: no cover - pyudev is a declared dependency
        raise TunectlError("pyudev is not installed", hint="pip install pyudev") from None
    try:
        context = pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(context, source="udev")
        monitor.filter_by("block", device_type="disk")
        # A burst of events (a trigger, many disks) overflows the default socket buffer and the kernel
        # drops the rest (ENOBUFS); udevadm monitor asks for 128 MiB for the same reason.
        with contextlib.suppress(OSError, ValueError):
            monitor.set_receive_buffer_size(128 << 20)
        monitor.start()
    except (OSError, pyudev.DeviceNotFoundError) as e:
        raise TunectlError(f"cannot listen to udev events: {e}",
                           hint="udev monitor needs a running systemd-udevd and a netlink socket") from None
    yield None
    while True:
        device = monitor.poll(timeout=poll_seconds)  # a timeout keeps Ctrl-C responsive
        if device is None:
            continue
        yield BlockEvent(device.action or "", device.sys_name, device.sequence_number)
