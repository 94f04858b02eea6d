"""nbdkit plugin: a model disk (tests/vm/diskmodel.py) holding its data in a sparse image file.

    nbdkit --unix SOCK python tests/vm/nbdmodel.py file=IMAGE model=hdd-7200 [log=REQUESTS]

Runs on the host, outside the guest's emulated CPU, so the model's times are real time:
each request is timed by the model on arrival (one at a time: nbdkit serialises all
requests), served from the image, and answered no sooner than the model's completion
time (the plugin sleeps until then). `log`: one line per request, appended as it completes:
``arrival op offset length how start done replied`` (seconds on this host's monotonic clock,
op r/w/f, how as in diskmodel.Served; replied: when the plugin woke to answer, so replied - done
is the host's oversleep), so a test can show which requests the model saw.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import diskmodel  # noqa: E402
import nbdkit  # noqa: E402  (provided by nbdkit's python plugin)

API_VERSION = 2
CONFIG: dict[str, str] = {}
STATE: dict = {}


def config(key: str, value: str) -> None:
    if key not in ("file", "model", "log"):
        raise RuntimeError(f"nbdmodel: unknown parameter {key}= (file=, model=, log=)")
    CONFIG[key] = value


def config_complete() -> None:
    if "file" not in CONFIG or CONFIG.get("model") not in diskmodel.MODELS:
        raise RuntimeError(f"nbdmodel: need file=IMAGE and model= one of {', '.join(diskmodel.MODELS)}")


def thread_model() -> int:
    return nbdkit.THREAD_MODEL_SERIALIZE_ALL_REQUESTS


def get_ready() -> None:
    # The kernel's default 50 us timer slack would be added to every short sleep (a cached 4 KiB read is ~95 us).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK, 1 ns
    fd = os.open(CONFIG["file"], os.O_RDWR | os.O_NOFOLLOW)
    size = os.fstat(fd).st_size
    STATE.update(fd=fd, size=size, model=diskmodel.model(CONFIG["model"], size),
                 # open for nbdkit's lifetime: closed when the process ends
                 log=builtins.open(CONFIG["log"], "a", buffering=1) if "log" in CONFIG else None)  # noqa: SIM115


def open(readonly: bool) -> int:  # noqa: A001 (nbdkit's callback name)
    return 1


def get_size(h: int) -> int:
    return STATE["size"]


def is_rotational(h: int) -> bool:
    return isinstance(STATE["model"], diskmodel.Hdd)


def can_write(h: int) -> bool:
    return True


def can_flush(h: int) -> bool:
    return True


def can_multi_conn(h: int) -> bool:
    return False


def _finish(op: str, offset: int, length: int, arrival: float, served: diskmodel.Served) -> None:
    wait = served.done - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    log = STATE["log"]
    if log is not None:
        log.write(f"{arrival:.6f} {op} {offset} {length} {served.how} {served.start:.6f} {served.done:.6f} "
                  f"{time.monotonic():.6f}\n")


def pread(h: int, buf: bytearray, offset: int, flags: int) -> None:
    arrival = time.monotonic()
    served = STATE["model"].read(arrival, offset, len(buf))
    got = os.preadv(STATE["fd"], [buf], offset)
    if got < len(buf):
        buf[got:] = bytes(len(buf) - got)
    _finish("r", offset, len(buf), arrival, served)


def pwrite(h: int, buf: bytes, offset: int, flags: int) -> None:
    arrival = time.monotonic()
    served = STATE["model"].write(arrival, len(buf))
    os.pwrite(STATE["fd"], buf, offset)
    _finish("w", offset, len(buf), arrival, served)


def flush(h: int, flags: int) -> None:
    arrival = time.monotonic()
    _finish("f", 0, 0, arrival, STATE["model"].flush(arrival))
