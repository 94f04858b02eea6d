"""`tunectl explain` on the fake kernel: the stack's facts from sysfs and dmsetup, findings, refusals."""

from __future__ import annotations

import pytest

from tests.fakesys import FakeTree, dm_verity_over_mmc, lvm_over_md
from tests.tuning_helpers import Tunectl
from tunectl.errors import ExitCode
from tunectl.owners.model import KINDS
from tunectl.system.interrupts import Terminated
from tunectl.system.runner import Completed

VERITY = "0 262144 verity 1 179:2 179:3 4096 4096 32768 1 sha256 " + "ab" * 32 + " " + "cd" * 32 + "\n"


@pytest.fixture
def tun(empty_fake_tree: FakeTree, tmp_path) -> Tunectl:
    dm_verity_over_mmc(empty_fake_tree)
    lvm_over_md(empty_fake_tree)
    t = Tunectl(empty_fake_tree, tmp_path / "state")
    calls = []

    def run(argv, timeout=60, check=True, input_text=None):
        calls.append(list(argv))
        if argv[:2] == ["dmsetup", "table"] and argv[-1] == "vroot":
            return Completed(tuple(argv), 0, VERITY, "")
        return Completed(tuple(argv), 0, "0 8380416 linear 9:0 2048\n", "")

    t.ctx.run = run
    t.calls = calls
    return t


def test_a_verity_device_shows_its_table_and_the_disk_that_decides(tun):
    r = tun("explain", "dm-1", "--json")
    assert r.code == 0
    layers = {la["name"]: la for la in r.doc["layers"]}
    assert [la["kind"] for la in r.doc["layers"]] == ["dm", "disk"]
    verity = layers["dm-1"]["dm"]
    assert verity["subtype"] == "verity"
    assert verity["table"][0]["hash_algorithm"] == "sha256" and verity["table"][0]["data_block_size"] == 4096
    assert ["dmsetup", "table", "--", "vroot"] in tun.calls
    assert layers["mmcblk0"]["queue"]["queue_depth"] == 64
    assert layers["dm-1"]["queue"]["nr_requests"] is None  # bio-based: no requests to count
    owners = layers["mmcblk0"]["owners"]
    assert set(owners) == {"scheduler", "read_ahead_kb", "max_sectors_kb", "nr_requests"}
    assert all(o["kind"] in KINDS and o["detail"] for o in owners.values())  # tunectl's owners (#31)
    found = {f["rule"]: f for f in r.doc["findings"]}
    assert "dm-1 (verity) is bio-based" in found["EX001"]["evidence"][0]
    assert r.doc["cold"] is None  # a device is not read unless asked
    assert {rule["id"] for rule in r.doc["rules"]} >= {"EX001", "EX003", "EX004"}


def test_text_names_layers_and_findings(tun):
    r = tun("explain", "dm-1")
    assert r.code == 0
    assert "verity data/hash blocks 4096/4096, sha256" in r.out
    assert "EX001 dm has no scheduler: the disk below decides (dm-1)" in r.out


def test_lvm_over_md(tun):
    r = tun("explain", "dm-2", "--json")
    kinds = [(la["kind"], la["name"]) for la in r.doc["layers"]]
    assert kinds[:2] == [("dm", "dm-2"), ("md", "md0")]
    assert {("disk", "sdc"), ("disk", "sdd")} <= set(kinds)
    assert r.doc["layers"][0]["dm"]["table"][0]["type"] == "linear"


@pytest.mark.parametrize("option", ["--cold", "--trace", "--try"])
def test_reading_options_need_a_file(tun, option):
    r = tun("explain", "dm-1", option)
    assert r.code == ExitCode.USAGE
    assert "is not a file" in r.err


def test_an_unknown_target_is_a_usage_error(tun):
    r = tun("explain", "nosuchdev", "--json")
    assert r.code == ExitCode.USAGE
    assert r.doc["format"] == "tunectl-error"


@pytest.mark.parametrize("size", ["1 TiB", "99999999999999999999999"])
def test_a_read_size_past_one_gib_is_a_usage_error(tun, size):
    """A typo'd read size was a MemoryError (1 TiB: its buffer) or an OverflowError: "internal error", exit 70."""
    r = tun("explain", "dm-1", "--read-size", size)
    assert r.code == ExitCode.USAGE
    assert f"--read-size: {size} is more than 1 GiB" in r.err
    assert "internal error" not in r.err


def test_try_compressors_are_checked(tun):
    r = tun("explain", "dm-1", "--try", "--try-compressors", "xz,brotli")
    assert r.code == ExitCode.USAGE and "'brotli' is not a squashfs compressor" in r.err


def test_try_compressors_may_be_empty_for_none(tun):
    """'' is documented as "none besides the image's own" (the VM tier's explain group uses it): not the parser's
    usage error for an empty option value; the command goes on to its own checks (here: dm-1 is not a file)."""
    r = tun("explain", "dm-1", "--try", "--try-compressors", "")
    assert r.code == ExitCode.USAGE and "is not a file" in r.err, r.err
    assert "the value is empty" not in r.err


def test_variants_cover_sizes_compressors_and_direct_io():
    from tunectl.explain.experiment import variants

    vs = variants(4096, "gzip", True)
    assert vs[0].as_is and (vs[0].block_size, vs[0].compressor, vs[0].direct_io) == (4096, "gzip", True)
    assert {(v.block_size, v.compressor, v.direct_io) for v in vs} == {
        (b, c, d) for b in (131072, 1048576) for c in ("gzip", "xz") for d in (True, False)} | {
        (4096, "gzip", True), (4096, "gzip", False)}
    assert {v.compressor for v in variants(4096, "gzip", False, ())} == {"gzip"}


def test_explain_describes_the_resolvers_own_layers(tun):
    """No parallel stack (#29, #33): the layers explain describes are the resolver's, each with typed facts."""
    from tunectl.devices import stack as stacks
    from tunectl.explain import facts as reading
    from tunectl.explain.investigate import resolve
    from tunectl.explain.model import BlockFacts

    resolver, stack = resolve(tun.ctx, "dm-2")
    described = reading.read(tun.ctx, resolver, stack, "dm-2")
    assert [type(la) for la in described.layers] == [type(la) for la in stack.layers]
    assert list(described.layers) == list(stack.layers)  # the same layers, only their facts added
    assert all(la.facts is None for la in stack.layers)
    dm, md = described.layers[0], described.layers[1]
    assert isinstance(dm, stacks.DmLayer) and isinstance(dm.facts, BlockFacts) and dm.facts.target("linear")
    assert isinstance(md, stacks.MdLayer) and md.facts.md is not None and md.facts.queue is not None


@pytest.mark.parametrize("raised, code, said", [(KeyboardInterrupt, 130, "interrupted"), (Terminated, 143, "terminated")])
def test_ctrl_c_and_sigterm_end_a_command_with_the_shells_numbers(tun, monkeypatch, raised, code, said):
    """`explain --try` turns SIGTERM into Terminated (its mounts and loops are unmade on the way out): the command
    ends as a shell reports a process SIGTERM ended (143), Ctrl-C still 130, each said on stderr."""
    from tunectl.explain import investigate

    def stopped(*args, **kwargs):
        raise raised()

    monkeypatch.setattr(investigate, "investigate", stopped)
    r = tun("explain", "dm-1")
    assert (r.code, r.err.strip()) == (code, f"tunectl: {said}")



@pytest.mark.parametrize("options, leave", [
    ({}, "add --no-cold"),
    ({"cold": False, "trace": True}, "leave out --trace"),
    ({"compare": "/srv/other", "experiments": True}, "add --no-cold and leave out --compare and --try"),
    ({"cold": True}, "leave out --cold"),
])
def test_without_root_the_hint_names_what_to_leave_out(monkeypatch, options, leave):
    """The hint said "leave it out: --no-cold shows the facts only", also to a command that had --no-cold already
    (`explain --no-cold --try FILE`, `--no-cold --trace`): it names the options of the command as given."""
    import os

    from tunectl.errors import NotPermitted
    from tunectl.explain import investigate

    req = investigate.Request("/srv/file", options.pop("cold", None), 4096, 1 << 20, **options)
    assert investigate._leave_out(req) == leave
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NotPermitted) as refused:
        investigate._require_root("--try", "leave out --try")
    assert refused.value.hint == "run as root, or leave out --try: the facts and findings alone need no root"
