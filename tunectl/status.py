"""The one status vocabulary: every setting, outcome and hot-plug event is in one of these states.

The values are the words `--json` documents carry; a Status is a str, so it
compares, hashes and serialises as its word.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    # a planned setting
    CHANGE = "change"  # differs; apply writes it
    IN_SYNC = "ok"  # already as wanted (kernel rounding allowed)
    SKIP = "skip"  # does not apply to this device (typed reason)
    UNAVAILABLE = "unavailable"  # wanted but the device cannot do it (e.g. scheduler not offered)
    # an applied setting
    CHANGED = "changed"
    FAILED = "failed"
    NOT_PERMITTED = "not-permitted"
    # a hot-plug event as `udev monitor` saw it
    EVENT_IN_SYNC = "in-sync"
    DRIFT = "drift"
    NOT_TUNED = "not-tuned"  # the profile has no setting for this device
    VANISHED = "vanished"  # gone before it could be planned (a quick add/remove)

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
