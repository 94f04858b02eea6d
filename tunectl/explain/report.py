"""explain's result: the facts, the measurements, the findings; one JSON shape, one text rendering."""

from __future__ import annotations

from tunectl.devices import stack as stacks
from tunectl.explain.compare import Comparison
from tunectl.explain.experiment import Result
from tunectl.explain.model import BlockFacts, Case, FileFacts, FilesystemFacts, PartitionFacts, kind, layer_json
from tunectl.explain.rules import RULES, Finding
from tunectl.explain.trace import Timing
from tunectl.record import field, record
from tunectl.report import Report, shown


@record
class ExplainReport(Report):
    case: Case
    findings: list[Finding]
    comparison: Comparison | None = None
    experiments: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0  # an explanation, whatever it finds (a finding is advice, not a failure)

    def to_json(self) -> dict:
        stack = self.case.stack
        return {"target": stack.target, "kernel": stack.release,
                "layers": [layer_json(la) for la in stack.layers],
                "cold": self.case.cold.to_json() if self.case.cold else None,
                "trace": None if self.case.trace is None else [t.to_json() | {"device": name}
                                                               for name, t in self.case.trace.items()],
                "compare": self.comparison.to_json() if self.comparison else None,
                "findings": [f.to_json() for f in self.findings],
                "experiments": [r.to_json() for r in self.experiments],
                "rules": [r.to_json() for r in RULES], "notes": list(self.notes)}

    def print_text(self, out) -> None:
        """The stack top first, its owners, the cold read and trace, the findings with their changes, the trials."""
        stack = self.case.stack
        out.print(f"explain {shown(stack.target)} (kernel {stack.release})")
        out.print()
        out.print("stack, top first:")
        rows = [[kind(la), la.label + (f" ({la.device.cls})" if isinstance(la, stacks.DiskLayer) and la.device.cls
                                       else ""), describe(la)] for la in stack.layers]
        out.print(out.table(["LAYER", "NAME", "FACTS"], rows))
        owned = [(la.label, owners_line(la.facts)) for la in stack.layers
                 if isinstance(la.facts, BlockFacts) and la.facts.owners]
        if owned:
            out.print()
            out.print("who set the queue values:")
            for name, line in owned:
                out.say(f"  {name}: {line}")
        cold = self.case.cold
        if cold:
            out.print()
            out.print(f"cold read of {shown(cold.path)}: {_size(cold.bytes)} in {cold.seconds:.3f} s = "
                      f"{cold.mb_s:.1f} MB/s, read size {_size(cold.read_size)}")
            rows = [[d.device, str(d.reads), f"{d.merged_share * 100:.0f}%", f"{d.avg_request_kib:.1f}",
                     f"{d.read_await_ms:.2f}", f"{d.sectors_read * 512 / cold.seconds / 1e6:.1f}" if cold.seconds else "-"]
                    for d in cold.devices]
            out.print(out.table(["DEVICE", "READS", "MERGED", "AVG KiB", "AWAIT ms", "MB/s"], rows))
            if cold.kept:
                out.say(f"not dropped (not permitted to open): {', '.join(cold.kept)}: their cached pages may have served "
                        "part of the read")
        if self.case.trace is not None:
            out.print()
            out.print("trace (btt's figures per layer; Q: bios queued, D: requests issued, C: completed):")
            out.print(out.table(["DEVICE", "Q", "D", "C", "AVG KiB", "Q2C ms", "D2C ms", "Q2Q ms"],
                                _trace_rows(self.case.trace)))
        cmp = self.comparison
        if cmp:
            out.print()
            out.say(f"compared with {shown(cmp.other)}: {cmp.other_mb_s:.1f} MB/s against {cmp.target_mb_s:.1f} MB/s, "
                    f"{cmp.verdict()}; largest contributor: {cmp.largest}")
            rows = [[la.device, la.kind, str(la.reads), str(la.read_ms), f"{la.share * 100:.0f}%"] for la in cmp.layers]
            out.print(out.table(["DEVICE", "LAYER", "READS", "READ ms", "SHARE"], rows))
        out.print()
        if self.findings:
            out.print("findings, largest effect first (the cold read's expected speedup: measured by --try, "
                      "else estimated):")
            for i, f in enumerate(self.findings, 1):
                out.say(f"{i}. [{f.effect.value:.1f}x {f.effect.basis}] {f.rule} {f.title} ({f.layer})")
                for e in f.evidence:
                    out.say(f"   evidence: {shown(e)}")
                lines = f.change.text.splitlines()
                out.print(f"   change ({f.change.kind}): {lines[0]}")
                for line in lines[1:]:
                    out.print(f"     {line}")
        else:
            out.print("findings: none (no rule of the table fired on this stack)")
        if self.experiments:
            base = next((r for r in self.experiments if r.variant.as_is), self.experiments[0])
            out.print()
            through = ("squashfs on a scratch dm-verity over loop devices" if any(r.variant.verity for r in self.experiments)
                       else "squashfs on a loop device")
            out.print(f"experiments on scratch copies ({through}, each read cold):")
            rows = []
            for r in self.experiments:
                d = r.cold.of(r.disk)
                rows.append([r.variant.label + (" (as is)" if r.variant.as_is else ""), f"{r.cold.mb_s:.1f}",
                             f"{r.cold.mb_s / base.cold.mb_s:.2f}x" if base.cold.mb_s else "-", str(r.disk_reads),
                             f"{d.avg_request_kib:.1f}" if d else "-", f"{d.merged_share * 100:.0f}%" if d else "-"])
            out.print(out.table(["VARIANT", "MB/s", "SPEEDUP", "DISK READS", "AVG KiB", "MERGED"], rows))
        for note in self.notes:
            out.warn(f"tunectl explain: {note}")


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def _yes(b: bool | None) -> str:
    return "?" if b is None else "yes" if b else "no"


def describe(la: stacks.Layer) -> str:
    """One layer's facts as a line for people."""
    f = la.facts
    if isinstance(la, stacks.FileLayer):
        extents = f.extents if isinstance(f, FileFacts) else None
        return f"{_size(la.size)}, {'no FIEMAP' if extents is None else f'{extents} extent(s)'}"
    if isinstance(la, stacks.MountLayer):
        fs = f if isinstance(f, FilesystemFacts) else FilesystemFacts(None)
        text = f"{la.fstype} from {la.source}, block {fs.block_size}"
        if fs.squashfs:
            sb = fs.squashfs
            text += (f"; squashfs {sb.version}: block size {_size(sb.block_size)}, {sb.compressor}, "
                     f"flags {' '.join(sb.flags) or 'none'}")
        return text
    if isinstance(la, stacks.PartitionLayer):
        aligned = f.aligned_1mib if isinstance(f, PartitionFacts) else la.partition.start * 512 % (1 << 20) == 0
        return f"start sector {la.partition.start} ({'' if aligned else 'not '}1 MiB aligned)"
    if not isinstance(f, BlockFacts):
        return ""
    parts = []
    if f.loop:
        lp = f.loop
        parts.append(f"backing {lp.backing_file or 'none'} offset {lp.offset}, direct I/O {'on' if lp.direct_io else 'off'}"
                     + (f", backing read-ahead {lp.backing_read_ahead_kb} KiB ({lp.backing_device})"
                        if lp.backing_device else ""))
    if isinstance(la, stacks.DmLayer):
        parts.append(f"{la.subtype or 'dm'}")
        for t in f.dm_table:
            tf = t.facts
            if t.type == "verity":
                parts.append(f"verity data/hash blocks {tf['data_block_size']}/{tf['hash_block_size']}, "
                             f"{tf['hash_algorithm']}, options {' '.join(tf['options']) or 'none'}")
            elif t.type == "crypt":
                parts.append(f"crypt {tf['cipher']}, sector {tf['sector_size']}, flags {' '.join(tf['flags']) or 'none'}")
            elif t.type == "striped":
                parts.append(f"striped {tf['stripes']} x {tf['chunk_sectors'] // 2} KiB")
            else:
                parts.append(t.type)
    if f.md:
        parts.append(f"md {f.md.level}, chunk {f.md.chunk_kib} KiB")
    q = f.queue
    parts.append(f"scheduler {q.scheduler or 'none (bio-based)'}, read_ahead_kb {q.read_ahead_kb}, "
                 f"max_sectors_kb {q.max_sectors_kb}, rotational {_yes(q.rotational)}, "
                 f"nr_requests {q.nr_requests if q.nr_requests is not None else '-'}, "
                 f"queue depth {q.queue_depth if q.queue_depth is not None else '-'}, "
                 f"logical block {q.logical_block_size}")
    return "; ".join(parts)


def owners_line(facts: BlockFacts) -> str:
    groups: dict[str, list[str]] = {}
    for attr, owner in sorted(facts.owners.items()):
        groups.setdefault(owner.text(), []).append(attr)
    return "; ".join(f"{' '.join(attrs)}: {text}" for text, attrs in groups.items())


def _trace_rows(trace: dict[str, Timing]) -> list[list[str]]:
    def ms(v):
        return "-" if v is None else f"{v:.3f}"

    rows = []
    for name, t in trace.items():
        j = t.to_json()
        rows.append([name, str(t.queued), str(t.issued), str(t.completed), f"{t.avg_request_kib:.1f}",
                     ms(j["q2c_ms"]), ms(j["d2c_ms"]), ms(j["q2q_ms"])])
    return rows
