"""The device model: what discovery found about one whole block device."""

from __future__ import annotations

from tunectl.record import asdict, field, record


@record
class Partition:
    """A partition of a whole device, where it starts and how long it is."""

    name: str
    start: int  # sectors of 512 bytes, as sysfs reports them
    size: int


@record
class Device:
    """A tunable whole block device as discovery read it: names, identity, class, and its queue's values."""

    name: str
    cls: str
    identity: str
    devnum: str = ""  # "maj:min"
    dm_type: str | None = None
    dm_name: str | None = None
    dm_uuid: str | None = None
    model: str | None = None
    vendor: str | None = None
    serial: str | None = None
    wwn: str | None = None
    bus: str | None = None
    size_bytes: int = 0
    removable: bool = False
    rotational: bool | None = None
    logical_block_size: int | None = None
    physical_block_size: int | None = None
    optimal_io_size: int | None = None  # bytes; 0 = none reported
    scheduler: str | None = None  # active; None for devices without a scheduler
    schedulers: tuple[str, ...] = ()  # listed in queue/scheduler
    loadable: tuple[str, ...] = ()  # not listed, but modules of the running kernel: writing the name loads one
    iosched: dict[str, int | str] = field(default_factory=dict)
    queue: dict[str, int | str] = field(default_factory=dict)
    slaves: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()
    partitions: tuple[Partition, ...] = ()
    links: tuple[str, ...] = ()  # /dev symlinks known to udev, relative to /dev
    backing: str = ""  # loop: "major:minor:inode" of the backing file (what a rename or unlink keeps); "" unknown

    @property
    def has_scheduler(self) -> bool:
        return bool(self.schedulers)

    def offers(self, scheduler: str) -> bool:
        """Listed by the device, or a module the kernel loads when the name is written."""
        return scheduler in self.schedulers or scheduler in self.loadable

    def to_json(self) -> dict:
        data = asdict(self)
        data["class"] = data.pop("cls")
        del data["backing"]  # the journal's proof of a loop device's identity, not a fact the schemas show
        data["schedulers"] = list(self.schedulers)
        data["loadable"] = list(self.loadable)
        data["slaves"] = list(self.slaves)
        data["holders"] = list(self.holders)
        data["links"] = list(self.links)
        return data
