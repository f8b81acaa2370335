"""This user's running launches, so that `tpuctl stacks` can find one: a small file per launch.

A launch that runs workers under the Supervisor registers itself while its
SIGQUIT handler is in place (a SIGQUIT to any other tpuctl would end it with a
core dump). The file names the launcher's pid and its log folder; `tpuctl
stacks` sends the launcher SIGQUIT and waits for the view it writes there
(LOG_DIR/stacks.txt).

A record is trusted only while its launch holds the lock it took when it wrote the
record (private_files.hold_new): a launch that died without removing its file
(SIGKILL) leaves a file nobody holds, which is removed, whatever process has its pid
now. A pid alone, or a command line that mentions tpuctl, proves nothing: SIGQUIT to
the wrong process would kill it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.errors import FAILED, TpuctlError
from tpuctl.inputs import read_small_bytes
from tpuctl.private_files import hold_new, is_held, private_dir
from tpuctl.runs.folder import RunFolder

DEFAULT_WAIT_S = 30.0  # py-spy on every worker, over ssh, takes seconds


@dataclass(frozen=True)
class Entry:
    run_id: str
    pid: int
    log_dir: Path
    started: float
    record: Path  # its file in the registry, locked while the launch lives


def folder() -> Path:
    from platformdirs import user_state_path

    return user_state_path("tpuctl") / "running"


@contextlib.contextmanager
def registered(run_id: str, log_dir: Path) -> Iterator[None]:
    """While the block runs, this launch is findable. A registry that cannot be written costs
    only `tpuctl stacks` (SIGQUIT to the launch still works), never the launch."""
    path = folder() / f"{run_id}.json"
    record = {"run_id": run_id, "pid": os.getpid(), "log_dir": str(log_dir.resolve()), "started": time.time()}
    try:
        private_dir(path.parent)
        held: int | None = hold_new(path, json.dumps(record) + "\n")
    except (OSError, TpuctlError):
        held = None
    try:
        yield
    finally:
        if held is not None:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(held)


def running() -> list[Entry]:
    """The live launches, newest first; records of dead ones are removed on the way."""
    entries = []
    try:
        paths = sorted(folder().glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            alive = is_held(path)
        except OSError:
            continue
        entry = _read(path)
        if entry is None:
            continue  # being written (the lock comes first), or not ours: never a reason to fail
        if alive and entry.pid > 0:
            entries.append(entry)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(entries, key=lambda e: e.started, reverse=True)


def _read(path: Path) -> Entry | None:
    try:
        raw = json.loads(read_small_bytes(path, "run record", limit=4096) or b"")
        return Entry(str(raw["run_id"]), int(raw["pid"]), Path(str(raw["log_dir"])), float(raw["started"]), path)
    except (TpuctlError, ValueError, KeyError, TypeError, AttributeError):
        return None


def find(run_id: str | None) -> Entry:
    entries = running()
    if not entries:
        raise TpuctlError("no running launch of yours was found", hint="start one with tpuctl launch", exit_code=FAILED)
    if run_id is None:
        return entries[0]
    for entry in entries:
        if entry.run_id == run_id:
            return entry
    names = ", ".join(e.run_id for e in entries[:5])
    raise TpuctlError(f"no running launch {run_id!r}", hint=f"running now: {names}", exit_code=FAILED)


def request_stacks(entry: Entry, wait_s: float = DEFAULT_WAIT_S) -> str:
    """SIGQUIT the launch and return the view it writes (the same it prints on its own console)."""
    view = RunFolder(entry.log_dir).stacks_view
    before = _stamp(view)
    try:
        if not is_held(entry.record):  # ended since it was found: its pid may be another process's by now
            raise ProcessLookupError(errno.ESRCH, "the launch has ended")
        os.kill(entry.pid, signal.SIGQUIT)
    except OSError as err:
        raise TpuctlError(f"cannot signal launch {entry.run_id} (pid {entry.pid}): {err.strerror}", exit_code=FAILED) from None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if _stamp(view) not in (before, None):
            time.sleep(0.1)  # the view is written in one go; let a slow disk finish it
            try:  # a bounded read of a regular file, as every read of tpuctl's (a FIFO there would block)
                data = read_small_bytes(view, "stacks view", exit_code=FAILED)
            except TpuctlError:
                continue
            if data is not None:
                return data.decode("utf-8", "replace")
    raise TpuctlError(f"launch {entry.run_id} wrote no stacks within {wait_s:g}s", hint=f"its log folder: {entry.log_dir}", exit_code=FAILED)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino
