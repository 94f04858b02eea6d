"""The one verdict vocabulary: every setting, outcome, hot-plug event, mount, partition and remount is judged in
these words, and a table's colour is chosen from the verdict (never from the text of a cell).

The values are the words `--json` documents carry; a Verdict is a str, so it compares, hashes and serialises as
its word. Where a document's schema spells a verdict otherwise (`udev monitor`: "in-sync"), `word(document)` says
so: the one place the two vocabularies meet.
"""

from __future__ import annotations

from tunectl.named import Member, Named


class Verdict(Member, str, metaclass=Named):
    # a planned setting
    CHANGE = "change"  # differs; apply writes it
    IN_SYNC = "ok"  # already as wanted (kernel rounding allowed); an event, a mount, a partition as wanted
    SKIP = "skip"  # does not apply to this device (typed reason)
    UNAVAILABLE = "unavailable"  # wanted but the device cannot do it (e.g. scheduler not offered)
    # an applied setting
    CHANGED = "changed"
    FAILED = "failed"
    NOT_PERMITTED = "not-permitted"
    # a hot-plug event as `udev monitor` saw it; a mount or device that differs from the profile
    DRIFT = "drift"
    NOT_TUNED = "not-tuned"  # the profile has no setting for this device
    VANISHED = "vanished"  # gone before it could be planned (a quick add/remove)
    # a partition whose start is off the grain (`align`)
    MISALIGNED = "misaligned"
    # a file of a preload list. Passed over (collect, replay, show): VANISHED (gone: expected), CHANGED (not the
    # file the list names: expected; the word apply uses for a setting it wrote), UNREADABLE (a partial failure).
    # Its page cache (show): RESIDENT, PARTIAL, COLD, UNKNOWN (mincore cannot tell without root).
    UNREADABLE = "unreadable"
    RESIDENT = "resident"
    PARTIAL = "partial"
    COLD = "cold"
    UNKNOWN = "unknown"

    @property
    def colour(self) -> str | None:
        """Its colour in a table on a terminal: failures red, what differs yellow, the rest plain."""
        return _COLOURS.get(self)

    def word(self, document: str) -> str:
        """This verdict as the `tunectl-<document>` schema spells it."""
        return _WORDS.get((document, self), self.value)


_COLOURS = {Verdict.FAILED: "red", Verdict.NOT_PERMITTED: "red", Verdict.MISALIGNED: "red",
            Verdict.CHANGE: "yellow", Verdict.UNAVAILABLE: "yellow", Verdict.DRIFT: "yellow",
            Verdict.VANISHED: "yellow", Verdict.UNREADABLE: "red", Verdict.PARTIAL: "yellow", Verdict.COLD: "yellow"}
_WORDS = {("udev-monitor", Verdict.IN_SYNC): "in-sync"}

Status = Verdict  # the name tuning's code knows it by

# preload's sub-vocabularies: why a file was passed over, and how much of it is in the page cache
PRELOAD_SKIPS = (Verdict.VANISHED, Verdict.CHANGED, Verdict.UNREADABLE)
RESIDENCY = (Verdict.RESIDENT, Verdict.PARTIAL, Verdict.COLD, Verdict.UNKNOWN)


class Marked(str):
    """A table cell's text with the verdict it shows: the table colours it by the verdict (on a terminal)."""

    verdict: Verdict | None

    def __new__(cls, text: str, verdict: Verdict | None) -> Marked:
        cell = super().__new__(cls, text)
        cell.verdict = verdict
        return cell
