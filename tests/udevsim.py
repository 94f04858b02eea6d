"""A udev simulator for the rendered rules, and random devices and profiles to run it on.

`MiniUdev` runs the subset of udev 252 rule semantics the rendered rules use (as
observed on the real daemon) over a sysfs-shaped tree; its writes, like those of
`apply_plan`, go through `fakesys.FakeKernel`, the tests' one fake kernel.
`build_tree` lays out random devices (`fake_device`) for both sides, so tests can
check that an event reaches the state `apply` reaches (`queue_state`).
`profile_data` draws random valid profiles.
"""

from __future__ import annotations

import contextlib
import os
from fnmatch import fnmatchcase
from pathlib import Path

import yaml
from hypothesis import assume
from hypothesis import strategies as st

from tests.fakesys import FakeKernel, iosched_defaults
from tunectl.attributes import IOSCHED, QUEUE, SCHEDULERS, nearest_in_range
from tunectl.devices.classes import CLASSES, DM_TYPES
from tunectl.devices.discover import discover
from tunectl.errors import SysfsError
from tunectl.profile.checks import check_document
from tunectl.profile.resolve import Profile, normalise
from tunectl.profile.yaml_events import parse_yaml
from tunectl.status import Status
from tunectl.system.sysfs import Sysfs
from tunectl.system.udevdb import UdevDb
from tunectl.tuning.plan import make_plan
from tunectl.udev.lint import parse_rule

_GLOB = st.lists(st.one_of(st.sampled_from(list("ab1")), st.just("*"), st.just("?"), st.just("[ab]"), st.just("[!1]")),
                 min_size=1, max_size=4).map("".join)
_KNOBS_OF = {s: sorted(IOSCHED[s]) for s in SCHEDULERS}


@st.composite
def _number_or_range(draw, lo: int, hi: int):
    """A number or a range; bounds often near what the fake kernel shows (7; the knobs' defaults, 16, 125,
    250, 500; nr_requests after a switch, 256; read-ahead raised by a limit write, 128) to land on each side."""
    near = st.sampled_from([v for v in (0, 6, 7, 8, 15, 16, 17, 124, 125, 127, 128, 129, 250, 256, 500, 504)
                            if lo <= v <= hi] or [lo])
    a, b = sorted(draw(st.one_of(near, st.integers(lo, hi))) for _ in range(2))
    return draw(st.sampled_from([a, {"min": a}, {"max": b}, {"min": a, "max": b}]))


@st.composite
def _settings(draw, with_below: bool = True) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        prefs = draw(st.lists(st.sampled_from(SCHEDULERS), min_size=1, max_size=3, unique=True))
        out["scheduler"] = prefs if len(prefs) > 1 or draw(st.booleans()) else prefs[0]
        knob_pool = sorted({k for s in prefs for k in _KNOBS_OF[s]})
    else:
        knob_pool = sorted({k for s in SCHEDULERS for k in _KNOBS_OF[s]})
    if knob_pool and draw(st.booleans()):
        knobs = draw(st.lists(st.sampled_from(knob_pool), max_size=3, unique=True))
        spec = {k: next(IOSCHED[s][k] for s in SCHEDULERS if k in IOSCHED[s]) for k in knobs}
        out["iosched"] = {k: draw(_number_or_range(spec[k].minimum, min(spec[k].maximum, 10**6))) for k in knobs}
    if draw(st.booleans()):
        out["read_ahead_kb"] = draw(st.one_of(_number_or_range(0, 65536), st.sampled_from(["4 MiB", "128 KiB", "1 MiB"]),
                                              st.just({"min": "64 KiB", "max": "1 MiB"})))
    if draw(st.booleans()):
        attrs = draw(st.lists(st.sampled_from(sorted(a for a in QUEUE if a != "read_ahead_kb")), max_size=3, unique=True))
        queue = {}
        for a in attrs:
            spec = QUEUE[a]
            queue[a] = draw(st.sampled_from(spec.choices)) if spec.choices else draw(
                _number_or_range(spec.minimum, min(spec.maximum, 10**6)))
        out["queue"] = queue
    if with_below and draw(st.integers(0, 5)) == 0:
        out["below"] = draw(_settings(with_below=False))
    return out


@st.composite
def _match(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(["kernel", "model", "vendor", "serial", "wwn", "bus", "class", "dm_type",
                                          "rotational", "removable", "size"]), min_size=1, max_size=3, unique=True))
    out: dict = {}
    for key in keys:
        if key in ("kernel", "model", "vendor", "serial"):
            out[key] = draw(_GLOB)
        elif key == "wwn":
            out[key] = draw(st.one_of(_GLOB, _GLOB.map(lambda g: "0x" + g)))
        elif key == "bus":
            out[key] = draw(st.one_of(_GLOB, st.lists(st.sampled_from(["ata", "scsi", "usb", "nvme", "virtio", "a*"]),
                                                      min_size=1, max_size=2, unique=True)))
        elif key == "class":
            out[key] = draw(st.one_of(st.sampled_from(CLASSES), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3,
                                                                        unique=True)))
        elif key == "dm_type":
            out[key] = draw(st.lists(st.sampled_from(DM_TYPES), min_size=1, max_size=2, unique=True))
        elif key in ("rotational", "removable"):
            out[key] = draw(st.booleans())
        else:
            size = {}
            if draw(st.booleans()):
                size["min"] = draw(st.integers(0, 5000))
            if draw(st.booleans()) or not size:
                size["max"] = draw(st.integers(0, 5000))
            out[key] = size
    return out


@st.composite
def profile_data(draw) -> dict:
    data: dict = {"name": "random"}
    classes = draw(st.lists(st.sampled_from(CLASSES), max_size=5, unique=True))
    data["classes"] = {c: draw(_settings()) for c in classes}
    data["devices"] = [dict(draw(_settings()), match=draw(_match())) for _ in range(draw(st.integers(0, 4)))]
    return data


def valid_profile(data: dict) -> Profile:
    doc, diags = parse_yaml(yaml.safe_dump(data, sort_keys=False), "random.yaml")
    diags = diags or check_document(doc)
    assume(not [d for d in diags if d.severity == "error"])
    return Profile(data["name"], "", ["/etc/tunectl/profiles/random.yaml"], normalise(doc.data), {})


class MiniUdev:
    """The subset of udev 252 rule semantics the rendered rules use, as observed on the real daemon."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.rules = []
        for line in text.splitlines():
            if line and not line.startswith("#"):
                tokens, error = parse_rule(line)
                assert error is None, line
                self.rules.append(tokens)

    def event(self, name: str, devpath: str, env: dict, kernel: FakeKernel, action: str = "change") -> dict:
        env = dict(env, DEVTYPE="disk")
        base = self.root / "block" / name
        cache: dict = {}

        def attr(path: str) -> str | None:
            if path not in cache:  # read once per event, never refreshed (udev caches it; its own writes too)
                f = base / path
                cache[path] = f.read_text().rstrip() if f.is_file() else None
            return cache[path]

        def test(path: str) -> bool:
            if "/*/" in path:
                head, tail = path.split("/*/", 1)
                d = base / head
                return d.is_dir() and any((d / e / tail).exists() for e in os.listdir(d))
            return (base / path).exists()

        def value(t) -> str | None:
            return {"SUBSYSTEM": "block", "ACTION": action, "KERNEL": name, "DEVPATH": devpath}.get(t.key) if t.key not in (
                "ENV", "ATTR") else (env.get(t.attr, "") if t.key == "ENV" else attr(t.attr))

        i, goto = 0, None
        while i < len(self.rules):
            tokens = self.rules[i]
            i += 1
            if goto is not None:
                if any(t.key == "LABEL" and t.value == goto for t in tokens):
                    goto = None
                continue
            ok = True
            for t in (t for t in tokens if t.op in ("==", "!=")):
                if t.key == "TEST":
                    hit = test(t.value)
                else:
                    have = value(t)
                    if have is None:  # an absent ATTR fails == and != alike
                        ok = False
                        break
                    hit = any(fnmatchcase(have, alt) for alt in t.value.split("|"))
                if hit != (t.op == "=="):
                    ok = False
                    break
            if not ok:
                continue
            for t in (t for t in tokens if t.op not in ("==", "!=")):
                if t.key == "ENV":
                    env[t.attr] = t.value
                elif t.key == "ATTR":
                    _write(kernel, name, t.attr, t.value)
                elif t.key == "GOTO":
                    goto = t.value
                elif t.key == "RUN":
                    env.setdefault("RUN", t.value)
        return env


_DEVICE_NAMES = ["sda", "sdb", "vda", "nvme0n1", "mmcblk0", "dm-0", "md0", "loop0", "zram0"]
_VALUE = st.text(alphabet="ab1", max_size=3)
_WWN = st.one_of(_VALUE, _VALUE.map(lambda s: "0x" + s))


@st.composite
def fake_device(draw, index: int) -> dict:
    name = draw(st.sampled_from(_DEVICE_NAMES))
    bio = name.startswith(("dm-", "md", "zram"))
    offered = ["none"] if bio else draw(st.lists(st.sampled_from(SCHEDULERS), min_size=1, max_size=4, unique=True))
    dev = {
        "name": f"{name}" if index == 0 else f"{name}x{index}" if not name.startswith("nvme") else f"nvme{index}n1",
        "offered": offered,
        "active": None if bio else draw(st.sampled_from(offered)),
        "rotational": draw(st.sampled_from(["0", "1", None])),
        "removable": draw(st.sampled_from(["0", "1", None])),
        "size": draw(st.sampled_from([None, "0", "1", "2", "7", "9", "10", "1999", "2000", "2001"])),
        "env": {k: v for k, v in {
            "ID_MODEL": draw(st.one_of(st.none(), _VALUE)), "ID_VENDOR": draw(st.one_of(st.none(), _VALUE)),
            "ID_SERIAL_SHORT": draw(st.one_of(st.none(), _VALUE)), "ID_SCSI_SERIAL": draw(st.one_of(st.none(), _VALUE)),
            "ID_WWN": draw(st.one_of(st.none(), _WWN)),
            "ID_BUS": draw(st.one_of(st.none(), st.sampled_from(["ata", "usb", "scsi", "b"]))),
        }.items() if v},
        "attrs": {k: v for k, v in {
            "device/model": draw(st.one_of(st.none(), _VALUE.map(lambda s: s + "  "))),
            "device/vendor": draw(st.one_of(st.none(), _VALUE)),
            "device/serial": draw(st.one_of(st.none(), _VALUE)), "serial": draw(st.one_of(st.none(), _VALUE)),
            "wwid": draw(st.one_of(st.none(), _WWN, _VALUE.map(lambda s: "naa." + s.upper()))),
            "device/wwid": draw(st.one_of(st.none(), _VALUE.map(lambda s: "naa." + s))),
        }.items() if v is not None},
        "bus_path": draw(st.sampled_from(["virtual", "pci0000:00/0000:00:01.0/nvme/nvme9", "pci0000:00/usb1/1-1",
                                          "pci0000:00/ata1/host0", "platform/x"])),
    }
    if dev["env"].get("ID_MODEL") and draw(st.booleans()):
        dev["env"]["ID_MODEL_ENC"] = dev["env"]["ID_MODEL"]  # no blanks here: ID_MODEL is the decoded model
    if name.startswith("dm-"):
        dev["env"]["DM_UUID"] = draw(st.sampled_from(["CRYPT-VERITY-x", "CRYPT-LUKS2-y", "LVM-abc", "mpath-3600", "other"]))
    return dev


# What the kernel can show to begin with (read-ahead in whole pages, flags as flags); 7 elsewhere.
_SHOWN = {"read_ahead_kb": "8", "rq_affinity": "1", "nomerges": "1", "add_random": "1", "iostats": "1",
          "stable_writes": "1", "io_poll": "0", "io_poll_delay": "-1"}


def build_tree(root: Path, devices: list[dict], modules: set[str] | frozenset = frozenset()
               ) -> tuple[FakeKernel, dict[str, tuple[str, dict]]]:
    """The devices as a tree under `root`, the fake kernel on it (`modules`: schedulers built as modules, not
    listed until written), and each device's devpath and udev properties for `MiniUdev.event`."""
    events = {}
    for n, dev in enumerate(devices):
        name = dev["name"]
        devpath = f"/devices/{dev['bus_path']}/block/{name}"
        real = root / devpath.lstrip("/")
        (real / "queue" / "iosched").mkdir(parents=True)
        (root / "block").mkdir(exist_ok=True)
        (root / "block" / name).symlink_to(real)
        (real / "dev").write_text(f"250:{n}\n")
        if not name.startswith(("dm-", "md", "zram")):
            (real / "mq").mkdir()  # a request queue (blk-mq); bio-based dm, md and zram have none
        offered = dev["offered"]
        if name.startswith("zram"):
            pass  # no scheduler file at all, as on this kernel
        elif offered == ["none"]:
            (real / "queue" / "scheduler").write_text("none\n")
        else:
            (real / "queue" / "scheduler").write_text(" ".join(f"[{s}]" if s == dev["active"] else s for s in offered) + " \n")
            for knob, value in (iosched_defaults(dev["active"], 7, 250) or {}).items():
                (real / "queue" / "iosched" / knob).write_text(f"{value}\n")
        queue = {f"queue/{a}": _SHOWN.get(a, "write back" if spec.choices else "7") for a, spec in QUEUE.items()
                 if a != "rotational"}
        if dev["rotational"] is not None:
            queue["queue/rotational"] = dev["rotational"]
        for attr, value in queue.items():
            (real / attr).write_text(value + "\n")
        if dev["removable"] is not None:
            (real / "removable").write_text(dev["removable"] + "\n")
        if dev["size"] is not None:
            (real / "size").write_text(dev["size"] + "\n")
        for attr, value in dev["attrs"].items():
            (real / attr).parent.mkdir(parents=True, exist_ok=True)
            (real / attr).write_text(value + "\n")
        if name.startswith("dm-"):
            (real / "dm").mkdir()
            (real / "dm" / "uuid").write_text(dev["env"]["DM_UUID"] + "\n")
        if name.startswith("md"):
            (real / "md").mkdir()
            (real / "md" / "array_state").write_text("clean\n")
        if name.startswith("loop"):
            (real / "loop").mkdir()
            (real / "loop" / "backing_file").write_text(f"/srv/{name}.img\n")
        (real / "slaves").mkdir()
        db = root / ".udev-data"
        db.mkdir(exist_ok=True)
        (db / f"b250:{n}").write_text("".join(f"E:{k}={v}\n" for k, v in dev["env"].items()))
        events[name] = (devpath, dev["env"])
    kernel = FakeKernel(root)
    kernel.as_modules(*modules)
    return kernel, events


def exact_case(data: dict, count: int, draw, executable: str) -> tuple[Profile, list[dict]]:
    """A random profile whose rules are exact (none reported approximate: those are told, not matched) and
    `count` fake devices with distinct names, none of a class the profile leaves alone (loop and zram unless
    named): the rules skip those, the plan's equivalence is over the rest."""
    from tunectl.devices.classes import OPT_IN_CLASSES, classify
    from tunectl.udev.render import render_rules

    profile = valid_profile(data)
    assume(not any("approximate" in n for n in render_rules(profile, executable).notes))
    named = set(profile.classes) | {c for e in profile.devices for c in e["match"].get("class", [])}
    devices = [draw.draw(fake_device(i)) for i in range(count)]
    devices = [d for d in devices if classify(d["name"], d["rotational"] == "1") not in set(OPT_IN_CLASSES) - named]
    assume(devices and len({d["name"] for d in devices}) == len(devices))
    return profile, devices


def queue_state(kernel: FakeKernel) -> dict[str, dict[str, str]]:
    """What the kernel shows under each device's queue/ (knobs included), by device name.

    queue/scheduler is given in sorted order: the kernel lists schedulers in the order they registered,
    so modules loaded by udev events (in event order) and by apply (in device order) list differently;
    which are listed and which is active is what both must agree on.
    """
    out = {}
    for name in sorted(os.listdir(kernel.path("block"))):
        queue = Path(os.path.realpath(kernel.path(f"block/{name}"))) / "queue"
        out[name] = {str(f.relative_to(queue.parent)): f.read_text().rstrip("\n") for f in sorted(queue.rglob("*"))
                     if f.is_file()}
        if "queue/scheduler" in out[name]:
            out[name]["queue/scheduler"] = " ".join(sorted(out[name]["queue/scheduler"].split(), key=lambda s: s.strip("[]")))
    return out


def _write(kernel: FakeKernel, name: str, attr: str, value: str) -> None:
    with contextlib.suppress(SysfsError):  # udev logs a refused write and goes on; so does apply (it reports it)
        kernel.write(f"block/{name}/{attr}", str(value))


def apply_plan(kernel: FakeKernel, profile: Profile, modular: list[str] | None = None) -> None:
    devices = discover(Sysfs(kernel.root), UdevDb(kernel.path(".udev-data")), modular=modular or ())
    for s in make_plan(devices, profile):
        if s.status != Status.CHANGE:
            continue
        value = s.after
        if s.bounds is not None:  # as apply does: decided on the value the kernel shows now
            shown = kernel.path(f"block/{s.device}/queue/{s.attribute}")
            live = shown.read_text().strip() if shown.is_file() else None
            live = int(live) if live and live.lstrip("-").isdigit() else None
            nearest = nearest_in_range(s.bounds, live)
            if nearest is not None and nearest == live:
                continue
            value = nearest if nearest is not None else s.bounds.get("min", s.bounds.get("max"))
        _write(kernel, s.device, f"queue/{s.attribute}", value)
