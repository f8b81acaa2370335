"""This user's running launches, so that `tpuctl stacks` can find one: a small file per launch.

A launch that runs workers under the Supervisor registers itself while its
SIGQUIT handler is in place (a SIGQUIT to any other tpuctl would end it with a
core dump). The file names the launcher's pid and its log folder; `tpuctl
stacks` sends the launcher SIGQUIT and waits for the view it writes there
(LOG_DIR/stacks.txt). Files of launches that died without removing theirs
(SIGKILL) are recognised by their pid and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.errors import FAILED, TpuctlError
from tpuctl.launch.private_files import private_dir, write_private

LATEST_VIEW = "stacks.txt"  # in a launch's log folder: the newest stacks view
DEFAULT_WAIT_S = 30.0  # py-spy on every worker, over ssh, takes seconds


@dataclass(frozen=True)
class Entry:
    run_id: str
    pid: int
    log_dir: Path
    started: float


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
        write_private(path, json.dumps(record) + "\n")
        written = True
    except OSError:
        written = False
    try:
        yield
    finally:
        if written:
            with contextlib.suppress(OSError):
                path.unlink()


def running() -> list[Entry]:
    """The live launches, newest first; stale files are removed on the way."""
    entries = []
    try:
        paths = sorted(folder().glob("*.json"))
    except OSError:
        return []
    for path in paths:
        entry = _read(path)
        if entry is None:
            continue
        if _alive(entry.pid):
            entries.append(entry)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(entries, key=lambda e: e.started, reverse=True)


def _read(path: Path) -> Entry | None:
    try:
        if path.stat().st_size > 4096:
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Entry(str(raw["run_id"]), int(raw["pid"]), Path(str(raw["log_dir"])), float(raw["started"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # not ours, or damaged: never a reason to fail


def _alive(pid: int) -> bool:
    """A live tpuctl: a recycled pid now running something else does not count."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process holds that pid now
    try:
        return b"tpuctl" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: the signal test is all there is


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
    view = entry.log_dir / LATEST_VIEW
    before = _stamp(view)
    try:
        os.kill(entry.pid, signal.SIGQUIT)
    except OSError as err:
        raise TpuctlError(f"cannot signal launch {entry.run_id} (pid {entry.pid}): {err.strerror}", exit_code=FAILED) from None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if _stamp(view) not in (before, None):
            time.sleep(0.1)  # the view is written in one go; let a slow disk finish it
            try:
                return view.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
    raise TpuctlError(f"launch {entry.run_id} wrote no stacks within {wait_s:g}s", hint=f"its log folder: {entry.log_dir}", exit_code=FAILED)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino
