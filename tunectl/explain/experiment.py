"""`--try`: the investigation's experiments on scratch copies, never on the user's image.

The file is extracted from its squashfs image (unsquashfs), rebuilt at other
block sizes and compressors (mksquashfs) in a scratch directory beside the
image (same filesystem, same disk), each copy attached read-only with direct
I/O on and off (losetup), mounted read-only, and read cold like the target.
dm layers (verity, crypt) of the original are not rebuilt: every variant,
the "as is" one included, is squashfs on a loop device, so they compare
with each other; the cold read of the target itself is the stack as it is.
Everything made is removed at the end (also on errors and Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tunectl.context import Context
from tunectl.devices.stack import LoopLayer
from tunectl.errors import UsageError
from tunectl.explain.model import ColdRead, StackFacts

TRY_SIZES = (131072, 1048576)


@dataclass(frozen=True)
class Variant:
    block_size: int
    compressor: str
    direct_io: bool
    as_is: bool = False

    @property
    def label(self) -> str:
        size = f"{self.block_size // 1048576}M" if self.block_size >= 1048576 else f"{self.block_size // 1024}K"
        return f"-b {size} -comp {self.compressor}, dio {'on' if self.direct_io else 'off'}"


@dataclass(frozen=True)
class Result:
    variant: Variant
    cold: ColdRead
    disk: str

    @property
    def disk_reads(self) -> int:
        d = self.cold.of(self.disk)
        return d.reads if d else 0

    def to_json(self) -> dict:
        d = self.cold.of(self.disk)
        return {"block_size": self.variant.block_size, "compressor": self.variant.compressor,
                "direct_io": self.variant.direct_io, "as_is": self.variant.as_is, "label": self.variant.label,
                "mb_s": round(self.cold.mb_s, 1), "bytes": self.cold.bytes, "disk": self.disk,
                "disk_reads": self.disk_reads, "disk_avg_request_kib": round(d.avg_request_kib, 1) if d else 0.0,
                "disk_merged_share": round(d.merged_share, 4) if d else 0.0}


def variants(block: int, compressor: str, dio: bool, compressors: tuple[str, ...] | None = None) -> list[Variant]:
    """The image as it is, then bigger blocks with its compressor and `compressors` (default xz),
    each with direct I/O on and off."""
    out = [Variant(block, compressor, dio, as_is=True), Variant(block, compressor, not dio)]
    for size in TRY_SIZES:
        for comp in dict.fromkeys((compressor, *(compressors if compressors is not None else ("xz",)))):
            for direct in (dio, not dio):
                v = Variant(size, comp, direct)
                if (v.block_size, v.compressor) != (block, compressor) and v not in out:
                    out.append(v)
    return out


def data_loop(facts: StackFacts) -> LoopLayer | None:
    """The loop device that holds the filesystem's data: under dm-verity its data device (the hash tree
    may sit on another loop), else the first loop of the stack."""
    loops = facts.all("loop")
    for dm in facts.all("dm"):
        for t in dm.facts.dm_table:
            if t.devices:
                found = next((la for la in loops if la.device.devnum == t.devices[0]), None)
                if found is not None:
                    return found
    return loops[0] if loops else None


def source_image(facts: StackFacts) -> tuple[str, str]:
    """(the squashfs image or device, the file's path inside it); UsageError when the file is not on squashfs."""
    file, fs = facts.file, facts.filesystem
    if fs is None or fs.facts is None or fs.facts.squashfs is None or file is None:
        raise UsageError(f"--try: {facts.target} is not a file on a squashfs image",
                         hint="--try rebuilds squashfs images; name a file inside a mounted squashfs")
    loop = data_loop(facts)
    image = loop.facts.loop.backing_file if loop and loop.facts.loop and loop.facts.loop.backing_file else fs.source
    inside = os.path.relpath(os.path.realpath(file.path), os.path.realpath(fs.target))
    return image, inside


@contextlib.contextmanager
def scratch(beside: str) -> Iterator[str]:
    """A private directory beside the image (its filesystem, its disk); removed with everything in it."""
    parent = os.path.dirname(os.path.realpath(beside)) if os.path.isfile(beside) else tempfile.gettempdir()
    path = tempfile.mkdtemp(prefix=".tunectl-explain-", dir=parent)  # mode 0700 whatever the umask
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def attached(ctx: Context, image: str, dio: bool, mountpoint: str) -> Iterator[str]:
    """`image` on a new read-only loop device, mounted read-only at `mountpoint`: yields the loop's kernel name."""
    node = ctx.run(["losetup", "--find", "--show", "--read-only", f"--direct-io={'on' if dio else 'off'}", image],
                   timeout=30).stdout.strip()
    try:
        os.makedirs(mountpoint, mode=0o700, exist_ok=True)
        ctx.run(["mount", "-t", "squashfs", "-o", "ro,nodev,nosuid,noexec", node, mountpoint], timeout=30)
        try:
            yield os.path.basename(node)
        finally:
            ctx.run(["umount", mountpoint], timeout=60, check=False)
    finally:
        ctx.run(["losetup", "--detach", node], timeout=30, check=False)


def run(ctx: Context, facts: StackFacts, read: Callable[[str, list[str], list[str]], ColdRead],
        on_variant: Callable[[Variant], None] = lambda v: None,
        compressors: tuple[str, ...] | None = None) -> list[Result]:
    """Every variant measured cold. `read(path, block device names, extra files)` is the cold read."""
    image, inside = source_image(facts)
    sb = facts.filesystem.facts.squashfs
    loop = data_loop(facts)
    dio = bool(loop and loop.facts.loop and loop.facts.loop.direct_io)
    disks = [la.name for la in facts.disks]
    results: list[Result] = []
    with scratch(image) as work:
        src = os.path.join(work, "src")
        ctx.run(["unsquashfs", "-no-progress", "-quiet", "-d", src, image, inside], timeout=600)
        built: dict[tuple[int, str], str] = {}
        for v in variants(sb.block_size, sb.compressor, dio, compressors):
            on_variant(v)
            key = (v.block_size, v.compressor)
            if key not in built:
                out = os.path.join(work, f"{v.block_size}-{v.compressor}.sqfs")
                ctx.run(["mksquashfs", src, out, "-b", str(v.block_size), "-comp", v.compressor, "-noappend",
                         "-no-progress", "-quiet", "-processors", "1"], timeout=1800)
                built[key] = out
            mnt = os.path.join(work, "mnt")
            with attached(ctx, built[key], v.direct_io, mnt) as loop_name:
                cold = read(os.path.join(mnt, inside), [loop_name, *disks], [built[key]])
            results.append(Result(v, cold, disks[0] if disks else loop_name))
    return results
