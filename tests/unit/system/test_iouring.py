"""system/iouring: statx through io_uring gives what os.stat gives, for every path, exactly once."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tunectl.system.iouring import StatxRing


def ring_or_skip(**kw: int) -> StatxRing:
    try:
        return StatxRing.open(**kw)
    except OSError as e:  # CI's kernel offers io_uring; a container's seccomp filter may not
        pytest.skip(f"io_uring refused here: {e}")


def tree(root: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        p = root / f"d{i % 7}" / f"f{i}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x" * (i * 37 % 9000))
        os.utime(p, ns=(0, 1_600_000_000_123_456_789 + i))  # nanoseconds survive the round trip
        paths.append(p)
    (root / "link").symlink_to(paths[3])
    return [*paths, root / "link"]


@pytest.mark.parametrize("entries, workers", [(256, 16), (4, 2)])  # (4, 2): slots reused while others run
def test_statx_all_agrees_with_os_stat_for_every_path(tmp_path: Path, entries: int, workers: int) -> None:
    paths = tree(tmp_path, 700)
    bad = {tmp_path / "missing": errno.ENOENT, paths[0] / "below-a-file": errno.ENOTDIR,
           tmp_path / ("n" * 300): errno.ENAMETOOLONG}
    asked = [*paths, *bad]
    with ring_or_skip(entries=entries, workers=workers) as ring:
        results = list(ring.statx_all([os.fsencode(p) for p in asked]))
    assert sorted(i for i, _ in results) == list(range(len(asked)))  # each path once
    got = dict(results)
    for i, p in enumerate(paths):
        st = os.lstat(p)  # the link itself: the ring stats with AT_SYMLINK_NOFOLLOW
        assert got[i] == (st.st_ino, st.st_size, st.st_mtime_ns, (os.major(st.st_dev), os.minor(st.st_dev)),
                          st.st_mode), p
    for i, (p, err) in enumerate(bad.items(), start=len(paths)):
        assert got[i] == -err, p


def test_an_empty_batch_and_a_second_batch_on_one_ring(tmp_path: Path) -> None:
    p = tree(tmp_path, 5)[0]
    with ring_or_skip() as ring:
        assert list(ring.statx_all([])) == []
        assert sorted(i for i, _ in ring.statx_all([os.fsencode(p)] * 300)) == list(range(300))


def test_a_pass_abandoned_part_way_waits_for_its_requests_and_the_ring_stays_usable(tmp_path: Path) -> None:
    paths = [os.fsencode(p) for p in tree(tmp_path, 700)]
    ring = ring_or_skip(entries=8, workers=4)
    with ring:
        abandoned = ring.statx_all(paths)
        assert len([next(abandoned) for _ in range(3)]) == 3
        abandoned.close()  # as when the consumer raises: the kernel's requests are waited for, not left writing
        # A second pass sees only its own completions: each index once, each answer right.
        second = dict(ring.statx_all(paths[:50]))
        assert sorted(second) == list(range(50))
        assert all(second[i][0] == os.stat(paths[i]).st_ino for i in range(50))
        with pytest.raises(RuntimeError):  # one pass at a time
            both = ring.statx_all(paths)
            next(both)
            next(ring.statx_all(paths))
    ring.close()  # a second close does nothing (and closes no one else's descriptor)


def test_a_pass_whose_submit_fails_part_way_takes_back_what_the_kernel_did_not_read(tmp_path: Path) -> None:
    """Entries written to the ring but never submitted (io_uring_enter failed) are taken back from the kernel's
    own head: the next pass on the ring submits only its own, and each of its answers is right."""
    paths = [os.fsencode(p) for p in tree(tmp_path, 300)]
    ring = ring_or_skip(entries=8, workers=4)
    with ring:
        real, calls = ring._enter, []

        def enter(to_submit: int, min_complete: int) -> int:
            calls.append(to_submit)
            if len(calls) == 3:  # the third round's entries are published, then the submit fails
                raise OSError(errno.EBUSY, "io_uring_enter: Device or resource busy")
            return real(to_submit, min_complete)

        ring._enter = enter
        failed = ring.statx_all(paths)
        with pytest.raises(OSError):
            list(failed)
        ring._enter = real
        assert ring._sqv[ring._sq_tail] == ring._sqv[ring._sq_head]  # nothing left for the kernel to read
        second = dict(ring.statx_all(paths[:40]))
        assert sorted(second) == list(range(40))
        assert all(second[i][0] == os.lstat(paths[i]).st_ino for i in range(40))
