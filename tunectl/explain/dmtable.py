"""Device-mapper tables as `dmsetup table` prints them: one target per line.

Documentation/admin-guide/device-mapper/{verity,dm-crypt,linear,striped}.rst.
A key in a crypt line is printed as `:LEN:logon:...` or as hex; it is never
kept. Pure: the caller runs `dmsetup table NAME` (or reads it recorded).
"""

from __future__ import annotations

from tunectl.record import field, record
from tunectl.units import counted


class BadTable(ValueError):
    """A line that is not a dm table line of the type it names."""


@record(frozen=True)
class Target:
    start: int  # sectors
    length: int
    type: str  # verity, crypt, linear, striped, ...
    devices: tuple[str, ...]  # maj:min (or a path) of the devices the target reads
    facts: dict = field(default_factory=dict)  # per type, see the parsers below

    def to_json(self) -> dict:
        return {"start": self.start, "length": self.length, "type": self.type, "devices": list(self.devices),
                **self.facts}


def _options(words: list[str]) -> list[str]:
    """`<#opt_params> <opt_params>...` (both optional at the end of a line)."""
    if not words:
        return []
    try:
        count = int(words[0])
    except ValueError:
        raise BadTable(f"expected the count of optional parameters, got {words[0]!r}") from None
    if count != len(words) - 1:
        raise BadTable(f"{counted(count, 'optional parameter')} announced, {len(words) - 1} given")
    return words[1:]


def _verity(args: list[str]) -> tuple[tuple[str, ...], dict]:
    # <version> <dev> <hash_dev> <data_block_size> <hash_block_size> <#blocks> <hash_start> <alg> <digest> <salt>
    if len(args) < 10:
        raise BadTable(f"verity needs 10 arguments, got {len(args)}")
    opts = _options(args[10:])
    return (args[1], args[2]), {
        "version": int(args[0]), "data_block_size": int(args[3]), "hash_block_size": int(args[4]),
        "data_blocks": int(args[5]), "hash_start": int(args[6]), "hash_algorithm": args[7],
        "salt": args[9],  # hex, or "-": none (not a secret: the hash tree's superblock keeps it too)
        "options": opts}


_CRYPT_FLAGS = ("allow_discards", "same_cpu_crypt", "submit_from_crypt_cpus", "no_read_workqueue",
                "no_write_workqueue", "iv_large_sectors")


def _crypt(args: list[str]) -> tuple[tuple[str, ...], dict]:
    # <cipher> <key> <iv_offset> <device> <offset> [<#opt_params> <opt_params>]
    if len(args) < 5:
        raise BadTable(f"crypt needs 5 arguments, got {len(args)}")
    opts = _options(args[5:])
    sector = next((int(o.split(":", 1)[1]) for o in opts if o.startswith("sector_size:")), 512)
    return (args[3],), {"cipher": args[0], "offset": int(args[4]), "sector_size": sector,
                        "flags": [o for o in opts if o in _CRYPT_FLAGS]}


def _linear(args: list[str]) -> tuple[tuple[str, ...], dict]:
    if len(args) != 2:
        raise BadTable(f"linear needs 2 arguments, got {len(args)}")
    return (args[0],), {"offset": int(args[1])}


def _striped(args: list[str]) -> tuple[tuple[str, ...], dict]:
    # <#stripes> <chunk_size> [<dev> <offset>]...
    if len(args) < 2:
        raise BadTable("striped needs the stripe count and chunk size")
    stripes, chunk = int(args[0]), int(args[1])
    pairs = args[2:]
    if len(pairs) != 2 * stripes:
        raise BadTable(f"{counted(stripes, 'stripe')} announced, {counted(len(pairs) // 2, 'device')} given")
    return tuple(pairs[0::2]), {"stripes": stripes, "chunk_sectors": chunk}


PARSERS = {"verity": _verity, "crypt": _crypt, "linear": _linear, "striped": _striped}


def parse_line(line: str) -> Target:
    words = line.split()
    if len(words) < 3:
        raise BadTable(f"not a dm table line: {line!r}")
    try:
        start, length = int(words[0]), int(words[1])
    except ValueError:
        raise BadTable(f"a dm table line starts with two sector counts: {line!r}") from None
    kind = words[2]
    parser = PARSERS.get(kind)
    if parser is None:
        return Target(start, length, kind, ())
    try:
        devices, facts = parser(words[3:])
    except ValueError as e:
        raise BadTable(f"{kind}: {e}") from None
    return Target(start, length, kind, devices, facts)


def parse(text: str) -> list[Target]:
    """Every target of one device's table, in order."""
    return [parse_line(line) for line in text.splitlines() if line.strip()]
