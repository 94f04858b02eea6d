"""The device classes as one table, and the kernel facts that name a device's kind.

`classify` (discovery) and the udev rules' class matches are both read from
CLASS_TABLE, in its order: the first match wins (SPEC §2).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from tunectl.record import record


@record(frozen=True)
class DeviceClass:
    """A device class a profile tunes (nvme, ssd, rotational, loop, ...): the kernel names or rotational flag that match it."""

    name: str
    kernel: tuple[str, ...] = ()  # kernel-name globs; none: decided by the rotational flag
    rotational: bool = False  # with no kernel globs: matches when queue/rotational is 1
    opt_in: bool = False  # tuned only when a profile names the class

    @property
    def udev_match(self) -> str | None:
        """The udev key that recognises this class, or None for the class of whatever is left."""
        if self.kernel:
            return f'KERNEL=="{"|".join(self.kernel)}"'
        return 'ATTR{queue/rotational}=="1"' if self.rotational else None


CLASS_TABLE: tuple[DeviceClass, ...] = (
    DeviceClass("dm", ("dm-*",)),
    DeviceClass("md", ("md*",)),
    DeviceClass("loop", ("loop*",), opt_in=True),
    DeviceClass("zram", ("zram*",), opt_in=True),
    DeviceClass("nvme", ("nvme*n*",)),
    DeviceClass("mmc", ("mmcblk*",)),
    DeviceClass("virtio", ("vd*", "xvd*")),  # the hypervisor's rotational flag is not trusted
    DeviceClass("rotational", rotational=True),
    DeviceClass("ssd"),  # not rotational; an unreadable flag counts as not rotational
)
CLASSES = tuple(c.name for c in CLASS_TABLE)
OPT_IN_CLASSES = tuple(c.name for c in CLASS_TABLE if c.opt_in)

# dm/uuid prefix -> dm subtype
DM_UUID_PREFIXES = (
    ("CRYPT-VERITY-", "verity"),
    ("CRYPT-LUKS1-", "crypt"),
    ("CRYPT-LUKS2-", "crypt"),
    ("CRYPT-PLAIN-", "crypt"),
    ("CRYPT-INTEGRITY-", "integrity"),
    ("LVM-", "lvm"),
    ("mpath-", "multipath"),
)
DM_TYPES = tuple(dict.fromkeys(kind for _prefix, kind in DM_UUID_PREFIXES))

# Bus from the device's sysfs path, when udev has no ID_BUS (path fragment -> bus).
BUS_BY_PATH = (
    ("/nvme", "nvme"),  # also devices/virtual/nvme-subsystem/ (native multipath)
    ("/virtio", "virtio"),
    ("/usb", "usb"),
    ("/mmc_host/", "mmc"),
    ("/ata", "ata"),
    ("/vbd-", "xen"),
    ("/host", "scsi"),
)


def classify(name: str, rotational: bool | None) -> str:
    """SPEC §2 class table, first match wins."""
    for cls in CLASS_TABLE:
        if cls.kernel:
            if any(fnmatchcase(name, glob) for glob in cls.kernel):
                return cls.name
        elif not cls.rotational or rotational:
            return cls.name
    raise AssertionError("CLASS_TABLE ends with a class that matches everything")


def dm_type_of(uuid: str | None) -> str | None:
    if not uuid:
        return None
    for prefix, kind in DM_UUID_PREFIXES:
        if uuid.startswith(prefix):
            return kind
    return None


def bus_of_path(path: str) -> str | None:
    """The bus a device hangs off, from its sysfs path (relative to the sysfs root)."""
    for fragment, bus in BUS_BY_PATH:
        if fragment in path:
            return bus
    return None
