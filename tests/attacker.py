"""A hostile local user for the root tests: races driven by inotify, run as `nobody`.

`start(mode, ...)` runs SCRIPT as nobody (setpriv); it watches a directory and,
on each IN_OPEN root causes there, changes the files it owns between root's
check and root's open:

- ``flip DIR TRIGGER NAME TARGET``: when TRIGGER in DIR is opened, NAME is
  swapped between a regular file and a link to TARGET, back and forth, for a while;
- ``pipe DIR NAME``: NAME in DIR is swapped between a regular file (DIR/.NAME.real) and a named pipe, back and
  forth, without pause, until stopped (root's look and open raise no inotify event to wait for);
- ``swap DIR SUBDIR TRAP``: when a file in DIR is opened, SUBDIR (a directory of
  the list) is renamed aside and replaced by a link to TRAP (a directory of
  nobody's that holds named pipes under the listed names); it re-arms when the
  test puts SUBDIR back.

`Opens` is the test's own inotify watch: any open in the trap is the attacker's success.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import struct
import subprocess
from pathlib import Path

NOBODY_UID = 65534  # nobody, and nogroup: the ids the tests chown what the attacker owns to

IN_OPEN = 0x20

SCRIPT = r'''
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mode, watch = sys.argv[1], sys.argv[2]
fd = libc.inotify_init1(0)
if fd < 0 or libc.inotify_add_watch(fd, watch.encode(), 0x20) < 0:
    sys.exit("inotify: " + os.strerror(ctypes.get_errno()))
print("ready", flush=True)
flips = 0
while mode == "pipe":  # no event to wait for: root's look (lstat) and its open are not seen by inotify
    name = os.path.join(watch, sys.argv[3])
    tmp, real = os.path.join(watch, ".tmp"), os.path.join(watch, "." + sys.argv[3] + ".real")
    os.mkfifo(tmp); os.rename(tmp, name)
    os.link(real, tmp); os.rename(tmp, name)
while True:
    buf = os.read(fd, 65536)
    names, off = [], 0
    while off < len(buf):
        _, _, _, n = struct.unpack_from("iIII", buf, off)
        names.append(buf[off + 16:off + 16 + n].rstrip(b"\0").decode())
        off += 16 + n
    if mode == "flip":
        trigger, name, target = sys.argv[3:6]
        if trigger not in names:
            continue
        path, real = os.path.join(watch, name), os.path.join(watch, "." + name + ".real")
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            tmp = os.path.join(watch, ".tmp")
            os.symlink(target, tmp); os.rename(tmp, path)
            os.link(real, tmp); os.rename(tmp, path)
            flips += 1
    else:
        sub, trap = sys.argv[3:5]
        if os.path.islink(sub) or not names:
            continue
        os.rename(sub, sub + ".old"); os.symlink(trap, sub)
        flips += 1
    sys.stderr.write(f"flips {flips}\n")
'''


def start(base: Path, *argv: str) -> subprocess.Popen:
    """The attacker, as nobody, ready (its watch set) when this returns; stop it with `stop`."""
    script = base / "attacker.py"
    script.write_text(SCRIPT)
    os.chmod(script, 0o644)
    proc = _as_nobody([str(script), *argv], stderr=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "the attacker did not start"
    return proc


def _as_nobody(argv: list[str], stderr: int) -> subprocess.Popen:
    """Debian's python3 (PATH may name root's, closed to nobody) running ARGV as nobody, in a session of its own.
    setpriv execs (the pid is the script's); runuser forked a child for its PAM session, so killing runuser left
    the script running as nobody, a loop on a CPU for the rest of the run (a CI run's VM tier shared its two CPUs
    with one)."""
    return subprocess.Popen(["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}", "--clear-groups", "--",
                             "/usr/bin/python3", *argv], stdout=subprocess.PIPE, stderr=stderr, text=True,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """The attacker and anything it started, ended (its whole session's process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


class Opens:
    """Root's own inotify watch on a directory: the names opened in it since the last `take`."""

    def __init__(self, directory: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or self.libc.inotify_add_watch(self.fd, str(directory).encode(), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), "inotify")

    def take(self) -> list[str]:
        names = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return names
            off = 0
            while off < len(buf):
                _, _, _, n = struct.unpack_from("iIII", buf, off)
                names.append(buf[off + 16:off + 16 + n].rstrip(b"\0").decode())
                off += 16 + n

    def close(self) -> None:
        os.close(self.fd)


EXCHANGE = r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (p.encode() for p in sys.argv[1:3])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
    sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
print("ready", flush=True)
while True:
    libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
'''


def start_exchange(base: Path, a: Path, b: Path) -> subprocess.Popen:
    """nobody exchanging the names `a` and `b` (renameat2 RENAME_EXCHANGE: both exist at every instant, each as
    the other's object half the time) as fast as it can, until `stop`. Running when this returns."""
    script = base / "exchange.py"
    script.write_text(EXCHANGE)
    os.chmod(script, 0o644)
    proc = _as_nobody([str(script), str(a), str(b)], stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr and proc.stderr.read()
    return proc
