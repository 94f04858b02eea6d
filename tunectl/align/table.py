"""parted's view of a partition table, parsed from its output text (pure: no file, no process).

Two formats, both with ``unit s`` so every position is in logical sectors:
``parted -j`` (3.5+) prints JSON; ``parted -m`` prints ``field:field:...;`` lines
where parted escapes ``:`` and ``\\`` inside the device path, model and partition
names with a backslash. ``-m`` also lists free space (``N:start:end:size:free;``)
when asked; those lines are not partitions and are skipped.
"""

from __future__ import annotations

import json

from tunectl.errors import ExitCode, TunectlError
from tunectl.record import field, record

# parted's name for "no partition table here" and for a filesystem on the whole disk.
NO_TABLE_LABELS = ("unknown", "loop")


class ParseError(TunectlError):
    """parted printed something this parser does not understand."""

    exit_code = ExitCode.USAGE
    code = "partition-table"


@record(frozen=True)
class PartedPartition:
    number: int
    start: int  # logical sectors
    end: int
    size: int
    type: str = "primary"  # primary | logical | extended (msdos); gpt partitions are "primary"
    filesystem: str | None = None
    name: str | None = None
    flags: tuple[str, ...] = ()


@record(frozen=True)
class PartedDisk:
    path: str
    size: int  # logical sectors
    transport: str
    logical_sector_size: int
    physical_sector_size: int
    label: str  # gpt, msdos, ...; "unknown" (no table) or "loop" (filesystem on the whole disk)
    model: str = ""
    partitions: tuple[PartedPartition, ...] = field(default_factory=tuple)

    @property
    def has_table(self) -> bool:
        return self.label not in NO_TABLE_LABELS


def _sectors(text: object, what: str) -> int:
    value = str(text).strip()
    if not value.endswith("s") or not value[:-1].isdigit():
        raise ParseError(f"parted output: {what} {value!r} is not a sector count (expected e.g. '2048s')",
                         hint="tunectl runs parted with `unit s`; is this parted's output?")
    return int(value[:-1])


def _int(text: object, what: str) -> int:
    try:
        return int(str(text))
    except ValueError:
        raise ParseError(f"parted output: {what} {text!r} is not a number") from None


def parse_json(text: str) -> PartedDisk:
    """The document ``parted -j -s DEV unit s print`` writes."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ParseError(f"parted -j output is not JSON: {e}") from None
    disk = doc.get("disk") if isinstance(doc, dict) else None
    if not isinstance(disk, dict):
        raise ParseError("parted -j output has no \"disk\" object")
    parts = []
    for entry in disk.get("partitions") or []:
        if not isinstance(entry, dict) or entry.get("type") == "free":
            continue
        parts.append(PartedPartition(
            number=_int(entry.get("number"), "partition number"),
            start=_sectors(entry.get("start"), "partition start"),
            end=_sectors(entry.get("end"), "partition end"),
            size=_sectors(entry.get("size"), "partition size"),
            type=str(entry.get("type") or "primary"),
            filesystem=entry.get("filesystem") or None,
            name=entry.get("name") or None,
            flags=tuple(entry.get("flags") or ()),
        ))
    return PartedDisk(
        path=str(disk.get("path", "")),
        size=_sectors(disk.get("size", "0s"), "disk size"),
        transport=str(disk.get("transport", "")),
        logical_sector_size=_int(disk.get("logical-sector-size", 512), "logical sector size"),
        physical_sector_size=_int(disk.get("physical-sector-size", 512), "physical sector size"),
        label=str(disk.get("label", "unknown")),
        model=str(disk.get("model", "")),
        partitions=tuple(parts),
    )


def split_fields(line: str) -> list[str]:
    """One ``-m`` line without its final ``;``, split at unescaped ``:``; ``\\:`` and ``\\\\`` unescaped."""
    fields, current, i = [], [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            current.append(line[i + 1])
            i += 2
            continue
        if ch == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    fields.append("".join(current))
    return fields


def parse_machine(text: str) -> PartedDisk:
    """The lines ``parted -m -s DEV unit s print [free]`` writes."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() not in ("BYT;", "CHS;", "CYL;"):
        raise ParseError("parted -m output does not start with BYT;",
                         hint="tunectl runs `parted -m -s DEV unit s print`; is this parted's output?")
    if lines[0].strip() != "BYT;":
        raise ParseError(f"parted -m output is in {lines[0].strip()[:-1]} units, not sectors")
    if len(lines) < 2:
        raise ParseError("parted -m output has no disk line")
    disk_fields = split_fields(_strip_end(lines[1], 2))
    if len(disk_fields) < 7:
        raise ParseError(f"parted -m disk line 2 has {len(disk_fields)} fields, expected 7 or 8: {lines[1]!r}")
    path, size, transport, lss, pss, label, model = disk_fields[:7]
    parts = []
    for lineno, line in enumerate(lines[2:], 3):
        fields = split_fields(_strip_end(line, lineno))
        if len(fields) == 5 and fields[4] == "free":
            continue
        if len(fields) != 7:
            raise ParseError(f"parted -m line {lineno} has {len(fields)} fields, expected 7: {line!r}")
        number, start, end, psize, fs, name, flags = fields
        parts.append(PartedPartition(
            number=_int(number, f"line {lineno}: partition number"),
            start=_sectors(start, f"line {lineno}: partition start"),
            end=_sectors(end, f"line {lineno}: partition end"),
            size=_sectors(psize, f"line {lineno}: partition size"),
            filesystem=fs or None,
            name=name or None,
            flags=tuple(f.strip() for f in flags.split(",") if f.strip()),
        ))
    return PartedDisk(path=path, size=_sectors(size, "disk size"), transport=transport,
                      logical_sector_size=_int(lss, "logical sector size"),
                      physical_sector_size=_int(pss, "physical sector size"),
                      label=label, model=model, partitions=_msdos_types(label, parts))


def _strip_end(line: str, lineno: int) -> str:
    line = line.rstrip("\r\n")
    if not line.endswith(";"):
        raise ParseError(f"parted -m line {lineno} does not end with ';': {line!r}")
    return line[:-1]


def _msdos_types(label: str, parts: list[PartedPartition]) -> tuple[PartedPartition, ...]:
    """``-m`` has no type column. On msdos, numbers 5+ are logical, and the primary
    slot that contains them is the extended partition (an empty extended
    partition cannot be told from a primary one here; ``-j`` says which)."""
    if label != "msdos":
        return tuple(parts)
    logical = [p for p in parts if p.number >= 5]
    out = []
    for p in parts:
        if p.number >= 5:
            kind = "logical"
        elif any(p.start <= q.start and q.end <= p.end for q in logical):
            kind = "extended"
        else:
            kind = "primary"
        out.append(PartedPartition(p.number, p.start, p.end, p.size, kind, p.filesystem, p.name, p.flags))
    return tuple(out)
