"""A preload list on disk: read one (with errors that say what to do) and write one atomically.

The format itself, text in and records out, is tunectl.preload.listing.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from pathlib import Path

from tunectl.errors import NotPermitted, UsageError
from tunectl.preload.listing import Entry, ListError, PreloadList, parse, render
from tunectl.preload.order import physical_order


def read_list(path: str) -> PreloadList:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        code = e.errno or errno.EIO
        if code in (errno.EACCES, errno.EPERM):
            raise NotPermitted(f"{path}: cannot read the preload list: {os.strerror(code)}",
                               hint="run as the user who wrote it, or as root") from None
        raise UsageError(f"{path}: cannot read the preload list: {os.strerror(code)}",
                         hint="make one with `tunectl preload collect PATHS -o LIST`") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ListError(f"{path}:{line}: not UTF-8 text") from None
    return parse(text, path)


def write_list(path: str, entries: Sequence[Entry]) -> None:
    from tunectl.system.state import atomic_write

    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    target = Path(path)
    try:
        # Written in the order a replay reads (its sort is then one pass over sorted keys); the
        # format does not depend on it: a replay sorts whatever order it is given.
        atomic_write(target, render(physical_order(entries), created).encode())
    except OSError as e:
        code = e.errno or errno.EIO
        cls = NotPermitted if code in (errno.EACCES, errno.EPERM, errno.EROFS) else UsageError
        raise cls(f"{path}: cannot write the preload list: {os.strerror(code)}") from None
