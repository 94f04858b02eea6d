"""The parted edge: one partition table read through parted's public CLI.

``parted -j -s DEV unit s print`` where parted knows ``-j`` (3.5+), else
``parted -m -s DEV unit s print``. Returns the text and which format it is in;
parsing is the pure core's business (tunectl/align/table.py). parted's errors
are turned into tunectl's once, here.

Read-only for real: libparted (3.5) flushes the disk's buffers (BLKFLSBUF) and
opens every partition node O_WRONLY to flush it too. The flush drops a mounted
file system's cached buffers, and closing a node opened for writing fires udev's
watch (a change event per partition). So parted runs under `setpriv` as uid/gid
65534 with no groups and only CAP_DAC_READ_SEARCH: it can open any device for
reading, every write-open fails with EACCES and BLKFLSBUF (CAP_SYS_ADMIN) is
refused; parted warns that it opened the disk read-only and prints the same
table. A read-only bind mount of /dev does not do this: a device node opens for
writing on a read-only mount. Where setpriv is refused, align says so and stops;
it never falls back to the writing way.

A device-mapper device (an LV, dm-crypt, dm-verity, a dmsetup map) is not given to
parted at all: libparted asks device-mapper for the map's type through
/dev/mapper/control, whose ioctls need CAP_SYS_ADMIN (the capability that would
also let it flush buffers), and without the answer it stops ("Unable to determine
the dm type", parted 3.5). blkid, under the same setpriv line, says whether the
device holds a partition table: none (the usual case) is what parted as root
answers, "unrecognised disk label"; a table on a dm device (a multipath map, a
kpartx'd image) cannot be read this way and is said so.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tunectl.errors import ExitCode, NotPermitted, TunectlError, UsageError
from tunectl.record import record
from tunectl.system import runner

JSON, MACHINE = "json", "machine"

# parted as nobody with read access only (see the module doc); `--` ends setpriv's options.
READ_ONLY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
             "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search", "--")


class PartedError(TunectlError):
    """parted could not read this device's partition table."""

    exit_code = ExitCode.USAGE
    code = "parted"


@record(frozen=True)
class PartedOutput:
    format: str  # JSON or MACHINE
    text: str  # empty when there is no partition table
    has_table: bool


class Parted:
    """Reads partition tables; remembers whether this parted understands ``-j``."""

    def __init__(self, run: Callable[..., runner.Completed] = runner.run, timeout: float = 60) -> None:
        self._run = run
        self.timeout = timeout
        self.json = True

    def print_table(self, device: str, mapped: bool = False) -> PartedOutput:
        """The table of `device` (a /dev path). No table is not an error: `has_table` is False.

        `mapped`: a device-mapper device, probed with blkid instead (see the module doc)."""
        if mapped:
            return self._mapped(device)
        if self.json:
            done = self._run([*READ_ONLY, "parted", "-j", "-s", device, "unit", "s", "print"],
                             timeout=self.timeout, check=False)
            if done.returncode != 0 and _unknown_option(done.stderr):
                self.json = False  # parted before 3.5
            else:
                return self._result(JSON, device, done)
        done = self._run([*READ_ONLY, "parted", "-m", "-s", device, "unit", "s", "print"], timeout=self.timeout, check=False)
        return self._result(MACHINE, device, done)

    def _mapped(self, device: str) -> PartedOutput:
        """No table on a device-mapper device, as parted as root would say; a table there is a PartedError."""
        if not os.path.exists(device):  # blkid -p is silent about a missing node (exit 2, as for "nothing found")
            raise _no_device(device)
        done = self._run([*READ_ONLY, "blkid", "-p", "-o", "export", device], timeout=self.timeout, check=False)
        err = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
        if err.startswith("setpriv:"):
            raise _refused(device, err)
        if err or done.returncode not in (0, 2):  # 2: nothing found
            if "permission denied" in err.lower():
                raise NotPermitted(f"blkid cannot open {device}: {err}",
                                   hint="run as root (in a container the device may be off limits even to root)")
            raise PartedError(f"blkid cannot read {device}: {err or f'exit {done.returncode}'}")
        found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        if not found.get("PTTYPE"):
            return PartedOutput(MACHINE, "", False)
        raise PartedError(f"cannot check alignment of {device}: it holds a {found['PTTYPE']} partition table, but "
                          "parted opens a device-mapper device only with CAP_SYS_ADMIN, which would also let it "
                          "flush the device's buffers; check the disk below it (a multipath map's paths carry "
                          "the same table), or run `parted DEV unit s print` as root yourself")

    def _result(self, fmt: str, device: str, done: runner.Completed) -> PartedOutput:
        # parted's warning that it opened the disk read-only is the point, not news (see the module doc)
        err = " ".join(line.strip() for line in done.stderr.splitlines()
                       if line.strip() and not line.startswith("Warning: Unable to open"))
        if done.returncode == 0:
            return PartedOutput(fmt, done.stdout, True)
        low = err.lower()
        if err.startswith("setpriv:"):
            raise _refused(device, err)
        if "unrecognised disk label" in low or "unrecognized disk label" in low:
            return PartedOutput(fmt, done.stdout, False)
        if "permission denied" in low or "operation not permitted" in low:
            raise NotPermitted(f"parted cannot open {device}: {_strip_prefix(err)}",
                               hint="run as root: parted opens the device to read its partition table "
                                    "(in a container the device may be off limits even to root)")
        if "could not stat device" in low or "no such file or directory" in low:
            raise _no_device(device)
        raise PartedError(f"parted cannot read {device}: {_strip_prefix(err) or f'exit {done.returncode}'}")


def _refused(device: str, err: str) -> NotPermitted:
    return NotPermitted(f"cannot run parted read-only for {device}: {err}",
                        hint="align runs parted as an unprivileged user with read access only "
                             "(setpriv, CAP_DAC_READ_SEARCH) so that it flushes no buffers and opens "
                             "nothing for writing; run as root, in a container with CAP_SETUID, "
                             "CAP_SETGID and CAP_SETPCAP")


def _no_device(device: str) -> UsageError:
    return UsageError(f"parted: no block device {device}",
                      hint="is the device node there? (a --sysfs-root tree describes devices this machine may not have)")


def _unknown_option(stderr: str) -> bool:
    return "invalid option" in stderr or "unrecognized option" in stderr


def _strip_prefix(text: str) -> str:
    return text[len("Error: "):] if text.startswith("Error: ") else text
