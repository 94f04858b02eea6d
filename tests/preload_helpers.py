"""Real files for the preload tests: the CLI, page-cache eviction one file at a time, util-linux fincore.

Files are evicted with POSIX_FADV_DONTNEED, never by dropping the machine's caches.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.ci import in_ci
from tests.harness import CliResult, run_cli

GOOD_HEADER = json.dumps({"format": "tunectl-preload", "version": 1})


def tunectl(*argv: str) -> CliResult:
    return run_cli(*argv, env={})


def assert_clean(r: CliResult) -> None:
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err


def evict(*paths: Path) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fincore(*paths: Path) -> dict[str, int]:
    """Resident bytes per file, as util-linux sees them."""
    out = subprocess.run(["fincore", "--json", "--bytes", "-o", "RES,FILE", *map(str, paths)],
                         check=True, capture_output=True, text=True).stdout
    return {row["file"]: int(row["res"]) for row in json.loads(out)["fincore"]}


def replay_resident(lst: Path, *paths: Path, options: tuple[str, ...] = ()) -> tuple[CliResult, dict[str, int]]:
    """Replay, waiting for its reads (by default it returns once they are sent, as WILLNEED does), then fincore at
    once; up to 3 tries, because another process on this shared machine may drop every cache
    (`echo 3 > drop_caches`) between the two.
    A replay that says `settled` true claims every read it sent had completed, so its files must be resident at
    once. One that says false met a disk never idle within its 10 s (others' I/O on this shared machine): its
    reads were sent but not all seen done, so wait for them to land, up to 10 s more, instead of failing on
    a disk someone else keeps busy."""
    for _ in range(3):
        r = tunectl("preload", "replay", str(lst), "--json", "--settle-timeout", "10", *options)
        resident = fincore(*paths)
        if r.code == 0 and r.doc.get("settled") is False:
            deadline = time.monotonic() + 10
            while not _all_resident(resident, paths) and time.monotonic() < deadline:
                time.sleep(0.05)
                resident = fincore(*paths)
        if r.code != 0 or _all_resident(resident, paths):
            break
    return r, resident


def _all_resident(resident: dict[str, int], paths: tuple[Path, ...]) -> bool:
    return all(resident[str(p)] >= p.stat().st_size for p in paths)


def make_files(root: Path, sizes: dict[str, int]) -> list[Path]:
    paths = []
    for name, size in sizes.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
        paths.append(p)
    os.sync()
    return paths


def collected(tmp_path: Path, files: int = 4, name: str = "x.list", folder: str = "files") -> Path:
    """A list collected (in process) from a folder of `files` small files; the folder is made anew."""
    import shutil

    d = tmp_path / folder
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for i in range(files):
        (d / f"f{i}").write_bytes(b"x" * (100 + i))
    lst = tmp_path / name
    r = run_cli("preload", "collect", str(d), "-o", str(lst))
    assert r.code == 0, r.err
    return lst


def cols_of(lst: Path) -> Path:
    """The columns file beside the list (`tunectl.preload.columns`)."""
    return Path(f"{lst}.cols")


DATAPASS_BUILD = ".venv/bin/python setup.py -q build_ext --inplace (needs gcc and Python's headers; scripts/bootstrap runs it)"


def datapass_required(environ: Mapping[str, str]) -> bool:
    """Whether a missing compiled data pass fails its tests rather than skips them: in CI (`in_ci`: CI=true or 1,
    as the VM tier reads it) and under `scripts/test` (`TUNECTL_REQUIRE_DATAPASS=1`), where bootstrap builds it
    and a skip would hide a broken build; a developer without a compiler gets a skip that says how to build it."""
    return environ.get("TUNECTL_REQUIRE_DATAPASS") == "1" or in_ci(environ)


def need_datapass(compiled: object, environ: Mapping[str, str]) -> None:
    """Fail or skip (`datapass_required`) the calling test when the compiled data pass was not built."""
    if compiled is not None:
        return
    said = f"the compiled data pass (tunectl/preload/_datapass.c) is not built: build it with {DATAPASS_BUILD}"
    if datapass_required(environ):
        pytest.fail(f"{said}; required here (CI=true or TUNECTL_REQUIRE_DATAPASS=1)", pytrace=False)
    pytest.skip(said)
