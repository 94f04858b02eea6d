"""tunectl bench on the fake kernel: stacks, restore on every exit path, the state lock, bad input.

Reads are simulated by a fake Io that accounts requests in the fake tree's
block/*/stat the way the block layer would: one request per read-ahead window.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import sys
import types

import pytest

from tests.fakesys import FakeTree, bump_block_stat, dm_verity_over_mmc, sata_hdd, zram_swap
from tests.tuning_helpers import Tunectl, snapshot_all
from tunectl.bench import stack as stacking
from tunectl.bench.runner import BenchError, Io, Sweep
from tunectl.bench.sweep import plan_points
from tunectl.context import Context
from tunectl.errors import ExitCode, TunectlError
from tunectl.profile.library import shipped_profile_dir
from tunectl.system.state import StateStore


class FakeIo:
    """Reads that cost per request: fewer, larger requests with deeper read-ahead, as on a real disk."""

    def __init__(self, tree: FakeTree, stack: stacking.Target, fail_at: int = 0, error: BaseException | None = None):
        self.tree, self.stack, self.fail_at, self.error = tree, stack, fail_at, error
        self.reads = 0
        self.drops: list[tuple[list[str], list[str]]] = []
        self.lock_free_during_read: list[bool] = []
        self.io = Io(self.read, self.drop)

    def drop(self, files: list[str], nodes: list[str]) -> None:
        self.drops.append((files, nodes))

    def read(self, path: str, limit: int, block: int) -> tuple[int, float]:
        self.reads += 1
        if self.reads == self.fail_at:
            raise self.error
        self.lock_free_during_read.append(_lock_free(self.stack_state_dir))
        ra = int(self.tree.sysfs.read(f"block/{self.stack.top.name}/queue/read_ahead_kb"))
        window = max(ra, 4) * 1024
        requests = -(-limit // window)
        for dev in self.stack.devices:
            bump_block_stat(self.tree, dev.name, reads=requests, sectors=limit // 512, read_ms=requests // 10,
                            queue_ms=requests // 5)
        return limit, requests * 100e-6 + limit / 2e9


def _lock_free(state_dir) -> bool:
    fd = os.open(state_dir / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        assert e.errno == errno.EWOULDBLOCK
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture
def tree(empty_fake_tree: FakeTree) -> FakeTree:
    dm_verity_over_mmc(empty_fake_tree)
    sata_hdd(empty_fake_tree)
    empty_fake_tree.add_disk("sdx", schedulers=("none", "mq-deadline"))
    zram_swap(empty_fake_tree)
    for name in ("dm-1", "mmcblk0", "sda", "sdx", "zram0"):
        bump_block_stat(empty_fake_tree, name)
    return empty_fake_tree


@pytest.fixture
def ctx(tree: FakeTree, tmp_path) -> Context:
    return Context(tree.sysfs, tree.udev, StateStore(tmp_path / "state"), [shipped_profile_dir()],
                   {"TUNECTL_DEV_ROOT": DEV})


DEV = "/nonexistent/dev"  # the device nodes of the machine the tree describes (FakeIo never opens them)


def _sweep(ctx, tree, target, read_aheads, schedulers, runs=2, **io_args):
    stack = stacking.resolve(ctx, target)
    fake = FakeIo(tree, stack, **io_args)
    fake.stack_state_dir = ctx.state.dir
    sweep = Sweep(ctx, stack, plan_points(read_aheads, schedulers, runs, seed=3), 8 << 20, 4096, fake.io)
    return stack, fake, sweep


def test_stack_of_a_verity_device(ctx):
    stack = stacking.resolve(ctx, "dm-1")
    assert (stack.top.name, [d.name for d in stack.below], [d.name for d in stack.scheduled]) == ("dm-1", ["mmcblk0"],
                                                                                                    ["mmcblk0"])
    assert stack.stacked and stack.kind == "device" and stack.read_path == f"{DEV}/dm-1"
    assert stack.offered == ["none", "mq-deadline", "kyber", "bfq"]
    part = stacking.resolve(ctx, "mmcblk0p2")  # a partition is read as named; its disk is tuned
    assert (part.read_path, part.top.name, part.stacked) == (f"{DEV}/mmcblk0p2", "mmcblk0", False)
    assert part.read_bytes == 4194304 * 512


def test_sweep_measures_and_restores_a_stack(ctx, tree):
    tree.sysfs.write("block/mmcblk0/queue/scheduler", "bfq")
    tree.sysfs.write("block/mmcblk0/queue/iosched/slice_idle", "3")
    tree.sysfs.write("block/dm-1/queue/read_ahead_kb", "512")
    before = snapshot_all(tree)
    stack, fake, sweep = _sweep(ctx, tree, "dm-1", [16, 256, 2048], ["none", "mq-deadline"])
    runs = sweep.run()
    assert snapshot_all(tree) == before  # bfq and its slice_idle back, nr_requests, read-ahead
    assert len(runs) == 12 and sweep.changed and not sweep.restore_failures
    assert not any(fake.lock_free_during_read)  # a concurrent apply waits for the whole sweep
    assert fake.drops[0] == ([], [f"{DEV}/dm-1", f"{DEV}/mmcblk0"])
    by_ra = {}
    for r in runs:
        assert [s.device for s in r.stats] == ["dm-1", "mmcblk0"]
        assert r.stats[0].reads > 0
        by_ra.setdefault(r.point.read_ahead_kb, set()).add(r.stats[0].reads)
    assert by_ra == {16: {512}, 256: {32}, 2048: {4}}
    assert runs[0].stats[0].avg_request_kib == 8192 / by_ra[runs[0].point.read_ahead_kb].pop()


def test_one_warm_read_before_the_first_point(ctx, tree):
    """What no drop between points reaches (squashfs's partial-block cache from 6.5, dm-verity's hash blocks) is filled
    once, unmeasured, before any point: the points' bytes and the deepest read-ahead beyond, under the lock."""
    stack, fake, sweep = _sweep(ctx, tree, "dm-1", [16, 2048], ["none"], runs=1)
    seen = []

    def warm(path, limit, block):
        seen.append((path, limit, block, len(fake.drops), fake.reads, _lock_free(ctx.state.dir)))

    sweep.io.warm = warm
    sweep.run()
    assert seen == [(f"{DEV}/dm-1", (8 << 20) + 2048 * 1024, 4096, 0, 0, False)]
    assert fake.reads == 2  # the points' reads, measured as before


@pytest.mark.parametrize("error", [KeyboardInterrupt(), TunectlError("disk went away"), OSError(5, "EIO")])
def test_restore_on_interrupt_and_error(ctx, tree, error):
    tree.sysfs.write("block/sda/queue/scheduler", "kyber")
    before = snapshot_all(tree)
    _, fake, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none", "bfq"], fail_at=3, error=error)
    with pytest.raises(type(error)):
        sweep.run()
    assert snapshot_all(tree) == before
    assert sweep.interrupted == isinstance(error, KeyboardInterrupt)
    assert len(sweep.runs) == 2 and sweep.restored and not sweep.restore_failures


def test_kernel_refusal_stops_the_sweep_and_restores(ctx, tree):
    before = snapshot_all(tree)
    tree.sysfs.refuse("sdx", "queue/scheduler", errno.EINVAL)
    _, fake, sweep = _sweep(ctx, tree, "sdx", [16, 256], ["mq-deadline", "none"], runs=1)
    with pytest.raises(BenchError) as e:
        sweep.run()
    assert e.value.exit_code == ExitCode.PARTIAL
    assert "cannot set sdx scheduler to" in e.value.message and "EINVAL" in e.value.message
    assert snapshot_all(tree) == before


def test_bio_based_stack_sweeps_read_ahead_only(ctx, tree):
    before = snapshot_all(tree)
    stack, fake, sweep = _sweep(ctx, tree, "zram0", [4, 64], [None], runs=1)
    assert stack.scheduled == [] and not stack.stacked
    runs = sweep.run()
    assert [r.point.scheduler for r in runs] == [None, None]
    assert snapshot_all(tree) == before


@pytest.fixture
def cli(tree, tmp_path) -> Tunectl:
    return Tunectl(tree, tmp_path / "state")


@pytest.mark.parametrize("argv, code, words", [
    (["bench", "sdq"], 2, "no block device 'sdq'"),
    (["bench", "/dev/tunectl-no-such-device"], 2, "cannot stat"),
    (["bench", "sda", "--read-ahead", "lots"], 2, "--read-ahead"),
    (["bench", "sda", "--read-ahead", "99999"], 2, "outside 0..65536"),
    (["bench", "sda", "--schedulers", "cfqq"], 2, "unknown scheduler"),
    (["bench", "sdx", "--schedulers", "kyber"], 2, "sdx does not offer kyber"),
    (["bench", "zram0", "--schedulers", "none"], 2, "no I/O scheduler"),
    (["bench", "sda", "--runs", "0"], 2, "--runs"),
    (["bench", "sda", "--size", "-1"], 2, "--size"),
    (["bench", "sda", "--csv", "/nonexistent-dir/x.csv"], 2, "not a writable directory"),
    (["bench", "sda", "--runs", "many"], 2, "invalid int value"),
    # a typo'd count planned every run at once (memory filled); a typo'd read size was its buffer (exit 70)
    (["bench", "sda", "--runs", "99999999999999999999999"], 2, "--runs: must be from 1 to 1000"),
    (["bench", "sda", "--read-size", "1 TiB"], 2, "--read-size: 1 TiB is more than 1 GiB"),
    (["bench", "sda", "--read-size", "99999999999999999999999"], 2, "is more than 1 GiB"),
    (["bench", "/proc/self/status"], 2, "is not a block device"),  # procfs: no device under the file
    (["bench", "/dev/null"], 2, "neither a block device nor a regular file"),
    # a valid sweep on a fake tree must not read the real machine's /dev/sda
    (["bench", "sda", "--read-ahead", "16"], 2, "use the real /sys"),
])
def test_bad_input(cli, tree, argv, code, words, capsys):
    before = snapshot_all(tree)
    writes = tree.sysfs.writes
    r = cli(*argv)
    err = r.err + capsys.readouterr().err
    assert r.code == code, (r.out, err)
    assert words in err
    assert "internal error" not in err and "Traceback" not in err
    assert tree.sysfs.writes == writes and snapshot_all(tree) == before


def test_a_target_that_is_not_there_says_what_to_name(cli):
    r = cli("bench", "/dev/tunectl-no-such-device", "--json")
    assert r.code == 2 and r.doc["error"]["message"] == "cannot stat /dev/tunectl-no-such-device: No such file or directory"
    assert r.doc["error"]["where"] == "/dev/tunectl-no-such-device"
    assert r.doc["error"]["hint"] == "name a block device (sda, /dev/sda: `lsblk` lists them) or an existing file on one"


def test_bad_input_as_json(cli):
    r = cli("bench", "sdq", "--json")
    assert r.code == 2 and r.doc["ok"] is False and "sdq" in r.doc["error"]["message"]
    assert r.doc["error"]["code"] == "unknown-device" and r.doc["error"]["where"] == "sdq"


def test_plot_without_matplotlib_is_a_clear_usage_error(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    r = cli("bench", "sda", "--plot", str(tmp_path / "x.png"))
    assert r.code == 2 and "--plot needs matplotlib" in r.err and "tunectl[plot]" in r.err


def test_sigterm_is_handled_like_ctrl_c(ctx, tree):
    import signal

    from tunectl.system.interrupts import Terminated

    before = snapshot_all(tree)
    handler = signal.getsignal(signal.SIGTERM)
    stack, fake, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none", "bfq"])
    real_read = fake.io.read

    def read(path, limit, block):
        if fake.reads == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread at the next bytecode
        return real_read(path, limit, block)

    fake.io.read = read
    with pytest.raises(Terminated):
        sweep.run()
    assert snapshot_all(tree) == before and sweep.interrupted
    assert signal.getsignal(signal.SIGTERM) is handler  # the handler lives only as long as the sweep


def _hang_up_at_read(fake, n: int) -> None:
    """SIGHUP to this process just before the sweep's `n`th read (the ssh session running bench dropped)."""
    import signal

    real_read = fake.io.read

    def read(path, limit, block):
        if fake.reads == n:
            os.kill(os.getpid(), signal.SIGHUP)
        return real_read(path, limit, block)

    fake.io.read = read


def test_a_hangup_restores_every_setting_too(ctx, tree):
    """SIGHUP (the ssh session running bench dropped) ends a sweep as SIGTERM does: every setting restored. Before,
    Python's default ended the process at once and left the devices with the sweep's read-ahead and scheduler."""
    import signal

    from tunectl.system.interrupts import Terminated

    before = snapshot_all(tree)
    reached: list[int] = []  # stands in for the default (the process would end), so the test can say so
    handler = signal.signal(signal.SIGHUP, lambda signum, frame: reached.append(signum))
    try:
        stack, fake, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none", "bfq"])
        _hang_up_at_read(fake, 2)
        with pytest.raises(Terminated) as stopped:
            sweep.run()
    finally:
        signal.signal(signal.SIGHUP, handler)
    assert reached == [] and stopped.value.exit_code == 129
    assert snapshot_all(tree) == before and sweep.interrupted


def test_a_hangup_during_the_restore_ends_the_run_once_every_setting_is_back(ctx, tree, monkeypatch):
    """The restore runs with the stops held back, not ignored: a SIGHUP then waits for it to end, then ends the
    run with 129 (before, it was lost and bench went on as if nothing came)."""
    from tunectl.bench import runner
    from tunectl.system.interrupts import Terminated

    before = snapshot_all(tree)
    real_restore = runner.restore
    restored: list[bool] = []

    def restore(*args):
        os.kill(os.getpid(), signal.SIGHUP)
        done = real_restore(*args)
        restored.append(True)
        return done

    monkeypatch.setattr(runner, "restore", restore)
    reached: list[int] = []  # stands in for the default (the process would end), so the test can say so
    handler = signal.signal(signal.SIGHUP, lambda signum, frame: reached.append(signum))
    try:
        stack, fake, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none"])
        with pytest.raises(Terminated) as stopped:
            sweep.run()
    finally:
        signal.signal(signal.SIGHUP, handler)
    assert restored == [True] and snapshot_all(tree) == before and len(sweep.runs) == len(sweep.points)
    assert reached == [] and stopped.value.exit_code == 129


def test_a_hangup_ignored_from_the_start_stays_ignored(ctx, tree):
    """`nohup tunectl bench`: the sweep outlives its terminal, as the user asked; it runs to its end."""
    import signal

    from tunectl.system.interrupts import Terminated

    handler = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        stack, fake, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none"])
        _hang_up_at_read(fake, 1)
        try:
            runs = sweep.run()
        except Terminated:  # a KeyboardInterrupt: pytest would end the whole session on it
            pytest.fail("a hangup the process was started ignoring stopped the sweep")
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, handler)
    assert not sweep.interrupted and len(runs) == len(sweep.points)


def test_bench_names_what_the_applied_profile_sets_on_the_swept_devices(ctx, tree, tmp_path):
    from tunectl.bench.report import BenchReport, active_wants
    from tunectl.tuning import intent

    stack = stacking.resolve(ctx, "sda")
    assert active_wants(ctx, stack) is None  # nothing applied: bench only measures
    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\nclasses:\n  rotational: {scheduler: mq-deadline, read_ahead_kb: 4096}\n")
    t = Tunectl(tree, ctx.state.dir, env={"TUNECTL_DEV_ROOT": DEV})
    assert t("apply", "-p", str(profile), "sda").code == 0
    wants = active_wants(ctx, stack)
    assert wants == {"profile": "p", "ref": intent.absolute_ref(str(profile)),
                     "settings": [{"device": "sda", "attribute": "scheduler", "value": "mq-deadline"},
                                  {"device": "sda", "attribute": "read_ahead_kb", "value": 4096}]}
    _, _, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none"], runs=1)
    sweep.run()
    assert BenchReport(stack, sweep, 3, ["none"], active=wants).to_json()["active_profile"] == wants
    profile.write_text("name: p\nclasses:\n  rotational: {read_ahead_kb: 16}\n")  # changed since applied: not used
    assert active_wants(ctx, stack) is None


@pytest.mark.parametrize("stop_signal, code", [(None, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_an_interrupted_sweep_is_a_report_whose_exit_code_says_the_signal(ctx, tree, stop_signal, code):
    """The report's exit code is the process's: 128 + the signal, as a shell shows it (SIGHUP said 143 before)."""
    import io
    import json

    from tests.harness import check_documents
    from tunectl.bench.report import BenchReport
    from tunectl.cli import Output

    stack, _, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none"], fail_at=3, error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        sweep.run()
    report = BenchReport(stack, sweep, 3, ["none"], interrupted=True, stop_signal=stop_signal)
    assert report.exit_code == code and report.recommendation is None
    for as_json in (False, True):
        stdout = io.StringIO()
        assert Output(stdout, io.StringIO(), as_json, False, 0, "bench").show(report) == code
        if as_json:  # what ran is in the document; the text said it on stderr (report_restore), stdout stays empty
            doc = json.loads(stdout.getvalue())
            assert doc["interrupted"] is True and len(doc["runs"]) == len(sweep.runs) == 2
            check_documents(stdout.getvalue())
        else:
            assert stdout.getvalue() == ""
    finished = BenchReport(stack, sweep, 3, ["none"])
    assert finished.exit_code == 0


def test_a_sweep_that_recommends_nothing_says_so_plainly(ctx, tree):
    """No read reached the devices at any point (squashfs's own cache from 6.5): no empty `classes:` block is
    printed to paste, but a line saying nothing is recommended, and why; under --json `fragment` is null."""
    import io
    import json

    from tests.harness import check_documents
    from tunectl.bench.diskstat import StatDelta
    from tunectl.bench.report import BenchReport
    from tunectl.bench.results import Placement, Run, recommend, summarise
    from tunectl.bench.sweep import Point
    from tunectl.cli import Output

    stack, _, sweep = _sweep(ctx, tree, "sda", [16, 256], ["none"], runs=1)
    sweep.run()
    report = BenchReport(stack, sweep, 3, ["none"])
    cold = [Run(Point("none", ra, 1), i, 32 << 20, 1.0 + i, (StatDelta("sda"),)) for i, ra in enumerate((16, 256))]
    report.recommendation = recommend(summarise(cold), Placement("sda", "rotational", False))
    out = io.StringIO()
    assert Output(out, io.StringIO(), False, False, 0, "bench").show(report) == 0
    text = out.getvalue()
    assert "recommendation: none: no read reached the devices at any point" in text, text
    assert "classes:" not in text and "paste into a profile" not in text
    out = io.StringIO()
    Output(out, io.StringIO(), True, False, 0, "bench").show(report)
    check_documents(out.getvalue())
    doc = json.loads(out.getvalue())["recommendation"]
    assert doc["fragment"] is None and doc["read_ahead_kb"] is None and "no read reached" in doc["reason"]


@pytest.mark.parametrize("option", ["--csv", "--plot"])
@pytest.mark.parametrize("output, words", [
    ("{tmp}/a-directory", "a directory, not a regular file"),
    ("/dev/full", "/dev/full: a character device, not a regular file"),
    ("{tmp}/a-file/x.csv", "is not a writable directory"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_sweep(cli, tree, tmp_path, option, output, words,
                                                                      monkeypatch):
    # Found after a sweep of minutes before; now before the first sysfs write. On a fake tree a sweep that got as
    # far as the device would stop at "use the real /sys": the output's refusal comes first.
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))  # --plot checks it is there
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("")
    before, writes = snapshot_all(tree), tree.sysfs.writes
    r = cli("bench", "sda", option, output.format(tmp=tmp_path))
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith(f"tunectl: error: {option}: cannot write ") and words in r.err, r.err
    assert "use the real /sys" not in r.err
    assert tree.sysfs.writes == writes and snapshot_all(tree) == before


def test_a_sweep_that_does_not_finish_leaves_the_named_output_as_it_was_and_no_temp_file(cli, tmp_path):
    old = tmp_path / "sweep.csv"
    old.write_text("yesterday's sweep\n")
    r = cli("bench", "sda", "--csv", str(old))  # stops after the output was made ready: a fake tree's device
    assert r.code == 2 and "use the real /sys" in r.err, r.err
    assert old.read_text() == "yesterday's sweep\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "sweep" in p.name) == ["sweep.csv"]


@pytest.mark.parametrize("option, name", [("--csv", "sweep.csv"), ("--plot", "sweep.png")])
def test_the_next_bench_sweeps_the_temp_file_a_killed_one_left(cli, tmp_path, monkeypatch, option, name):
    """A bench SIGKILLed mid-sweep leaves `.FILE.` + 12 hex digits beside FILE; the next run naming FILE removes
    it, says so, and leaves whatever else is there (another name, a link, a pipe)."""
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))  # --plot checks it is there
    left = tmp_path / f".{name}.5e1f0c3d9a27"
    left.write_text("half of a killed sweep's output")
    link = tmp_path / f".{name}.aaaaaaaaaaaa"
    link.symlink_to(tmp_path / "elsewhere")
    os.mkfifo(tmp_path / f".{name}.bbbbbbbbbbbb")
    (tmp_path / f".{name}.mine").write_text("a user's own file")
    r = cli("bench", "sda", option, str(tmp_path / name))  # a fake tree: stops after the output was made ready
    assert r.code == 2 and "use the real /sys" in r.err, r.err
    assert f"tunectl bench: removed {left}, left by a bench that was killed" in r.err, r.err
    assert not left.exists() and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if name in p.name) == [
        f".{name}.aaaaaaaaaaaa", f".{name}.bbbbbbbbbbbb", f".{name}.mine"]


def test_a_prepared_output_is_written_whole_at_a_fixed_mode_and_checked_again_at_commit(tmp_path):
    from tunectl.bench.export import fill_output, prepare_output

    target = tmp_path / "out.csv"
    os.umask(old_umask := os.umask(0o077))
    try:
        with prepare_output(str(target), "--csv") as pending:
            assert not target.exists()  # nothing at the path until the data is there
            assert fill_output(pending, b"a,b\n") is None
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"a,b\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    with prepare_output(str(target), "--csv") as pending:
        target.unlink()
        target.mkdir()  # what came to stand there during the sweep is refused, not replaced
        problem = fill_output(pending, b"new\n")
    assert problem and "a directory, not a regular file" in problem, problem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
