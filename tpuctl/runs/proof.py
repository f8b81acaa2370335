"""Proof that the pid a run record names is that run's process, before tpuctl signals it (`stop`, `stacks`, `profile`).

A record names a pid, and a pid names whatever process has it now: a record may be a dead launch's (its pid reused), a
copy, or name another run's folder. Signalled on its word whenever anyone held its folder's lock, such a record got an
unrelated process killed and a `stop-requested` planted in another run's folder (issue 46). So a pid is signalled only
when all of this holds, on this machine:

- the record is a file of this user's, in their own records folder that no one else can write, and says the same when
  read again (records.proven);
- its log folder is this user's and no one else can write it, and the folder's claim (run.json, RunFolder.claim) is a
  file of this user's that names this run and this pid;
- the process at that pid is this user's, started when the record says the run's process started (/proc/PID/stat's
  start time: a reused pid's process started later), and holds the claim's lock itself: /proc/PID/fdinfo shows the
  claim's flock on a descriptor of its own for that very file, not just "someone holds it";
- the signal goes through a pidfd opened before the checks, so a process that ends meanwhile cannot hand its pid to
  another one between the proof and the signal.

Where /proc cannot say (macOS, the BSDs), nothing is proven and nothing is signalled: one line says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.private_files import replace_in
from tpuctl.runs import owned, records
from tpuctl.runs.folder import RUN_FILE
from tpuctl.runs.records import RunRecord

_PROC_LIMIT = 64 << 10  # bytes of /proc/PID/stat or fdinfo read: a few hundred are there
_CLAIM_LIMIT = 4096  # run.json holds a run id, a pid and a time
_FDS = 1 << 16  # descriptors of the process looked at for the claim's (it is among its first)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class LiveRun:
    """A run's process, proven (see above), and its folder, open: what a command signals and writes in, for as long as
    the `live_run` block lasts."""

    record: RunRecord
    folder: int  # the run's log folder, opened and checked: a file is written in it, never in its path again
    pidfd: int | None  # None: no pidfd on this kernel; the pid is signalled right after the proof

    def signal(self, sig: int) -> bool:
        """Send `sig` to the run's process: False when it ended meanwhile; OSError when it cannot be sent."""
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            else:
                os.kill(self.record.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def write(self, name: str, text: str) -> None:
        """A small file in the run's folder as the proof opened it (`stop-requested`), never written through a link: a
        link there is replaced. OSError."""
        replace_in(self.folder, name, text)


def elsewhere(record: RunRecord) -> str | None:
    """This machine's name where the run was launched on another one, else None: its lock and its pid are that
    machine's, so from here (a home folder shared between machines) a live run there would look lost."""
    here = socket.gethostname()
    return here if record.host != here else None


def start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot: /proc/PID/stat's field 22 (proc(5)). None where it
    cannot be read (no such process, no /proc)."""
    data = _proc(f"/proc/{pid}/stat")
    fields = data.rpartition(b")")[2].split() if data else []  # field 2, the name in parentheses, may hold anything
    try:
        return int(fields[19])  # fields[0] is field 3
    except (IndexError, ValueError):
        return None


@contextlib.contextmanager
def live_run(record: RunRecord, doing: str = "signalled") -> Iterator[LiveRun | None]:
    """The run's process, proven, for as long as the block runs; None where the run has ended since it was found (no one
    holds its folder's lock, its folder or process is gone): nothing to signal. TpuctlError, one line saying `nothing
    DOING`, where the record, its folder or the process fails the proof: nothing is signalled or written then."""
    nothing = f"nothing {doing}"
    here = elsewhere(record)
    if here is not None:
        hint = f"its pid is a process of {record.host}'s: run the command there"
        raise TpuctlError(f"run {record.run_id} is supervised on {record.host}, not on this machine ({here}); {nothing}", hint=hint, exit_code=FAILED)
    records.proven(record, doing)
    with contextlib.ExitStack() as opened:
        folder = _folder(record, nothing)
        if folder is not None:
            opened.callback(os.close, folder)
        claim = None if folder is None else _claim(folder, record, nothing)  # closed by _claim where it raises
        if claim is not None:
            opened.callback(os.close, claim)
        if claim is None or not _held(claim):
            yield None
            return
        pidfd = _pidfd(record.pid)
        if pidfd == -1:
            yield None  # the process is gone
            return
        if pidfd is not None:
            opened.callback(os.close, pidfd)
        _check_process(record, claim, nothing)
        assert folder is not None
        yield LiveRun(record, folder, pidfd)


def _folder(record: RunRecord, nothing: str) -> int | None:
    """The run's log folder, open, once it is this user's and no one else can write it; None where it is gone. A symlink
    of the user's to a folder of theirs is followed (a --log-dir may be one)."""
    hint = "tpuctl signals a run only where its log folder is yours alone"
    return owned.open_own(Path(record.log_dir), f"run {record.run_id}'s log folder", nothing, follow=True, hint=hint)


def _claim(folder: int, record: RunRecord, nothing: str) -> int | None:
    """The folder's run.json, open, once it is a file of this user's that names this run and its pid; None where there
    is none (the folder was never claimed: no run holds it)."""
    where = one_line(os.path.join(record.log_dir, RUN_FILE))
    try:
        claim = os.open(RUN_FILE, _READ, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise TpuctlError(f"run {record.run_id}'s claim {where} cannot be read: {err.strerror or err}; {nothing}", exit_code=FAILED) from None
    try:
        info = os.fstat(claim)
        data = os.read(claim, _CLAIM_LIMIT + 1) if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() else b""
        said = json.loads(data) if 0 < len(data) <= _CLAIM_LIMIT else None
        named = (said.get("run_id"), said.get("pid")) if isinstance(said, dict) else None
    except (OSError, ValueError, RecursionError):
        named = None
    if named is None:
        os.close(claim)
        raise TpuctlError(f"run {record.run_id}'s claim {where} is not a file of yours that a launch wrote; {nothing}", exit_code=FAILED)
    if named != (record.run_id, record.pid):
        os.close(claim)
        hint = "a run's record names its own run's folder and process: this one was copied or edited"
        if named[0] != record.run_id:
            said = f"names the log folder {one_line(record.log_dir)}, which run {one_line(str(named[0]), 80)!r} claimed"
        else:
            said = f"names pid {record.pid}, but pid {one_line(str(named[1]), 20)} claimed its log folder {one_line(record.log_dir)}"
        raise TpuctlError(f"run {record.run_id}'s record {said}; {nothing}", hint=hint, exit_code=FAILED)
    return claim


def _held(claim: int) -> bool:
    """Whether some process holds the claim's lock (RunFolder.is_running, on the descriptor already checked)."""
    import fcntl

    try:
        fcntl.flock(claim, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(claim, fcntl.LOCK_UN)
    return False


def _pidfd(pid: int) -> int | None:
    """A pidfd for `pid`: -1 where no process has that pid, None where this system has no pidfds (Linux before 5.3)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1
    except (AttributeError, OSError):
        return None


def _check_process(record: RunRecord, claim: int, nothing: str) -> None:
    """That the process at the record's pid is this user's, started when the record says, and holds the claim's lock."""
    pid, run = record.pid, record.run_id
    if record.pid_start is None:
        hint = f"stop it from its own terminal (Ctrl-C), or make sure pid {pid} is its launch before you signal it yourself"
        said = f"run {run}'s record does not say when its process started (a launch of an older tpuctl): pid {pid} cannot be proven to be its run's"
        raise TpuctlError(f"{said}; {nothing}", hint=hint, exit_code=FAILED)
    started = start_time(pid)
    if started is None:
        raise TpuctlError(f"pid {pid}'s start time cannot be read from /proc: it cannot be proven to be run {run}'s process; {nothing}", exit_code=FAILED)
    if started != record.pid_start:
        said = f"pid {pid} is not run {run}'s process: it started at tick {started}, the run's at tick {record.pid_start} (the pid was reused)"
        raise TpuctlError(f"{said}; {nothing}", exit_code=FAILED)
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        owner = -1
    if owner != os.getuid():
        raise TpuctlError(f"pid {pid} is not a process of yours (uid {owner}): it is not run {run}'s; {nothing}", exit_code=FAILED)
    if not _holds(pid, claim):
        raise TpuctlError(f"pid {pid} does not hold run {run}'s claim on its log folder (another process does); {nothing}", exit_code=FAILED)


def _holds(pid: int, claim: int) -> bool:
    """Whether process `pid` holds the claim's flock on a descriptor of its own: one of /proc/PID/fd leads to the same
    file, and its fdinfo lists that lock (a `lock:` line: FLOCK ... WRITE, the claim's LOCK_EX)."""
    mine = os.fstat(claim)
    try:
        names = os.listdir(f"/proc/{pid}/fd")[:_FDS]
    except OSError:
        return False
    for name in names:
        try:
            info = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if (info.st_dev, info.st_ino) == (mine.st_dev, mine.st_ino) and _locks_it(_proc(f"/proc/{pid}/fdinfo/{name}")):
            return True
    return False


def _locks_it(fdinfo: bytes) -> bool:
    """An fdinfo whose descriptor holds an exclusive flock: `lock:\\t1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF`."""
    for line in fdinfo.splitlines():
        words = line.split()
        if len(words) > 4 and words[0] == b"lock:" and words[2] == b"FLOCK" and words[4] == b"WRITE":
            return True
    return False


def _proc(path: str) -> bytes:
    """A /proc file's bytes (bounded), b"" where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, _PROC_LIMIT)
    except OSError:
        return b""
    finally:
        os.close(fd)
