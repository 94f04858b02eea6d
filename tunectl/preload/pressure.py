"""Stop when memory runs short (pure): a replay that evicts what the machine is using is worse than none.

/proc/pressure/memory's "some" line counts, in microseconds, the time at least
one task stalled waiting for memory. The guard compares that total between two
checks: a stall share above LIMIT of the elapsed time means reclaim is hurting
someone, and the replay stops queueing reads.
"""

from __future__ import annotations

from collections.abc import Callable

LIMIT = 0.10  # a tenth of the time some task waited on memory: stop


def some_total_us(text: str | None) -> int | None:
    """The "some ... total=N" microseconds of a /proc/pressure/memory text; None when absent (no PSI)."""
    for line in (text or "").splitlines():
        if line.startswith("some "):
            for field in line.split():
                if field.startswith("total="):
                    value = field[len("total="):]
                    return int(value) if value.isascii() and value.isdigit() else None  # "²" is a digit to isdigit
    return None


class PressureGuard:
    """`stop(now)` is true once the stall share since the previous check exceeds `limit`.

    `read` returns the pressure file's text (None where the kernel has no PSI: the guard never stops).
    """

    def __init__(self, read: Callable[[], str | None], now: float, limit: float = LIMIT) -> None:
        self.read, self.limit = read, limit
        self.last_us, self.last_at = some_total_us(read()), now
        self.share = 0.0  # the stall share at the last check

    def stop(self, now: float) -> bool:
        total = some_total_us(self.read())
        if total is None or self.last_us is None:
            return False
        elapsed_us = (now - self.last_at) * 1e6
        if elapsed_us <= 0:
            return False
        self.share = (total - self.last_us) / elapsed_us
        self.last_us, self.last_at = total, now
        return self.share > self.limit
