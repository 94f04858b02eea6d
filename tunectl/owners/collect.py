"""The OS edge of `tunectl.owners`: read the other writers' files under the configuration root, and the facts
of each device that decide which of them reach it and what the kernel's default would be.

Every path is under `Context.roots.config` (``/`` on the real machine, ``TUNECTL_CONFIG_ROOT`` for a tree
that describes another; none for a fake sysfs tree without it), the kernel command line under the proc root.
A link inside the configuration tree is resolved inside it (`trust.open_in_root`), an absolute one too, as udev
running in that tree would; a link to /dev/null masks a rules file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

from tunectl.attributes import KNOB_DEFAULTS, default_scheduler, derived_read_ahead_kb, read_ahead_generation
from tunectl.context import Context
from tunectl.devices.model import Device
from tunectl.errors import TunectlError
from tunectl.owners import sources
from tunectl.owners.model import KernelDefault
from tunectl.owners.sources import Assignment
from tunectl.owners.writers import Writer
from tunectl.record import field, record
from tunectl.system import trust
from tunectl.system.rulesfile import RULES_FILE

MAX_FILE = 4 << 20


@record
class Machine:
    """Every other writer found, in each service's order, and what could not be read."""

    assignments: list[tuple[int, Assignment]] = field(default_factory=list)  # (order in its service, line)
    rules_file: str | None = None  # tunectl's installed rules, as udev reads them
    rules_order: int | None = None
    unread: list[str] = field(default_factory=list)  # "path: why"
    tuned_profile: str | None = None


def _root(ctx: Context) -> str:
    assert ctx.roots is not None and ctx.roots.config is not None  # read_machine returns before, without one
    return ctx.roots.config


def _directory(root: str, directory: str) -> tuple[tuple[int, int], list[str], list[str]] | None:
    """The drop-in `directory` of the tree `root`, opened in it: its identity, its names in order and those masked
    (`_masks`: an empty file or a character device, a link to one too, as udev and systemd mask); None when it is
    not a directory there."""
    try:
        fd = trust.open_in_root(root, directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        names = sorted(os.listdir(fd))
        return (st.st_dev, st.st_ino), names, [n for n in names if _masked(root, f"{directory}/{n}", fd, n)]
    except OSError:
        return None
    finally:
        os.close(fd)


def _masks(st: os.stat_result) -> bool:
    """Whether udev and systemd take a drop-in of this stat (its link followed) as a mask: systemd's null_or_empty,
    an empty regular file or any character device (they compare no device numbers: /dev/null, a bind mount of it
    and systemd's "inaccessible" nodes all mask). A named pipe or a block device is no mask, though its size is 0:
    udev lists it as that name's file (its conf-files list filters no type) and opens it, so doctor does not pass
    over it but says it did not read it (`trust.read_in_root`: not a regular file, never opened)."""
    return (stat.S_ISREG(st.st_mode) and st.st_size == 0) or stat.S_ISCHR(st.st_mode)


def _masked(root: str, path: str, dir_fd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            if os.readlink(name, dir_fd=dir_fd) == "/dev/null":
                return True
            fd = trust.open_in_root(root, path, os.O_PATH)  # a link to an empty file in the tree masks it too
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        return _masks(st)
    except OSError:
        return False


def _exists(root: str, path: str) -> bool:
    try:
        os.close(trust.open_in_root(root, path, os.O_PATH))
        return True
    except OSError:
        return False


def _read(read: Callable[[], bytes], shown: str, unread: list[str]) -> str | None:
    try:
        raw = read()
    except (OSError, trust.Untrusted) as e:
        if not (isinstance(e, OSError) and e.errno == 2):
            unread.append(f"{shown}: {e.found if isinstance(e, trust.Untrusted) else e.strerror or e}")
        return None
    except trust.TooLarge:  # its first MAX_FILE bytes alone would hide a writer past them and cut a value mid-line
        unread.append(f"{shown}: larger than {MAX_FILE} bytes")
        return None
    return raw.decode("utf-8", errors="replace")


def _read_config(ctx: Context, path: str, unread: list[str]) -> str | None:
    """The file `path` of the configuration tree, its links (a vendor link to a file elsewhere) resolved in the
    tree: what udev or systemd running there would read, never this machine's file of that name."""
    return _read(lambda: trust.read_in_root(_root(ctx), path, MAX_FILE, whole=True), path, unread)


def _dropins(ctx: Context, dirs: Sequence[str], suffix: str, machine: Machine,
             parse: Callable[[str, str], list[Assignment]]) -> list[sources.RulesFile]:
    listings: dict[str, list[str]] = {}
    masked = []
    seen: set[tuple[int, int]] = set()
    for directory in dirs:
        found = _directory(_root(ctx), directory)
        if found is None or found[0] in seen:
            continue  # /lib -> /usr/lib on merged-/usr systems: one directory read once
        seen.add(found[0])
        listings[directory] = found[1]
        masked += [f"{directory}/{n}" for n in found[2]]
    files = sources.dropin_order(listings, dirs, suffix, masked)
    for order, f in enumerate(files):
        if f.masked:
            continue
        text = _read_config(ctx, f.path, machine.unread)
        if text is not None:
            machine.assignments += [(order, a) for a in parse(f.path, text)]
    return files


def read_machine(ctx: Context, rules_path: str | None = None) -> Machine:
    """Every writer of block queue attributes on this machine (`rules_path`: tunectl's installed rules file)."""
    machine = Machine()
    if ctx.roots is None or ctx.roots.config is None:
        return machine
    ours = os.path.basename(rules_path) if rules_path else RULES_FILE

    def udev(path: str, text: str) -> list[Assignment]:
        kind = "tunectl-rules" if os.path.basename(path) == ours else "udev-rule"
        return sources.parse_udev_rules(path, text, kind)

    files = _dropins(ctx, sources.UDEV_RULES_DIRS, ".rules", machine, udev)
    for order, f in enumerate(files):
        if f.name == ours and not f.masked:
            machine.rules_file, machine.rules_order = f.path, order
    _dropins(ctx, sources.TMPFILES_DIRS, ".conf", machine, sources.parse_tmpfiles)
    _sysfs_conf(ctx, machine)
    _tuned(ctx, machine)
    if ctx.roots.proc is not None:
        cmdline = os.path.join(ctx.roots.proc, "cmdline")
        text = _read(lambda: trust.read_regular(cmdline, MAX_FILE, whole=True), "/proc/cmdline", machine.unread)
        machine.assignments += [(0, a) for a in sources.parse_cmdline("/proc/cmdline", text or "")]
    return machine


def _sysfs_conf(ctx: Context, machine: Machine) -> None:
    paths = [sources.SYSFS_CONF]
    found = _directory(_root(ctx), sources.SYSFS_D)
    if found is not None:
        paths += [f"{sources.SYSFS_D}/{n}" for n in found[1] if n.endswith(".conf")]
    for order, path in enumerate(paths):
        text = _read_config(ctx, path, machine.unread)
        if text is not None:
            machine.assignments += [(order, a) for a in sources.parse_sysfs_conf(path, text)]


def _tuned(ctx: Context, machine: Machine) -> None:
    """tuned's active profile, read as `profile import-tuned` reads it: its disk and sysfs units become writers."""
    text = _read_config(ctx, sources.TUNED_ACTIVE, machine.unread)
    names = (text or "").split()
    if not names:
        return
    machine.tuned_profile = " ".join(names)
    from tunectl.profile.tuned_import import import_tuned
    from tunectl.profile.tuned_reader import TreeFiles

    running = _exists(_root(ctx), "/run/tuned/tuned.pid")
    files = TreeFiles(_root(ctx))  # the tree's directories and files, links resolved in it, as tuned there reads them
    dirs = [d for d in sources.TUNED_DIRS if files.is_dir(d)]
    for name in names:
        try:
            imported = import_tuned(name, dirs, files)
        except (TunectlError, OSError, trust.Untrusted) as e:  # one line: a TunectlError's hint is not shown here
            why = (e.strerror or str(e)) if isinstance(e, OSError) else e.message
            machine.unread.append(f"tuned profile {name}: {why}")
            continue
        machine.unread += [f"{found} (a [variables] include of tuned profile {name}: its variables stay undefined)"
                           for found in imported.unread]
        shown = imported.sources[-1] if imported.sources else sources.TUNED_ACTIVE  # the profile (last merged)
        note = f"tuned profile {name}" + ("" if running else " (tuned is not running now: it applies when it starts)")
        machine.assignments += [(0, a) for a in _tuned_assignments(imported.profile, shown, note)]


def _tuned_assignments(profile: dict, path: str, note: str) -> list[Assignment]:
    """The settings of an imported tuned profile as assignments: classes are matched later (ENV{TUNECTL_CLASS})."""
    out = []
    blocks = [((), ("CLASS", "==", cls), s) for cls, s in (profile.get("classes") or {}).items()]
    blocks += [((e["match"]["kernel"],), None, e) for e in profile.get("devices") or []]
    for kernels, need, settings in blocks:
        target = sources.Target(kernels, (need,) if need else ())
        for attr, value in _flat(settings):
            out.append(Assignment("tuned", attr, value, path, 0, target, sources.BOTH, note))
    return out


def _flat(settings: dict) -> list[tuple[str, str]]:
    out = []
    if "scheduler" in settings:
        first = settings["scheduler"]
        out.append(("scheduler", first[0] if isinstance(first, list) else str(first)))
    if "read_ahead_kb" in settings:
        out.append(("read_ahead_kb", str(settings["read_ahead_kb"])))
    out += [(f"iosched/{k}", str(v)) for k, v in (settings.get("iosched") or {}).items()]
    out += [(k, str(v)) for k, v in (settings.get("queue") or {}).items()]
    return out


def device_facts(ctx: Context, dev: Device) -> dict[str, str]:
    """What a rule may match on a disk: its kernel name, subsystem, type, class, queue attributes, udev properties."""
    facts = {"KERNEL": dev.name, "SUBSYSTEM": "block", "DEVTYPE": "disk", "CLASS": dev.cls}
    for attr in ("rotational", "scheduler", "logical_block_size"):
        value = ctx.sysfs.read_or(f"block/{dev.name}/queue/{attr}")
        if value is not None:
            facts[f"ATTR{{queue/{attr}}}"] = value.strip()
    for attr in ("removable", "size", "ro"):
        value = ctx.sysfs.read_or(f"block/{dev.name}/{attr}")
        if value is not None:
            facts[f"ATTR{{{attr}}}"] = value.strip()
    if dev.devnum:
        for key, value in ctx.udev.record(dev.devnum).properties.items():
            facts[f"ENV{{{key}}}"] = value
    return facts


def writers_of(machine: Machine, dev: Device, facts: dict[str, str]) -> list[Writer]:
    """The assignments of `machine` that reach `dev` (certain or perhaps), in each service's order."""
    out = []
    for order, a in machine.assignments:
        holds = a.target.holds(facts)
        if holds is not False:
            out.append(Writer(dev.name, a, order, holds is True))
    return out


def kernel_defaults(ctx: Context, dev: Device) -> dict[str, KernelDefault]:
    """The values the running kernel gives `dev` by itself, each with the rule it follows."""
    out = {}
    release = ctx.modules.release if ctx.modules is not None else ""
    rel = f"block/{dev.name}/queue"
    msk = (ctx.sysfs.read_or(f"{rel}/max_sectors_kb") or "").strip()
    io_opt = (ctx.sysfs.read_or(f"{rel}/optimal_io_size") or "0").strip()
    if msk.isdigit() and io_opt.isdigit():
        rotational = (ctx.sysfs.read_or(f"{rel}/rotational") or "0").strip() == "1"
        value = derived_read_ahead_kb(release, rotational, int(io_opt), int(msk))
        generation = read_ahead_generation(release)
        on = f"Linux {release}" if release else "this kernel"
        out["read_ahead_kb"] = KernelDefault(value, f"{value} KiB on {on} (since {generation.since[0]}."
                                                    f"{generation.since[1]}: {generation.rule})")
    if dev.has_scheduler:
        hw = len([n for n in ctx.sysfs.listdir(f"block/{dev.name}/mq") if n.isdigit()]) or 1
        value, rule = default_scheduler(dev.name, hw)
        out["scheduler"] = KernelDefault(value, rule)
        for knob, default in KNOB_DEFAULTS.get(dev.scheduler or "", {}).items():
            out[f"iosched/{knob}"] = KernelDefault(default, f"{dev.scheduler}'s default {knob}")
    return out
