"""`--try`: the investigation's experiments on scratch copies, never on the user's image.

The file is extracted from its squashfs image (unsquashfs), rebuilt at other
block sizes and compressors (mksquashfs) in a scratch directory beside the
image (same filesystem, same disk), each copy attached read-only with direct
I/O on and off (losetup), mounted read-only, and read cold like the target.

When the image sits on dm-verity, each copy gets a verity hash tree of its own
(`veritysetup format` into a scratch hash file, with the hash algorithm, the
data and hash block sizes, the format version and the salt of the user's
table: a fresh random salt would hash other bytes than the user's), the
hash file on a loop device of its own, and a scratch verity device over both
(`veritysetup open`): the variants read through the same kind of stack as the
user's (the hash tree on its own loop device, as veritysetup lays it out for
a separate hash file). Without veritysetup the variants are plain squashfs
on a loop device, and the report says so. dm-crypt is never rebuilt.
Everything made (mounts, verity devices, loop devices, the scratch directory)
is removed on every exit: the end, an error, Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from tunectl.context import Context
from tunectl.devices.stack import LoopLayer
from tunectl.errors import UsageError
from tunectl.explain.model import ColdRead, StackFacts, Trial
from tunectl.record import record
from tunectl.system.interrupts import interrupts_deferred, sigterm_interrupts, undoing
from tunectl.system.trust import Untrusted, check_dir

TRY_SIZES = (131072, 1048576)
VERITYSETUP = "/usr/sbin/veritysetup"


@record(frozen=True)
class Verity:
    """The verity the user's image is read through, as its table says: what each scratch copy is built with."""

    hash_algorithm: str
    data_block_size: int
    hash_block_size: int
    version: int = 1
    salt: str = "-"  # hex as the table prints it; "-": no salt (veritysetup's own default is a random one)

    def format_args(self) -> list[str]:
        return [f"--hash={self.hash_algorithm}", f"--data-block-size={self.data_block_size}",
                f"--hash-block-size={self.hash_block_size}", f"--format={self.version}", f"--salt={self.salt}"]

    def to_json(self) -> dict:
        return {"hash_algorithm": self.hash_algorithm, "data_block_size": self.data_block_size,
                "hash_block_size": self.hash_block_size, "version": self.version, "salt": self.salt}


def user_verity(facts: StackFacts) -> Verity | None:
    """The verity target of the stack under the file (the first dm device with one), or None."""
    for dm in facts.all("dm"):
        t = dm.facts.target("verity") if dm.facts else None
        if t is not None:
            f = t.facts
            return Verity(f["hash_algorithm"], f["data_block_size"], f["hash_block_size"], f["version"], f["salt"])
    return None


def plan_verity(facts: StackFacts, veritysetup: str | None) -> tuple[Verity | None, str | None]:
    """(the verity each copy gets, a note for the report): None without verity under the file, and None with a
    note when the stack has verity but veritysetup (`veritysetup`: its path, None when absent) is not there."""
    verity = user_verity(facts)
    if verity is None:
        return None, None
    if veritysetup is None:
        return None, (f"--try: veritysetup not found ({VERITYSETUP}; Debian's cryptsetup-bin): the variants are "
                      "measured without dm-verity, which the file's stack has; compare them with each other, "
                      "not with the cold read")
    return verity, None


def header_field(output: str, name: str) -> str | None:
    """A field of the header `veritysetup format` prints ("Root hash:      0f3e...", "Salt:   -"), or None."""
    for line in output.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == name and value.strip():
            return value.strip()
    return None


def root_hash(output: str) -> str:
    """The root hash `veritysetup format` prints; ValueError when there is none."""
    found = header_field(output, "root hash")
    if found is None:
        raise ValueError("veritysetup format printed no root hash")
    return found


@record(frozen=True)
class Variant:
    block_size: int
    compressor: str
    direct_io: bool
    as_is: bool = False
    verity: Verity | None = None  # the copy is read through a scratch verity device built like this

    @property
    def label(self) -> str:
        size = f"{self.block_size // 1048576}M" if self.block_size >= 1048576 else f"{self.block_size // 1024}K"
        return (f"-b {size} -comp {self.compressor}, dio {'on' if self.direct_io else 'off'}"
                + (f", verity {self.verity.hash_algorithm}" if self.verity else ""))


@record(frozen=True)
class Result:
    variant: Variant
    cold: ColdRead
    disk: str

    @property
    def disk_reads(self) -> int:
        d = self.cold.of(self.disk)
        return d.reads if d else 0

    def trial(self) -> Trial:
        v = self.variant
        return Trial(v.block_size, v.compressor, v.direct_io, v.as_is, self.cold.mb_s, v.label)

    def to_json(self) -> dict:
        d = self.cold.of(self.disk)
        return {"block_size": self.variant.block_size, "compressor": self.variant.compressor,
                "direct_io": self.variant.direct_io, "as_is": self.variant.as_is, "label": self.variant.label,
                "verity": self.variant.verity.to_json() if self.variant.verity else None,
                "mb_s": round(self.cold.mb_s, 1), "bytes": self.cold.bytes, "disk": self.disk,
                "disk_reads": self.disk_reads, "disk_avg_request_kib": round(d.avg_request_kib, 1) if d else 0.0,
                "disk_merged_share": round(d.merged_share, 4) if d else 0.0}


def variants(block: int, compressor: str, dio: bool, compressors: tuple[str, ...] | None = None,
             verity: Verity | None = None) -> list[Variant]:
    """The image as it is, then bigger blocks with its compressor and `compressors` (default xz),
    each with direct I/O on and off; every one through `verity` when the image is read through one."""
    out = [Variant(block, compressor, dio, as_is=True, verity=verity), Variant(block, compressor, not dio, verity=verity)]
    for size in TRY_SIZES:
        for comp in dict.fromkeys((compressor, *(compressors if compressors is not None else ("xz",)))):
            for direct in (dio, not dio):
                v = Variant(size, comp, direct, verity=verity)
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
    # The path the resolver's walk reached (the one its mount was found from), never the name resolved again: a
    # swap in between (a link put on the way by whoever owns a directory on it) made `inside` climb out of the
    # image (../../x), and the cold read then opened that by name from the scratch mount.
    reached = file.reached or os.path.realpath(file.path)  # "": a fake tree's file, not walked
    inside = os.path.relpath(reached, fs.target)
    if inside == os.curdir or inside == os.pardir or inside.startswith(os.pardir + os.sep):
        raise UsageError(f"--try: {file.path} ({reached}) is not inside the squashfs mounted at {fs.target}",
                         hint="name the file by a path no other user can change; run again if it was moved meanwhile",
                         where=file.path)
    return image, inside


def image_bytes(facts: StackFacts, image: str) -> str:
    """What unsquashfs reads: the data loop's device node when a loop holds the image. Its bytes are the ones
    mounted, and /dev is root's; the backing file's path is a name its owner may point elsewhere once the
    loop holds the file open (a link to an image only root may read, extracted into reach)."""
    loop = data_loop(facts)
    return f"/dev/{loop.name}" if loop is not None else image


def scratch_parent(beside: str) -> tuple[str, str | None]:
    """Where the scratch copies go, and a note when it is not beside the image.

    Beside the image (its filesystem, its disk) only when every directory down to it is root's (or the
    user's) alone: mksquashfs, veritysetup and mount are handed paths below the scratch directory by name,
    and the owner of a directory above it can rename root's 0700 directory away (a rename in place asks no
    permission of the directory moved) and put a link in its place: root would then write and mount where
    that user points. Else the temporary directory, whose sticky bit forbids renaming root's entry."""
    if not os.path.isfile(beside):
        return tempfile.gettempdir(), None
    parent = os.path.dirname(os.path.realpath(beside))
    try:
        check_dir(parent)
    except (Untrusted, OSError) as e:
        tmp = tempfile.gettempdir()
        return tmp, f"scratch copies in {tmp}, not beside the image (so not on its disk): {e}"
    return parent, None


@contextlib.contextmanager
def scratch(parent: str) -> Iterator[str]:
    """A private directory in `parent` (see scratch_parent); removed with everything in it."""
    path = tempfile.mkdtemp(prefix=".tunectl-explain-", dir=parent)  # mode 0700 whatever the umask
    try:
        yield path
    finally:
        with interrupts_deferred():
            shutil.rmtree(path, ignore_errors=True)


def _loop(ctx: Context, stack: contextlib.ExitStack, image: str, dio: bool) -> str:
    """`image` on a new read-only loop device, detached when `stack` closes: its kernel name."""
    node = ctx.run(["losetup", "--find", "--show", "--read-only", f"--direct-io={'on' if dio else 'off'}", image],
                   timeout=30).stdout.strip()
    stack.callback(ctx.run, ["losetup", "--detach", node], timeout=30, check=False)
    return os.path.basename(node)


@record(frozen=True)
class HashTree:
    """A scratch copy's verity: its hash file, the root hash veritysetup printed, and how it was built."""

    path: str
    root: str
    verity: Verity


def format_verity(ctx: Context, veritysetup: str, image: str, hash_file: str, verity: Verity) -> HashTree:
    done = ctx.run([veritysetup, "format", *verity.format_args(), image, hash_file], timeout=600)
    try:
        tree = HashTree(hash_file, root_hash(done.stdout), verity)
    except ValueError:
        raise UsageError(f"--try: veritysetup format {image} printed no root hash",
                         hint="run it by hand to see why, or leave out --try") from None
    salt = header_field(done.stdout, "salt")
    if salt is not None and salt.lower() != verity.salt.lower():  # the copies must hash what the user's hashes
        raise UsageError(f"--try: veritysetup format {image} used the salt {salt}, not the table's {verity.salt}",
                         hint=f"a veritysetup that takes --salt ({veritysetup} --version), or leave out --try")
    return tree


@contextlib.contextmanager
def attached(ctx: Context, image: str, dio: bool, mountpoint: str, tree: HashTree | None = None,
             veritysetup: str = VERITYSETUP, dm_name: str = "") -> Iterator[list[str]]:
    """`image` on a new read-only loop device (and, with `tree`, a scratch verity device `dm_name` over it and
    its hash file's own loop device), mounted read-only at `mountpoint`. Yields the kernel names read through,
    top first. Each step's undoing is registered before the next step: whatever stops it (an error, Ctrl-C),
    what was made is unmade, last first (Ctrl-C, SIGTERM and SIGHUP held back till it is done, then acted on: one
    would stop it half way, and the run must still stop before the next variant)."""
    with undoing() as stack:
        data = _loop(ctx, stack, image, dio)
        names, source = [data], f"/dev/{data}"
        if tree is not None:
            hashes = _loop(ctx, stack, tree.path, dio)
            stack.callback(ctx.run, [veritysetup, "close", dm_name], timeout=60, check=False)
            ctx.run([veritysetup, "open", f"/dev/{data}", dm_name, f"/dev/{hashes}", tree.root], timeout=60)
            dm = ctx.run(["dmsetup", "info", "-c", "--noheadings", "-o", "blkdevname", "--", dm_name],
                         timeout=30).stdout.strip()
            names, source = [dm, data, hashes], f"/dev/mapper/{dm_name}"
        os.makedirs(mountpoint, mode=0o700, exist_ok=True)
        stack.callback(ctx.run, ["umount", mountpoint], timeout=60, check=False)
        ctx.run(["mount", "-t", "squashfs", "-o", "ro,nodev,nosuid,noexec", source, mountpoint], timeout=30)
        yield names


def run(ctx: Context, facts: StackFacts, read: Callable[[str, list[str], list[str]], ColdRead],
        on_variant: Callable[[Variant], None] = lambda v: None,
        compressors: tuple[str, ...] | None = None,
        veritysetup: str | None = VERITYSETUP) -> tuple[list[Result], list[str]]:
    """Every variant measured cold, and the notes for the report. `read(path, block device names, extra files)`
    is the cold read; `veritysetup`: its path (None: not installed)."""
    image, inside = source_image(facts)
    sb = facts.filesystem.facts.squashfs
    loop = data_loop(facts)
    dio = bool(loop and loop.facts.loop and loop.facts.loop.direct_io)
    disks = [la.name for la in facts.disks]
    verity, note = plan_verity(facts, veritysetup)
    parent, where = scratch_parent(image)
    results: list[Result] = []
    # SIGTERM (a service stop, `timeout`) ends the process without running any finally: here it raises, so the
    # mounts, verity devices, loop devices and scratch copies made so far are undone, as on Ctrl-C (exit 143).
    with sigterm_interrupts(), scratch(parent) as work:
        src = os.path.join(work, "src")
        ctx.run(["unsquashfs", "-no-progress", "-quiet", "-d", src, image_bytes(facts, image), inside], timeout=600)
        built: dict[tuple[int, str], tuple[str, HashTree | None]] = {}
        for i, v in enumerate(variants(sb.block_size, sb.compressor, dio, compressors, verity)):
            on_variant(v)
            key = (v.block_size, v.compressor)
            if key not in built:
                out = os.path.join(work, f"{v.block_size}-{v.compressor}.sqfs")
                ctx.run(["mksquashfs", src, out, "-b", str(v.block_size), "-comp", v.compressor, "-noappend",
                         "-no-progress", "-quiet", "-processors", "1"], timeout=1800)
                tree = (format_verity(ctx, veritysetup, out, out + ".verity", v.verity)
                        if v.verity and veritysetup else None)
                built[key] = (out, tree)
            out, tree = built[key]
            mnt = os.path.join(work, "mnt")
            with attached(ctx, out, v.direct_io, mnt, tree, veritysetup or VERITYSETUP,
                          f"tunectl-explain-{os.getpid()}-{i}") as names:
                cold = read(os.path.join(mnt, inside), [*names, *disks], [out, *([tree.path] if tree else [])])
            results.append(Result(v, cold, disks[0] if disks else names[-1]))
    return results, [n for n in (note, where) if n]


def find_veritysetup() -> str | None:
    """veritysetup's path: on PATH, else Debian's /usr/sbin (root's PATH may leave sbin out); None when absent."""
    return shutil.which("veritysetup") or (VERITYSETUP if os.access(VERITYSETUP, os.X_OK) else None)
