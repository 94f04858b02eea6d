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
"""

from __future__ import annotations

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

    def print_table(self, device: str) -> PartedOutput:
        """The table of `device` (a /dev path). No table is not an error: `has_table` is False."""
        if self.json:
            done = self._run([*READ_ONLY, "parted", "-j", "-s", device, "unit", "s", "print"],
                             timeout=self.timeout, check=False)
            if done.returncode != 0 and _unknown_option(done.stderr):
                self.json = False  # parted before 3.5
            else:
                return self._result(JSON, device, done)
        done = self._run([*READ_ONLY, "parted", "-m", "-s", device, "unit", "s", "print"], timeout=self.timeout, check=False)
        return self._result(MACHINE, device, done)

    def _result(self, fmt: str, device: str, done: runner.Completed) -> PartedOutput:
        # parted's warning that it opened the disk read-only is the point, not news (see the module doc)
        err = " ".join(line.strip() for line in done.stderr.splitlines()
                       if line.strip() and not line.startswith("Warning: Unable to open"))
        if done.returncode == 0:
            return PartedOutput(fmt, done.stdout, True)
        low = err.lower()
        if err.startswith("setpriv:"):
            raise NotPermitted(f"cannot run parted read-only for {device}: {err}",
                               hint="align runs parted as an unprivileged user with read access only "
                                    "(setpriv, CAP_DAC_READ_SEARCH) so that it flushes no buffers and opens "
                                    "nothing for writing; run as root, in a container with CAP_SETUID, "
                                    "CAP_SETGID and CAP_SETPCAP")
        if "unrecognised disk label" in low or "unrecognized disk label" in low:
            return PartedOutput(fmt, done.stdout, False)
        if "permission denied" in low or "operation not permitted" in low:
            raise NotPermitted(f"parted cannot open {device}: {_strip_prefix(err)}",
                               hint="run as root: parted opens the device to read its partition table "
                                    "(in a container the device may be off limits even to root)")
        if "could not stat device" in low or "no such file or directory" in low:
            raise UsageError(f"parted: no block device {device}",
                             hint="is the device node there? (a --sysfs-root tree describes devices "
                                  "this machine may not have)")
        raise PartedError(f"parted cannot read {device}: {_strip_prefix(err) or f'exit {done.returncode}'}")


def _unknown_option(stderr: str) -> bool:
    return "invalid option" in stderr or "unrecognized option" in stderr


def _strip_prefix(text: str) -> str:
    return text[len("Error: "):] if text.startswith("Error: ") else text
