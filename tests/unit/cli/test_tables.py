"""Tables that fit the terminal: golden status, plan and mounts check at 80 and 200 columns, -o/--columns,
colour only when asked for or on a terminal, control characters escaped."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from tests.fakesys import FakeTree, add_filesystem, dm_crypt_over_ssd, mountinfo_line, sata_hdd
from tests.harness import DATA, REPO, CliResult, run_cli
from tunectl.cli import Output
from tunectl.context import Context
from tunectl.profile.library import shipped_profile_dir
from tunectl.report import cut, table
from tunectl.status import Marked, Verdict
from tunectl.system.state import StateStore

GOLDEN = REPO / "tests" / "golden" / "tables"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

PROFILE = "name: fs-test\nmounts:\n  - match: {class: [ssd, rotational, dm]}\n    options: [noatime]\n    discard: online\n"
FSTAB = ("UUID=0a1b2c3d-1111-4222-8333-444455556666  /  ext4  errors=remount-ro,relatime  0  1\n"
         "LABEL=a\\040rather\\040long\\040label\\040for\\040the\\040encrypted\\040data\t"
         "/srv/a/rather/long/mount/point/for/the/encrypted/data\text4\tdefaults,nofail\t0\t2\n")


class Machine:
    """A fake tree (every topology, or the mounts set-up) and `tunectl` run on it with COLUMNS."""

    def __init__(self, tree: FakeTree, base: Path, env: dict[str, str] | None = None) -> None:
        self.tree, self.base, self.env = tree, base, env or {}

    def __call__(self, *argv: str, columns: int | None = None, **env: str) -> CliResult:
        environ = {**self.env, **env, **({"COLUMNS": str(columns)} if columns else {})}
        ctx = Context(self.tree.sysfs, self.tree.udev, StateStore(self.base / "state"), [shipped_profile_dir()], environ)
        return run_cli(*argv, context=ctx)


@pytest.fixture
def machine(fake_tree: FakeTree, fake_root: Path) -> Machine:
    return Machine(fake_tree, fake_root)


@pytest.fixture
def mounts(empty_fake_tree: FakeTree, fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    from tunectl.mounts import operations

    monkeypatch.setattr(operations, "fstrim_timer_state", lambda run: "enabled")
    tree = empty_fake_tree
    sata_hdd(tree, "sda")
    add_filesystem(tree, "sda1", "ext4", uuid="0a1b2c3d-1111-4222-8333-444455556666")
    dm_crypt_over_ssd(tree, "dm-0", "sdb")
    add_filesystem(tree, "dm-0", "ext4", label="a rather long label for the encrypted data")
    proc = fake_root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("\n".join([
        mountinfo_line(tree, 20, "sda1", "/", "ext4", "/dev/sda1", "rw,relatime", "rw,errors=remount-ro"),
        mountinfo_line(tree, 23, "dm-0", "/srv/a/rather/long/mount/point/for/the/encrypted/data", "ext4",
                       "/dev/mapper/luks-5e1e0b9e-7e4f-4cc1-9d57-2b5c1a0e8f11", "rw,relatime", "rw"),
    ]) + "\n")
    (fake_root / "dev" / "disk" / "by-uuid").mkdir(parents=True)
    (fake_root / "fstab").write_text(FSTAB)
    (fake_root / "p.yaml").write_text(PROFILE)
    return Machine(tree, fake_root, {"TUNECTL_PROC_ROOT": str(proc), "TUNECTL_DEV_ROOT": str(fake_root / "dev")})


def _mounts_check(m: Machine, *extra: str, columns: int | None = None) -> str:
    r = m("mounts", "check", "-p", str(m.base / "p.yaml"), "--fstab", str(m.base / "fstab"), *extra, columns=columns)
    assert r.code == 1, r
    return r.out.replace(str(m.base), "BASE")


def _golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name}: differs from {path} (UPDATE_GOLDEN=1 rewrites it)"


def _fits(text: str, width: int) -> None:
    """No line wider than `width`, but a sentence's word (a path, a digest) that is: it stays whole on its own line."""
    long = [line for line in text.splitlines() if len(line) > width and len(line.split()) > 1]
    assert not long, f"wider than {width}: {long}"


@pytest.mark.parametrize("width", [80, 200])
def test_status_golden(machine: Machine, width: int) -> None:
    r = machine("status", columns=width)
    assert r.code == 0
    _golden(f"status-{width}", r.out)
    _fits(r.out, width)


@pytest.mark.parametrize("width", [80, 200])
def test_plan_golden(machine: Machine, width: int) -> None:
    r = machine("plan", "-p", "throughput-performance", columns=width)
    assert r.code == 0
    _golden(f"plan-{width}", r.out)
    _fits(r.out, width)


@pytest.mark.parametrize("width", [80, 200])
def test_mounts_check_golden(mounts: Machine, width: int) -> None:
    text = _mounts_check(mounts, columns=width)
    _golden(f"mounts-check-{width}", text)
    _fits(text.replace("BASE", "/dev/shm/tunectl-fake-xxxxxxxx"), width)


WIDTHS = [40, 60, 80, 100, 132]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_terminal(machine: Machine, width: int) -> None:
    for argv in (["status"], ["status", "-o", "identity,device"], ["plan", "-p", "throughput-performance"],
                 ["verify", "-p", "desktop"], ["apply", "--check", "-p", "latency-performance"]):
        _fits(machine(*argv, columns=width).out, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_mounts_line_is_wider_than_the_terminal(mounts: Machine, width: int) -> None:
    r = mounts("mounts", "check", "-p", str(mounts.base / "p.yaml"), "--fstab", str(mounts.base / "fstab"),
               columns=width)
    _fits(r.out, width)


def test_identities_are_cut_in_the_middle_and_whole_with_v_or_json(machine: Machine) -> None:
    full = "dm-uuid:CRYPT-LUKS2-5e1e0b9e7e4f4cc19d572b5c1a0e8f11-luks-5e1e0b9e-7e4f-4cc1-9d57-2b5c1a0e8f11"
    narrow = machine("status", columns=80).out
    cell = next(line for line in narrow.splitlines() if line.startswith("dm-0")).split()[4]
    assert "…" in cell and full.startswith(cell.split("…")[0]) and full.endswith(cell.split("…")[1])
    assert full in machine("status", "-v", columns=80).out
    assert full in {d["identity"] for d in machine("status", "--json", columns=80).doc["devices"]}
    assert full in machine("status").out  # a pipe without COLUMNS: cells whole for grep and awk


def test_columns_option_picks_and_orders(machine: Machine) -> None:
    r = machine("status", "-o", "drift,device")
    # with -o stdout is the table alone: the profile line goes to stderr
    assert r.out.splitlines()[0].split() == ["DRIFT", "DEVICE"] and "\nprofile: default\n" in r.err
    assert "sda" in r.out and "IDENTITY" not in r.out
    assert machine("status", "-o", "device,knobs").out.splitlines()[0].split() == ["DEVICE", "KNOBS"]
    listing = machine("status", "--columns")
    assert listing.code == 0 and [line.split()[0] for line in listing.out.splitlines()] == \
        ["device", "class", "scheduler", "read-ahead", "identity", "drift", "knobs"]
    assert "knobs       the active scheduler's tunables (queue/iosched/*)  (not shown unless -o names it, or -v)" in \
        listing.out.splitlines()
    for argv in (["plan"], ["verify"], ["align"], ["mounts", "check"]):
        listed = run_cli(*argv, "--columns")
        assert listed.code == 0, argv
        for line in listed.out.splitlines():  # each column with what it shows, as lsblk --list-columns
            name, _, help_ = line.partition(" ")
            assert name and len(help_.strip()) > 10, (argv, line)
    bad = machine("plan", "-o", "device,colour", "--json")
    assert bad.code == 2 and bad.doc["error"]["where"] == "-o" and "before-after" in bad.doc["error"]["hint"]


def test_colour_only_when_asked_or_on_a_terminal(machine: Machine) -> None:
    assert not ANSI.search(machine("status").out)  # not a terminal
    assert not ANSI.search(machine("status", "--color=never").out)
    painted = machine("status", "--color=always").out
    vda = next(line for line in painted.splitlines() if line.startswith("vda"))
    assert "\x1b[33m1 setting(s)\x1b[0m" in vda
    assert ANSI.sub("", painted) == machine("status").out


def test_no_color_and_a_terminal(fake_tree: FakeTree, fake_root: Path) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    def status(env: dict[str, str]) -> str:
        from tunectl.cli import main

        out = Tty()
        ctx = Context(fake_tree.sysfs, fake_tree.udev, StateStore(fake_root / "state"), [shipped_profile_dir()],
                      {"COLUMNS": "100", **env})
        assert main(["status"], stdout=out, stderr=io.StringIO(), context=ctx) == 0
        return out.getvalue()

    assert ANSI.search(status({}))
    assert not ANSI.search(status({"NO_COLOR": "1"}))
    assert not ANSI.search(status({"TERM": "dumb"})) and ANSI.search(status({"TERM": "xterm"}))
    _fits(ANSI.sub("", status({})), 100)


def test_control_characters_are_escaped_in_tables(empty_fake_tree: FakeTree, fake_root: Path) -> None:
    empty_fake_tree.add_loop("loop0", "/img/\x1b[31mred\x07\n.img")
    out = Machine(empty_fake_tree, fake_root)("status").out
    assert "\x1b" not in out and "\x07" not in out
    assert "loop:/img/\\x1b[31mred\\x07\\n.img" in out


def test_cut_and_table_units() -> None:
    assert cut("abcdefghij", 5) == "abcd…" and cut("abcdefghij", 5, middle=True) == "ab…ij"
    assert cut("abc", 5) == "abc" and cut("abcdef", 1) == "…"
    text = table(["A", "LONG"], [["x", "y" * 50]], width=20)
    assert text.splitlines()[1] == "x  " + "y" * 16 + "…" and all(len(line) <= 20 for line in text.splitlines())
    out = Output(io.StringIO(), io.StringIO(), False, False, 0, "status")
    assert out.table(["A"], [["\x1b"]]) == "A\n\\x1b"
    assert DATA.is_dir()


def test_control_characters_in_file_names_are_escaped(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "evil\x1b]0;pwned\x07name").write_bytes(b"x" * 100)
    listing = tmp_path / "l\x1b[2J.list"
    r = run_cli("preload", "collect", str(tree), "-o", str(listing))
    assert r.code == 0, r
    assert "\x1b" not in r.out and "l\\x1b[2J.list: 1 file," in r.out
    shown = run_cli("preload", "show", "-v", str(listing))
    assert "\x1b" not in shown.out and "\x07" not in shown.out and "evil\\x1b]0;pwned\\x07name" in shown.out
    missing = run_cli("preload", "show", str(tmp_path / "no\x1bsuch.list"))
    assert missing.code == 2 and "\x1b" not in missing.err and "no\\x1bsuch.list" in missing.err


def test_every_printed_line_is_escaped_and_only_our_colours_pass() -> None:
    def printed(text: str, colour: bool, as_json: bool = False) -> str:
        out = Output(io.StringIO(), io.StringIO(), as_json, False, 0, "status")
        out.colour = colour
        out.print(text)
        return out.stdout.getvalue()

    hostile = "name\x1b]0;title\x07 \x1b[2J\r\tend"
    assert printed(hostile, colour=False) == "name\\x1b]0;title\\x07 \\x1b[2J\\x0d\tend\n"
    assert printed(hostile, colour=True) == printed(hostile, colour=False)
    painted = table(["DRIFT"], [[Marked("1 setting(s)", Verdict.DRIFT)]], paint=True)
    assert printed(painted, colour=True) == painted + "\n"
    assert "\x1b" not in printed(painted, colour=False)
    assert printed('{"a": 1}', colour=False, as_json=True) == '{"a": 1}\n'


def test_udev_sentences_wrap_at_the_terminal_width(tmp_path: Path) -> None:
    env = {"COLUMNS": "60", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    missing = run_cli("udev", "check", "-p", "desktop", "--rules-dir", str(tmp_path), env=env)
    (tmp_path / "65-tunectl.rules").write_text("# not tunectl's\n")
    differs = run_cli("udev", "check", "-p", "desktop", "--rules-dir", str(tmp_path), env=env)
    assert (missing.code, differs.code) == (1, 1), (missing, differs)
    sentence = differs.out.split("\n-")[0]
    assert "is not what profile desktop renders" in " ".join(sentence.split()), differs.out
    _fits(missing.out + sentence, 60)
    assert str(tmp_path / "65-tunectl.rules") in sentence  # a path longer than a line stays whole


def test_columns_take_any_case_and_lsblk_names(machine: Machine) -> None:
    for spelling in ("NAME,SCHED,RA", "name,sched,ra", "Device,Scheduler,Read-Ahead", "DEVICE,SCHEDULER,READ-AHEAD"):
        r = machine("status", "-o", spelling)
        assert r.code == 0 and r.out.splitlines()[0].split() == ["DEVICE", "SCHEDULER", "READ-AHEAD"], (spelling, r.err)
    bad = machine("status", "-o", "ROTA")  # lsblk has it; status has no such column
    assert bad.code == 2 and "unknown column 'ROTA'" in bad.err


def test_noheadings_raw_and_pairs_as_lsblk_has_them(machine: Machine) -> None:
    table = machine("status", "-o", "name,sched,ra")
    r = machine("status", "-o", "name,sched,ra", "-n")
    assert r.out.splitlines() == table.out.splitlines()[1:]
    raw = machine("status", "-o", "name,sched,ra", "-r").out.splitlines()
    assert raw[0] == "DEVICE SCHEDULER READ-AHEAD" and "sda mq-deadline 8192" in raw, raw
    assert machine("status", "-o", "name,sched,ra", "-rn").out.splitlines() == raw[1:]
    pairs = machine("status", "-o", "name,sched,ra", "-P").out.splitlines()
    assert 'DEVICE="sda" SCHEDULER="mq-deadline" READ_AHEAD="8192"' in pairs, pairs
    assert machine("status", "-r", "-P").code == 2
    # a raw cell keeps its blanks as \x20, one field per column
    plan = machine("plan", "-r", "-o", "device,source").out.splitlines()
    assert all(len(line.split(" ")) == 2 for line in plan), plan


def test_plan_at_80_columns_cuts_source_and_note_before_values(machine: Machine) -> None:
    argv = ("plan", "-p", "throughput-performance")
    wide = machine(*argv, columns=400).out.splitlines()
    head = wide[1]
    table = wide[2:next(i for i, line in enumerate(wide) if line.startswith("skipped "))]
    rows = [line for line in table if len(line) > head.index("SOURCE")]
    values = [line[head.index("BEFORE -> AFTER"):head.index("SOURCE")].strip() for line in rows]
    need = max(len(line) for line in [head, *table])
    for width in (80, need - 8):  # 80 columns, and narrower than this table: SOURCE gives way first
        narrow = machine(*argv, columns=width).out
        assert values and all(v in narrow for v in values), (width, [v for v in values if v not in narrow])
    assert "class…" in narrow, narrow  # the source gave way


def test_status_sorts_kernel_names_naturally(empty_fake_tree: FakeTree, fake_root: Path) -> None:
    for n in (10, 2, 1):
        empty_fake_tree.add_loop(f"loop{n}", f"/srv/d{n}.img")
    r = Machine(empty_fake_tree, fake_root)("status", "--all", "-o", "name", "-n")
    assert r.out.split() == ["loop1", "loop2", "loop10"], r.out


def test_colour_comes_from_the_verdict_never_from_the_text() -> None:
    plain = table(["STATUS", "DRIFT"], [["NO", "failed"]], paint=True)
    assert "\x1b" not in plain  # words that once meant red, with no verdict: plain
    painted = table(["X"], [[Marked("anything at all", Verdict.NOT_PERMITTED)], [Verdict.CHANGE], [Verdict.IN_SYNC]],
                    paint=True).splitlines()
    assert painted[1] == "\x1b[31manything at all\x1b[0m"
    assert painted[2].startswith("\x1b[33mchange\x1b[0m") and painted[3] == "ok"
    assert "\x1b" not in table(["X"], [[Verdict.FAILED]], paint=False)


def test_every_verdict_has_one_word_and_the_documents_keep_theirs() -> None:
    words = [v.value for v in Verdict]
    assert len(words) == len(set(words))
    assert Verdict.IN_SYNC.word("udev-monitor") == "in-sync" and Verdict.IN_SYNC.word("plan") == "ok"
    assert {v.colour for v in Verdict} == {None, "yellow", "red"}
