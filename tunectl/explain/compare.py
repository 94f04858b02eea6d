"""`--compare OTHER`: the same cold read of another file, and the ratio per layer. Pure."""

from __future__ import annotations

from tunectl.explain.model import ColdRead
from tunectl.record import record


@record(frozen=True)
class LayerRatio:
    device: str
    kind: str
    reads: int
    read_ms: int
    share: float  # of the summed request time of every layer of the target

    def to_json(self) -> dict:
        return {"device": self.device, "kind": self.kind, "reads": self.reads, "read_ms": self.read_ms,
                "share": round(self.share, 3)}


@record(frozen=True)
class Comparison:
    target_mb_s: float
    other_mb_s: float
    other: str
    layers: tuple[LayerRatio, ...]
    disk_reads_ratio: float | None  # requests at the bottom, target over other, per byte read
    disk_request_kib: tuple[float, float]  # average request at the bottom: target, other
    largest: str  # the layer that contributes most: its name and why

    @property
    def ratio(self) -> float:
        """How many times slower the target read than the other (other MB/s over target MB/s)."""
        return self.other_mb_s / self.target_mb_s if self.target_mb_s else 0.0

    def verdict(self) -> str:
        """The ratio in words, the right way round: "3.10x slower here", "2.00x faster here"."""
        if not self.target_mb_s or not self.other_mb_s:
            return "no ratio: a read too short to time (a larger file, or a larger --size, gives one)"
        if self.ratio >= 1:
            return f"{self.ratio:.2f}x slower here"
        return f"{1 / self.ratio:.2f}x faster here"

    def to_json(self) -> dict:
        return {"other": self.other, "target_mb_s": round(self.target_mb_s, 1), "other_mb_s": round(self.other_mb_s, 1),
                "ratio": round(self.ratio, 2), "disk_reads_ratio": None if self.disk_reads_ratio is None
                else round(self.disk_reads_ratio, 2), "disk_request_kib": [round(x, 1) for x in self.disk_request_kib],
                "layers": [la.to_json() for la in self.layers], "largest": self.largest}


def compare(target: ColdRead, kinds: dict[str, str], disk: str, other: ColdRead, other_disk: str) -> Comparison:
    """`kinds`: the target's block devices -> layer kind; `disk`/`other_disk`: the bottom of each stack."""
    total = sum(d.read_ms for d in target.devices) or 1
    layers = tuple(LayerRatio(d.device, kinds.get(d.device, "?"), d.reads, d.read_ms, d.read_ms / total)
                   for d in target.devices)
    mine, theirs = target.of(disk), other.of(other_disk)
    reads_ratio = None
    kib = (0.0, 0.0)
    if mine is not None and theirs is not None:
        kib = (mine.avg_request_kib, theirs.avg_request_kib)
        if theirs.reads and target.bytes and other.bytes:
            reads_ratio = (mine.reads / target.bytes) / (theirs.reads / other.bytes)
    if reads_ratio is not None and reads_ratio >= 1.5:
        largest = (f"{disk}: {reads_ratio:.1f}x the requests per byte read ({kib[0]:.1f} KiB against "
                   f"{kib[1]:.1f} KiB on average)")
    else:
        top = max(layers, key=lambda la: la.share) if layers else None
        largest = f"{top.device} ({top.kind}): {top.share * 100:.0f}% of the request time" if top else "none"
    return Comparison(target.mb_s, other.mb_s, other.path, layers, reads_ratio, kib, largest)
