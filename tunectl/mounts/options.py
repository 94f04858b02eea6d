"""Mount options as sets with values, and what the kernel and libmount know about them.

Pure: option lists in, option lists and typed skips out. A list keeps the
user's tokens and order (``defaults,noatime``); comparisons are by name and
value, so ``noatime,defaults`` equals ``defaults,noatime``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tunectl.record import field, record
from tunectl.system.mountinfo import split_options as split

__all__ = ["split"]  # options fields are split as mountinfo's are

# Atime modes: exactly one is in force. mountinfo shows noatime or relatime, and
# nothing for strictatime; "atime" only clears noatime (the kernel default then applies).
ATIME_MODES = ("noatime", "relatime", "strictatime")

# option -> options it replaces when added (both directions are listed where they hold).
CONFLICTS: dict[str, frozenset[str]] = {
    "noatime": frozenset({"atime", "relatime", "strictatime", "norelatime", "nostrictatime"}),
    "relatime": frozenset({"noatime", "strictatime", "norelatime"}),
    "strictatime": frozenset({"noatime", "relatime", "nostrictatime"}),
    "atime": frozenset({"noatime"}),
    "ro": frozenset({"rw"}),
    "rw": frozenset({"ro"}),
    "sync": frozenset({"async"}),
    "async": frozenset({"sync"}),
}
# Options that come in X / noX pairs: adding one removes the other.
NEGATABLE = ("discard", "lazytime", "diratime", "dev", "suid", "exec", "user_xattr", "acl", "barrier",
             "iversion", "auto", "user", "users", "mand", "dirsync")

# noatime makes nodiratime redundant: a fix that brings in noatime drops it.
REDUNDANT_WITH = {"noatime": frozenset({"nodiratime"})}

# Options that only libmount/mount(8)/systemd read: never in mountinfo, never drift live.
USERSPACE = frozenset({"defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail",
                       "_netdev", "bind", "rbind", "loop", "comment", "x-", "X-", "offset", "sizelimit",
                       "encryption", "pri", "sw"})

# Per-mount (VFS) flags: shown in the first option field of mountinfo and replaced as a
# whole by a classic remount, so a remount passes all of them explicitly.
VFS_FLAGS = ("ro", "rw", "nosuid", "nodev", "noexec", "noatime", "relatime", "nodiratime", "nosymfollow")
# Superblock flags shown after the "-" of mountinfo: a remount that does not name them clears
# them (ext4 on 6.18: `remount,commit=30` after `remount,lazytime` drops lazytime), so they are
# passed again. Filesystem-specific options (commit=, inode64, ...) persist by themselves.
SB_FLAGS = ("lazytime", "sync", "dirsync", "mand")

# A live option shown by its absence: the option holds when none of these is in mountinfo.
SHOWN_AS_ABSENCE: dict[str, tuple[str, ...]] = {
    "strictatime": ("noatime", "relatime"),
    "atime": ("noatime",),
    "diratime": ("nodiratime",),
    "nodiscard": ("discard",),
    "nolazytime": ("lazytime",),
    "dev": ("nodev",),
    "suid": ("nosuid",),
    "exec": ("noexec",),
    "async": ("sync",),
}

# Filesystems that accept the discard option (kernel and swapon(8)); vfat, exfat and ntfs3
# do have it on Linux, whatever folklore says.
DISCARD_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "exfat", "ntfs3", "jfs", "gfs2",
                             "nilfs2", "ocfs2", "swap", "bcachefs"})
# Filesystems known not to have it: asking for discard there is a typed skip.
NO_DISCARD_FSTYPES = frozenset({"iso9660", "squashfs", "erofs", "udf", "tmpfs", "ramfs", "nfs", "nfs4", "cifs",
                                "smb3", "fuse", "fuseblk", "overlay", "reiserfs", "hfsplus", "ntfs", "msdos",
                                "zfs", "9p", "virtiofs"})
# Filesystem-specific options: name -> filesystems that know it (others get a typed skip).
FS_SPECIFIC: dict[str, frozenset[str]] = {
    "commit": frozenset({"ext3", "ext4", "btrfs", "f2fs"}),
    "data": frozenset({"ext3", "ext4"}),
    "barrier": frozenset({"ext3", "ext4", "gfs2"}),
    "nobarrier": frozenset({"ext3", "ext4", "gfs2"}),
    "errors": frozenset({"ext2", "ext3", "ext4", "ntfs3", "exfat", "f2fs"}),
    "journal_async_commit": frozenset({"ext4"}),
    "inode64": frozenset({"xfs"}),
    "inode32": frozenset({"xfs"}),
    "logbufs": frozenset({"xfs"}),
    "logbsize": frozenset({"xfs"}),
    "largeio": frozenset({"xfs"}),
    "compress": frozenset({"btrfs"}),
    "compress-force": frozenset({"btrfs"}),
    "space_cache": frozenset({"btrfs"}),
    "ssd": frozenset({"btrfs"}),
    "autodefrag": frozenset({"btrfs"}),
}
# Filesystems that live on a block device; others (nfs, tmpfs, ...) are left alone
# unless a rule names their fstype.
NON_BLOCK_FSTYPES = frozenset({"nfs", "nfs4", "cifs", "smb3", "tmpfs", "ramfs", "proc", "sysfs", "devtmpfs", "devpts",
                               "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs", "configfs", "fusectl",
                               "mqueue", "hugetlbfs", "pstore", "bpf", "efivarfs", "autofs", "binfmt_misc", "overlay",
                               "9p", "virtiofs", "fuse", "nsfs", "rpc_pipefs", "sshfs", "fuse.sshfs", "none", "swap"})


def join(tokens: Sequence[str]) -> str:
    return ",".join(tokens) if tokens else "defaults"


def name_of(token: str) -> str:
    return token.split("=", 1)[0]


def _opposite(name: str) -> str | None:
    if name.startswith("no") and name[2:] in NEGATABLE:
        return name[2:]
    if name in NEGATABLE:
        return "no" + name
    return None


def replaced_by(token: str) -> frozenset[str]:
    """Names an option replaces when it is added."""
    name = name_of(token)
    out = set(CONFLICTS.get(name, ())) | set(REDUNDANT_WITH.get(name, ()))
    opposite = _opposite(name)
    if opposite:
        out.add(opposite)
    return frozenset(out)


def is_userspace(token: str) -> bool:
    name = name_of(token)
    return name in USERSPACE or name.startswith(("x-", "X-"))


def as_set(tokens: Iterable[str]) -> frozenset[tuple[str, str | None]]:
    """Options compared by name and value: ``commit=5`` differs from ``commit=60``."""
    return frozenset((name_of(t), t.split("=", 1)[1] if "=" in t else None) for t in tokens)


def has(tokens: Sequence[str], token: str, live: bool = False) -> bool:
    """Whether `token` holds in `tokens`; with `live`, as mountinfo shows (absence for some)."""
    if live and token in SHOWN_AS_ABSENCE:
        return not any(t in tokens for t in SHOWN_AS_ABSENCE[token])
    name = name_of(token)
    if "=" in token:
        return token in tokens
    return any(name_of(t) == name and "=" not in t for t in tokens)


def lacks(tokens: Sequence[str], name: str) -> bool:
    return not any(name_of(t) == name for t in tokens)


@record(frozen=True)
class Skip:
    option: str
    reason: str

    def to_json(self) -> dict:
        return {"option": self.option, "reason": self.reason}


@record
class Want:
    """What the rules ask of one filesystem: options present, option names absent, and skips."""

    present: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # option -> mounts[i]
    discard: str | None = None  # the discard mode in force (online | periodic | off)

    def add(self, token: str, source: str) -> None:
        gone = replaced_by(token)
        self.present = [t for t in self.present if name_of(t) != name_of(token) and name_of(t) not in gone]
        self.absent = [n for n in self.absent if n != name_of(token)]
        self.present.append(token)
        self.sources[name_of(token)] = source

    def remove(self, name: str, source: str) -> None:
        self.present = [t for t in self.present if name_of(t) != name]
        if name not in self.absent:
            self.absent.append(name)
        self.sources[name] = source

    def skip(self, option: str, reason: str) -> None:
        self.present = [t for t in self.present if name_of(t) != name_of(option)]
        self.skipped = [s for s in self.skipped if s.option != option] + [Skip(option, reason)]


def fstype_knows(fstype: str | None, token: str) -> str | None:
    """None when `fstype` accepts the option, else the reason it is skipped."""
    name = name_of(token)
    base = name[2:] if name.startswith("no") and name[2:] in ("discard", "barrier") else name
    if base == "discard":
        if fstype in DISCARD_FSTYPES:
            return None
        if fstype in NO_DISCARD_FSTYPES:
            return f"{fstype} has no discard option"
        return f"tunectl does not know whether {fstype or 'this filesystem'} accepts discard"
    owners = FS_SPECIFIC.get(name)
    if owners is not None and fstype not in owners:
        return f"{name} is an option of {', '.join(sorted(owners))}, not of {fstype or 'this filesystem'}"
    return None


def want_from_rules(rules: Sequence[tuple[int, dict]], fstype: str | None, cannot_discard: str | None) -> Want:
    """The options `rules` (index, mounts entry) ask for, in file order, later winning.

    `cannot_discard` names why online discard is impossible (a device below
    without discard support), or is None when every device below can discard.
    """
    want = Want()
    for index, rule in rules:
        source = f"mounts[{index}]"
        for token in rule.get("options") or []:
            if name_of(token) == "discard":
                want.discard = "online"
                want.sources["discard"] = source
                continue
            reason = fstype_knows(fstype, token)
            if reason:
                want.skip(token, reason)
            else:
                want.add(token, source)
        if rule.get("discard"):
            want.discard = rule["discard"]
            want.sources["discard"] = source
    if want.discard == "online":
        reason = fstype_knows(fstype, "discard") or cannot_discard
        if reason:
            want.skip("discard", reason)
        else:
            want.add("discard", want.sources["discard"])
    elif want.discard in ("periodic", "off"):
        want.remove("discard", want.sources["discard"])
    if "noatime" in want.present:  # nodiratime adds nothing to noatime
        want.present = [t for t in want.present if t != "nodiratime"]
    return want


def edit(tokens: Sequence[str], want: Want) -> list[str]:
    """`tokens` changed to satisfy `want`: existing order kept, a replaced option changed in
    place, new options appended, unwanted ones dropped."""
    out = list(tokens)
    for token in want.present:
        if has(out, token):
            continue
        name = name_of(token)
        gone = replaced_by(token) | {name}
        spots = [i for i, t in enumerate(out) if name_of(t) in gone]
        if spots:
            out[spots[0]] = token
            out = [t for i, t in enumerate(out) if i not in spots[1:]]
        else:
            out.append(token)
    out = [t for t in out if name_of(t) not in want.absent]
    return out


def drift(tokens: Sequence[str], want: Want, live: bool = False) -> list[tuple[str, str]]:
    """(change, option) pairs: ("add", "noatime"), ("remove", "discard"). Live ignores userspace options."""
    out = []
    for token in want.present:
        if live and is_userspace(token):
            continue
        if not has(tokens, token, live):
            out.append(("add", token))
    for name in want.absent:
        if not lacks(tokens, name):
            out.append(("remove", name))
    return out


def atime_mode(tokens: Sequence[str]) -> str:
    """The atime mode mountinfo's per-mount flags show."""
    if "noatime" in tokens:
        return "noatime"
    if "relatime" in tokens:
        return "relatime"
    return "strictatime"


def remount_options(live: Sequence[str], want: Want) -> list[str]:
    """Options for ``mount -o remount,...``: every per-mount flag, explicitly, with the wanted changes.

    A remount replaces the per-mount flags as a whole, and ``remount,relatime``
    after ``noatime`` does nothing unless the atime flags are spelt out.
    """
    flags = [t for t in live if name_of(t) in VFS_FLAGS or name_of(t) in SB_FLAGS]
    mode = atime_mode(flags)
    flags = [t for t in flags if t not in ATIME_MODES]
    extra: list[str] = []
    for token in want.present:
        if is_userspace(token):
            continue
        if token in ATIME_MODES or token == "atime":
            mode = "relatime" if token == "atime" and mode == "noatime" else token if token != "atime" else mode
            continue
        gone = replaced_by(token)
        flags = [t for t in flags if name_of(t) not in gone]
        if token not in flags:
            (flags if token in VFS_FLAGS else extra).append(token)
    if mode == "noatime":
        flags = [t for t in flags if t != "nodiratime"]
    for name in want.absent:
        flags = [t for t in flags if name_of(t) != name]
        opposite = _opposite(name)
        if opposite and opposite not in extra:
            extra.append(opposite)
    return flags + [mode] + extra
