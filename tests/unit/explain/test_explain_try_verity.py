"""`--try` on an image under dm-verity (#29): each scratch copy is read through a scratch verity device built with
the user's hash algorithm and block sizes; everything made is unmade on every exit, Ctrl-C included.

This host's kernel has no device-mapper: the commands are faked here (what is run, in which order, what is undone);
the VM tier's explain group runs them for real on Debian's 6.1 kernel.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from types import SimpleNamespace

import pytest

from tests.unit.explain import recorded_stacks as stacks
from tunectl.bench.diskstat import StatDelta
from tunectl.errors import UsageError
from tunectl.explain import dmtable, experiment
from tunectl.explain.model import ColdRead
from tunectl.record import replace
from tunectl.system.interrupts import Terminated
from tunectl.system.runner import Completed

# what veritysetup 2.6.1 printed for `veritysetup format --hash=sha256 ... 1 MiB of zeros`
FORMAT_OUTPUT = """VERITY header information for /tmp/v.hash
UUID:            \tea13b2a1-c124-4ddb-a9a8-9be59accfaad
Hash type:       \t1
Data blocks:     \t256
Data block size: \t4096
Hash blocks:     \t3
Hash block size: \t4096
Hash algorithm:  \tsha256
Salt:            \tc31bd1cef3bc177bb282808ffe23fbeced4f54290562c3ccf918226d0b7dddac
Root hash:      \t64516bdce79167df7a59a6c4f9ac96e969da00a92e3825243cafc6364e4a2478
Hash device size: \t16384 [bytes]
"""
ROOT = "64516bdce79167df7a59a6c4f9ac96e969da00a92e3825243cafc6364e4a2478"
SALT = "c31bd1cef3bc177bb282808ffe23fbeced4f54290562c3ccf918226d0b7dddac"
TABLE_SALT = "cd" * 32  # the salt in the recorded browser stack's verity table
VS = "/usr/sbin/veritysetup"


class FakeMachine:
    """ctx.run for losetup, veritysetup, dmsetup, mount: records every command, keeps what is attached."""

    def __init__(self, fail_on: str | None = None, salt: str | None = None) -> None:
        self.salt = salt  # the salt veritysetup format says it used (None: the one it was given)
        self.calls: list[list[str]] = []
        self.loops: set[str] = set()
        self.verity: set[str] = set()
        self.mounts: set[str] = set()
        self.next_loop = 10
        self.fail_on = fail_on

    def run(self, argv, timeout=60, check=True, input_text=None) -> Completed:
        argv = list(argv)
        self.calls.append(argv)
        if self.fail_on and " ".join(argv).startswith(self.fail_on):
            raise KeyboardInterrupt  # Ctrl-C while this command runs
        out = ""
        if argv[0] == "losetup" and "--find" in argv:
            out = f"/dev/loop{self.next_loop}\n"
            self.loops.add(f"/dev/loop{self.next_loop}")
            self.next_loop += 1
        elif argv[0] == "losetup" and "--detach" in argv:
            self.loops.discard(argv[-1])
        elif argv[:2] == [VS, "format"]:
            salt = next(a.split("=", 1)[1] for a in argv if a.startswith("--salt="))
            out = FORMAT_OUTPUT.replace(SALT, salt if self.salt is None else self.salt)
        elif argv[:2] == [VS, "open"]:
            self.verity.add(argv[3])
        elif argv[:2] == [VS, "close"]:
            self.verity.discard(argv[2])
        elif argv[0] == "dmsetup":
            out = "dm-7\n"
        elif argv[0] == "mount":
            self.mounts.add(argv[-1])
        elif argv[0] == "umount":
            self.mounts.discard(argv[-1])
        return Completed(tuple(argv), 0, out, "")

    def left(self) -> tuple[set, set, set]:
        return self.loops, self.verity, self.mounts


@pytest.fixture
def scratch_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the recorded image is not a file here: scratch in tmp
    return tmp_path


def reader(reads: list, interrupt_at: int | None = None):
    def read(path: str, names: list[str], files: list[str]) -> ColdRead:
        reads.append((path, names, files))
        if interrupt_at is not None and len(reads) > interrupt_at:
            raise KeyboardInterrupt
        return ColdRead(path, 4096, 4 << 20, 1.0, tuple(StatDelta(n, reads=10, sectors_read=8192) for n in names))
    return read


def test_the_verity_each_copy_gets_is_read_from_the_users_table():
    verity, note = experiment.plan_verity(stacks.browser().stack, VS)
    assert verity == experiment.Verity("sha256", 4096, 4096, 1, TABLE_SALT) and note is None
    assert verity.format_args() == ["--hash=sha256", "--data-block-size=4096", "--hash-block-size=4096", "--format=1",
                                    f"--salt={TABLE_SALT}"]
    assert experiment.plan_verity(stacks.ext4().stack, VS) == (None, None)  # no verity under the file: none built
    assert experiment.plan_verity(stacks.ext4().stack, None) == (None, None)


def test_without_veritysetup_the_variants_run_without_verity_and_say_so():
    verity, note = experiment.plan_verity(stacks.browser().stack, None)
    assert verity is None and "veritysetup not found" in note and "without dm-verity" in note


def test_the_root_hash_comes_from_veritysetups_output():
    assert experiment.root_hash(FORMAT_OUTPUT) == ROOT
    with pytest.raises(ValueError):
        experiment.root_hash("VERITY header information for x\nSalt: 00\n")


def test_every_copy_is_read_through_a_scratch_verity_and_everything_is_unmade(scratch_parent):
    machine = FakeMachine()
    reads: list = []
    ctx = SimpleNamespace(run=machine.run)
    results, notes = experiment.run(ctx, stacks.browser().stack, reader(reads), compressors=(), veritysetup=VS)
    assert notes == []
    assert len(results) == 6 and all(r.variant.verity == experiment.Verity("sha256", 4096, 4096, 1, TABLE_SALT)
                                     for r in results)
    assert results[0].to_json()["verity"]["salt"] == TABLE_SALT
    assert results[0].variant.as_is and results[0].variant.label == "-b 4K -comp gzip, dio on, verity sha256"
    formats = [c for c in machine.calls if c[:2] == [VS, "format"]]
    assert len(formats) == 3  # one hash tree per built image (4K, 128K, 1M), shared by its dio on/off variants
    assert all(c[2:7] == ["--hash=sha256", "--data-block-size=4096", "--hash-block-size=4096", "--format=1",
                          f"--salt={TABLE_SALT}"]
               and c[-1] == c[-2] + ".verity" and c[-2].startswith(str(scratch_parent)) for c in formats)
    opens = [c for c in machine.calls if c[:2] == [VS, "open"]]
    assert len(opens) == 6 and all(c[-1] == ROOT for c in opens)
    assert all(c[-2] != c[2] and c[2].startswith("/dev/loop") for c in opens)  # data and hash on loops of their own
    mounts = [c for c in machine.calls if c[0] == "mount"]
    assert all(c[-2] == f"/dev/mapper/{o[3]}" for c, o in zip(mounts, opens))
    for _path, names, files in reads:
        assert names[0] == "dm-7" and names[1].startswith("loop") and names[2].startswith("loop")
        assert names[-1] == "mmcblk0" and files[1] == files[0] + ".verity"  # its hash file's pages dropped too
    assert machine.left() == (set(), set(), set())
    assert not list(scratch_parent.glob(".tunectl-explain-*"))
    assert all(not str(c).startswith("/srv/browser.img") for call in machine.calls for c in call[1:]
               if call[0] in ("losetup", "mount", VS))  # the user's image is only given to unsquashfs


def test_ctrl_c_during_a_read_unmakes_the_mount_the_verity_device_and_both_loops(scratch_parent):
    machine = FakeMachine()
    reads: list = []
    with pytest.raises(KeyboardInterrupt):
        experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader(reads, interrupt_at=1),
                       compressors=(), veritysetup=VS)
    assert machine.left() == (set(), set(), set())
    tail = [c[0] if c[0] != VS else f"veritysetup {c[1]}" for c in machine.calls[-4:]]
    assert tail == ["umount", "veritysetup close", "losetup", "losetup"]  # undone last first
    assert not list(scratch_parent.glob(".tunectl-explain-*"))


@pytest.mark.parametrize("step", [f"{VS} open", "dmsetup info", "mount", f"{VS} format", "mksquashfs"])
def test_ctrl_c_at_any_step_leaves_nothing(scratch_parent, step):
    machine = FakeMachine(fail_on=step)
    with pytest.raises(KeyboardInterrupt):
        experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader([]), compressors=(),
                       veritysetup=VS)
    assert machine.left() == (set(), set(), set())
    assert not list(scratch_parent.glob(".tunectl-explain-*"))


def test_without_veritysetup_no_verity_is_made_and_the_report_notes_it(scratch_parent):
    machine = FakeMachine()
    reads: list = []
    results, notes = experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader(reads),
                                    compressors=(), veritysetup=None)
    assert not [c for c in machine.calls if c[0] in (VS, "dmsetup")]
    assert all(r.variant.verity is None and r.to_json()["verity"] is None for r in results)
    assert len(notes) == 1 and "veritysetup not found" in notes[0]
    assert [names[0][:4] for _, names, _ in reads] == ["loop"] * 6
    assert machine.left() == (set(), set(), set())


class _Signalled(FakeMachine):
    """A FakeMachine that sends this process `sig` while the command starting with `at` runs."""

    def __init__(self, sig: int, at: str) -> None:
        super().__init__()
        self.sig, self.at = sig, at

    def run(self, argv, timeout=60, check=True, input_text=None) -> Completed:
        if " ".join(argv).startswith(self.at):
            os.kill(os.getpid(), self.sig)
        return super().run(argv, timeout, check, input_text)


@pytest.fixture
def sigterm_default(monkeypatch):
    """SIGTERM's default ends the process (no finally runs): stood in for by a handler that only counts, so a run
    that never turns it into an exception goes on, and the test says so instead of the test process dying."""
    reached: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: reached.append(signum)) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield reached
    for sig, handler in old.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("step", ["unsquashfs", "mksquashfs", f"{VS} format", "losetup --find", f"{VS} open",
                                  "dmsetup info", "mount"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_at_any_step_leaves_nothing_and_is_told_from_ctrl_c(scratch_parent, sigterm_default, step, sig):
    """A service stop or `timeout` sends SIGTERM, a dropped ssh session SIGHUP: the mounts, verity devices, loops
    and scratch copies made so far are unmade as on Ctrl-C (before, the process ended at once with all of them
    left behind)."""
    machine = _Signalled(sig, step)
    with pytest.raises(Terminated) as stopped:
        experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader([]), compressors=(),
                       veritysetup=VS)
    assert stopped.value.exit_code == 128 + sig
    assert sigterm_default == []  # it never reached the default's stand-in
    assert machine.left() == (set(), set(), set())
    assert not list(scratch_parent.glob(".tunectl-explain-*"))
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # handlers are given back after the run


@pytest.mark.sigint  # SIGINT's handler is Python's default one after the run, whichever signal came
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_second_interrupt_while_undoing_does_not_stop_the_undoing(scratch_parent, sigterm_default, sig):
    """Ctrl-C pressed again (or a SIGTERM) while the first one's undoing runs: each step still runs to its end
    (a real umount started then ignores it too), so nothing is left mounted or attached."""
    machine = _Signalled(sig, "umount")
    with pytest.raises(KeyboardInterrupt):
        experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader([], interrupt_at=0),
                       compressors=(), veritysetup=VS)
    assert machine.left() == (set(), set(), set())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
@pytest.mark.parametrize("bystander", [False, True], ids=["alone", "another-thread-alive"])
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, id="INT", marks=pytest.mark.sigint),
                                 pytest.param(signal.SIGTERM, id="TERM"), pytest.param(signal.SIGHUP, id="HUP")])
def test_a_stop_while_a_variant_is_unmade_stops_the_run_once_it_is_unmade(scratch_parent, sigterm_default, sig,
                                                                          bystander):
    """Ctrl-C, a service stop's SIGTERM or a hangup while the first variant's mount is being undone: the undoing
    runs to its end, then the run stops as that signal asks (before, it was ignored and lost: the run went on
    to the next variant, and a SIGKILL after the stop's timeout would leave that one's mount and devices)."""
    machine = _Signalled(sig, "umount")
    reads: list = []
    with contextlib.ExitStack() as alive:
        if bystander:  # one sent to the process may be delivered to this thread instead
            done = threading.Event()
            thread = threading.Thread(target=done.wait, name="bystander")
            thread.start()
            alive.callback(thread.join)
            alive.callback(done.set)
        with pytest.raises(KeyboardInterrupt) as stopped:
            experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader(reads), compressors=(),
                           veritysetup=VS)
    assert len(reads) == 1 and len([c for c in machine.calls if c[0] == "mount"]) == 1  # no further variant
    tail = [c[0] if c[0] != VS else f"veritysetup {c[1]}" for c in machine.calls[-4:]]
    assert tail == ["umount", "veritysetup close", "losetup", "losetup"]  # the undoing ran to its end
    assert machine.left() == (set(), set(), set())
    assert not list(scratch_parent.glob(".tunectl-explain-*"))
    if sig == signal.SIGINT:
        assert type(stopped.value) is KeyboardInterrupt  # exit 130
    else:
        assert isinstance(stopped.value, Terminated) and stopped.value.exit_code == 128 + sig
    assert sigterm_default == []
    assert not {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} & signal.pthread_sigmask(signal.SIG_BLOCK, ())


def test_an_image_without_salt_gets_copies_without_salt():
    """The table prints "-" for no salt; veritysetup format takes "--salt=-" for none (without --salt it would
    draw a random one): `veritysetup format --salt=- --format=0 data hash` printed "Salt: -" (2.6.1)."""
    t = dmtable.parse_line("0 2097152 verity 1 259:1 259:2 4096 4096 262144 1 sha1 " + "01" * 20
                           + " - 2 ignore_corruption check_at_most_once")
    case = stacks.browser()
    layers = tuple(la.with_facts(replace(la.facts, dm_table=(t,))) if la.kind == "dm" else la
                   for la in case.stack.layers)
    verity, _ = experiment.plan_verity(replace(case.stack, layers=layers), VS)
    assert verity == experiment.Verity("sha1", 4096, 4096, 1, "-") and verity.format_args()[-1] == "--salt=-"


def test_a_veritysetup_that_used_another_salt_is_refused_and_leaves_nothing(scratch_parent):
    machine = FakeMachine(salt=SALT)  # it printed a salt of its own: the copies would not hash like the user's
    with pytest.raises(UsageError, match="used the salt c31bd1ce.*not the table's cdcd"):
        experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader([]), compressors=(),
                       veritysetup=VS)
    assert machine.left() == (set(), set(), set())
    assert not list(scratch_parent.glob(".tunectl-explain-*"))


def test_the_users_image_is_extracted_from_the_loop_device_not_its_backing_files_path(scratch_parent):
    """The backing file's path is a name its owner can point at another image once the loop holds the file open;
    the loop's device node gives the bytes that are mounted."""
    machine = FakeMachine()
    experiment.run(SimpleNamespace(run=machine.run), stacks.browser().stack, reader([]), compressors=(),
                   veritysetup=VS)
    [unsquash] = [c for c in machine.calls if c[0] == "unsquashfs"]
    data = experiment.data_loop(stacks.browser().stack)
    assert unsquash[-2] == f"/dev/{data.name}" and unsquash[-2] != "/srv/browser.img"


def test_scratch_goes_beside_the_image_only_when_no_other_user_can_rename_it_away(tmp_path, monkeypatch):
    """Root hands mksquashfs, veritysetup and mount paths below the scratch directory by name: in a directory
    another user can write, that user could rename it away and put a link in its place."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    (own / "img.sqfs").write_bytes(b"hsqs")
    assert experiment.scratch_parent(str(own / "img.sqfs")) == (str(own), None)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by others, no sticky bit
    (shared / "img.sqfs").write_bytes(b"hsqs")
    parent, note = experiment.scratch_parent(str(shared / "img.sqfs"))
    assert parent == str(tmp) and "not beside the image" in note and "writable by others" in note
    assert experiment.scratch_parent("/dev/loop7") == (str(tmp), None)  # a device: no file to sit beside


def test_the_path_inside_the_image_is_where_the_resolvers_walk_led_never_the_name_again(tmp_path):
    """--try extracts and reads the file at its path inside the image: from the walk the mount was found from
    (`FileLayer.reached`). Resolved again by name, a link put on the way since made it climb out (../../x) and
    the cold read opened that by name; a reached path outside the mount is refused, not read."""
    from tunectl.errors import UsageError
    from tunectl.explain.experiment import source_image
    from tunectl.record import replace

    case = stacks.browser()
    layers = list(case.stack.layers)
    # the name now leads elsewhere (a link in a directory of its path): only the walk's answer counts
    (tmp_path / "chrome").symlink_to("/etc/hostname")
    walked = replace(layers[0], path=str(tmp_path / "chrome"), reached="/opt/browser/bin/chrome")
    facts = replace(case.stack, layers=(walked.with_facts(layers[0].facts), *layers[1:]))
    assert source_image(facts) == ("/srv/browser.img", "bin/chrome")
    for outside in ("/etc/hostname", "/opt/browser", "/opt/browser2/x"):
        away = replace(layers[0], reached=outside).with_facts(layers[0].facts)
        with pytest.raises(UsageError, match="is not inside the squashfs mounted at /opt/browser"):
            source_image(replace(case.stack, layers=(away, *layers[1:])))
