"""`preload record`: run a command and list the files it opens.

By fanotify where permitted (CAP_SYS_ADMIN), else by a before/after diff of
page-cache residency below the scope.
"""

from __future__ import annotations

import errno
import os
import stat as stat_
from collections.abc import Sequence

from tunectl.errors import ExitCode, NotPermitted, UsageError
from tunectl.preload import order
from tunectl.preload.collect import CollectReport, describe_file, entry_for, open_or_skip, walk
from tunectl.preload.listfile import write_list
from tunectl.preload.listing import Entry
from tunectl.preload.skip import UNREADABLE, Skip
from tunectl.record import field, record
from tunectl.system import pagecache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunectl.system.roots import Roots


@record
class RecordReport(CollectReport):
    method: str = "fanotify"
    command: list[str] = field(default_factory=list)
    command_status: int = 0
    other_processes: int = 0  # opens by processes outside the command's tree, left out
    gone_processes: int = 0  # processes that exited before they could be placed: their opens are kept

    def to_json(self) -> dict:
        doc = super().to_json()
        doc.update(method=self.method, command=self.command, command_status=self.command_status,
                   ignored_opens=self.other_processes, exited_processes_kept=self.gone_processes)
        return doc

    @property
    def exit_code(self) -> ExitCode:
        """Collect's (3 when a file could not be read). The command's own status is reported, not passed on: the
        list was still written."""
        return super().exit_code


def _start(command: Sequence[str], stdout_to_stderr: bool):
    import subprocess

    try:  # under --json our stdout carries one document: the command's output goes to stderr
        return subprocess.Popen(list(command), stdout=2 if stdout_to_stderr else None)
    except OSError as e:
        raise UsageError(f"cannot run {command[0]}: {os.strerror(e.errno or errno.EIO)}") from None


def _under(path: str, scope: Sequence[str]) -> bool:
    return any(path == s or path.startswith(s.rstrip("/") + "/") for s in scope)


def _record_fanotify(report: RecordReport, command: Sequence[str], scope: Sequence[str], quiet: bool) -> None:
    from tunectl.system import fanotify

    me = os.getpid()
    seen: dict[tuple[int, int], Entry] = {}
    with fanotify.Watch(scope) as watch:
        proc = _start(command, quiet)
        verdict: dict[int, bool] = {proc.pid: True}

        def ours(pid: int) -> bool:
            """In the command's process tree; a process already gone counts as ours (most likely it was)."""
            chain = []
            while pid not in verdict:
                chain.append(pid)
                parent = fanotify.parent_pid(pid)
                if parent is None or parent <= 1 or len(chain) > 64:
                    result = parent is None
                    report.gone_processes += result
                    break
                pid = parent
            else:
                result = verdict[pid]
            for p in chain:
                verdict[p] = result
            return result

        def drain() -> None:
            for event in watch.events():
                try:
                    if event.pid == me:
                        continue
                    if not ours(event.pid):
                        report.other_processes += 1
                        continue
                    st = os.fstat(event.fd)
                    if not stat_.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                        continue
                    path = fanotify.path_of(event.fd)
                    if path and _under(path, scope):
                        ranges = ((0, st.st_size),) if st.st_size else ()
                        seen[(st.st_dev, st.st_ino)] = entry_for(path, event.fd, st, ranges)
                except OSError:
                    continue
                finally:
                    os.close(event.fd)

        while proc.poll() is None:
            watch.wait(0.05)
            drain()
        drain()
        report.command_status = proc.returncode
        if watch.overflowed:
            report.notes.append("the fanotify queue overflowed: some opens were lost")
    report.entries.extend(seen.values())


def _resident_map(scope: Sequence[str], skipped: list[Skip],
                  hidden: list[str] | None = None) -> dict[tuple[str, int], tuple[str, bytes]]:
    """Each regular file below `scope` whose residency this caller can see -> its path and mincore vector. What
    cannot be read goes to `skipped` as collect says it (a scope path not walked, a file it cannot open); a file
    whose residency is hidden from this caller (`pagecache.residency_observable`) to `hidden`; out of
    descriptors stops the record (no list written), as it stops collect."""
    snapshot = {}
    for found in walk(scope):
        if isinstance(found, Skip):  # a scope path not walked: nothing of it in the diff
            skipped.append(found)
            continue
        path = found.path
        fd, skip = open_or_skip(found)
        if fd < 0:
            skipped.extend([skip] if skip else [])
            continue
        try:
            st = os.fstat(fd)
            if not stat_.S_ISREG(st.st_mode):
                continue
            if pagecache.residency_observable(path, st):
                snapshot[(pagecache.device_of(st), st.st_ino)] = (path, pagecache.residency(fd, st.st_size))
            elif hidden is not None:
                hidden.append(path)
        except OSError as e:
            skipped.append(Skip(path, UNREADABLE, os.strerror(e.errno or errno.EIO)))
        finally:
            os.close(fd)
    return snapshot


def _record_diff(report: RecordReport, command: Sequence[str], scope: Sequence[str], quiet: bool) -> None:
    before = _resident_map(scope, [])  # what cannot be read now is said by the walk after the command
    proc = _start(command, quiet)
    report.command_status = proc.wait()
    unread: list[Skip] = []
    hidden: list[str] = []
    after = _resident_map(scope, unread, hidden)
    for key, (path, vec) in after.items():
        old = before.get(key, (path, b""))[1]
        new = bytes(1 if (v & 1 and not (i < len(old) and old[i] & 1)) else 0 for i, v in enumerate(vec))
        if 1 not in new:
            continue
        entry, skip = describe_file(path)
        if skip:
            unread.append(skip)
        if entry and (entry.device, entry.inode) == key:
            report.entries.append(entry._replace(ranges=tuple(order.pages_to_ranges(new, entry.size))))
    if os.geteuid() != 0:
        from tunectl.units import counted

        # A file this user may not read is one their command (the same user) could not read either, short of
        # gaining privileges (sudo, setuid): not missing from the record, so counted in a note, not skipped. Else
        # every user's record of the default scope exits 3 (/etc/shadow, /etc/gshadow ...).
        denied = [s for s in unread if s.status == UNREADABLE and not os.access(s.path, os.R_OK)]
        unread = [s for s in unread if s not in denied]
        if denied:
            report.notes.append(f"{counted(len(denied), 'file')} below the scope you may not read left out (your "
                                "command could not read them either; record as root, or name a narrower --scope)")
        # The kernel's mincore(2) shows a file's cache only to its owner, to a user who may write it, or to root
        # (it leaked what others read; pagecache.residency_observable): the diff cannot see what the command read
        # of any other file, and a user's record of /usr listed nothing without a word. A note, not a skip (exit
        # 0): the files are readable, only their cache is hidden, and every user's record of the default scope
        # would exit 3; as root (fanotify, or the diff) every file is seen.
        if hidden:
            report.notes.append(f"{counted(len(hidden), 'file')} below the scope left out: the kernel shows their "
                                "page cache only to their owner, a user who may write them, or root, so what your "
                                "command read of them cannot be seen; record as root to list them")
    report.skipped.extend(sorted(unread, key=lambda s: s.path))
    report.notes.append("residency diff: only pages the command brought into the cache are seen; "
                        "files that were cached already are missed (drop caches first for a full record)")


def record(command: Sequence[str], list_path: str, method: str = "auto", scope: Sequence[str] = (),
           stdout_to_stderr: bool = False, roots: Roots | None = None) -> RecordReport:
    """Run `command` and list what it opened: by fanotify in the order it opened the files (a replay on a
    rotational disk keeps that order bin by bin), else by a residency diff; with `roots`, the metadata too."""
    if not command:
        raise UsageError("record needs a command after --", hint="tunectl preload record -o LIST -- CMD ARGS...")
    scope = [os.path.abspath(s) for s in scope]
    for s in scope:
        if not os.path.isdir(s):
            raise UsageError(f"--scope {s}: no such directory")
    report = RecordReport(list_path, [], method=method, command=list(command))
    if method in ("auto", "fanotify"):
        try:
            report.method = "fanotify"
            _record_fanotify(report, command, scope or ["/"], stdout_to_stderr)
        except NotPermitted as e:
            if method == "fanotify":
                raise
            report.method = "diff"
            report.notes.append(f"{e.message}; falling back to a before/after residency diff")
    if report.method == "diff":
        _record_diff(report, command, scope or ["/usr", "/etc"], stdout_to_stderr)
    if report.command_status:
        report.notes.append(f"the command exited with status {report.command_status}")
    report.record_metadata(roots)
    report.place(roots)
    write_list(list_path, report.entries, report.metadata, time_order=report.method == "fanotify",
               mounts=report.mounts, placed=report.placed)
    return report


