"""Stopping a run from another terminal (`tpuctl stop`): what Ctrl-C does to an attached launch, asked for by file and signal.

The stop-request file goes first, so the run can tell a stop asked for from a lost terminal
(a Kubernetes job is deleted then; without it the job outlives its follower). Then SIGTERM
to the run's supervisor, which stops every worker (the process engine), cancels a Vertex
job (the job engine) and writes its end: `stopped`. The pid is signalled only while the run
holds its folder's lock on this machine: a dead launch's pid may be any process's by now,
and a pid on another host is not this host's process at all.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable

from tpuctl import endings
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.private_files import write_private
from tpuctl.runs import records
from tpuctl.runs.records import RunRecord

DEFAULT_WAIT_S = 90.0  # workers: a grace period, then SIGKILL (seconds); a Vertex job: up to 60 s until it says CANCELLED
_POLL_S = 0.1


def elsewhere(record: RunRecord) -> str | None:
    """This machine's name where the run was launched on another one, else None: its lock and its pid are that
    machine's, so from here (a home folder shared between machines) a live run there would look lost."""
    here = socket.gethostname()
    return here if record.host != here else None


def stop(record: RunRecord, notice: Callable[[str], None], warn: Callable[[str], None], wait_s: float = DEFAULT_WAIT_S) -> RunRecord:
    """Ask the run to stop and wait until it has; the record as it ended. A run that had ended is returned as it is."""
    if record.state != endings.RUNNING:
        return record
    here = elsewhere(record)
    if here is not None:
        raise TpuctlError(
            f"run {record.run_id} is supervised on {record.host}, not on this machine ({here})",
            hint=f"run `tpuctl stop {record.run_id}` on {record.host}",
            exit_code=FAILED,
        )
    folder = record.folder
    try:
        write_private(folder.stop_request, f"{time.time():.3f} pid {os.getpid()}\n")
    except OSError as err:
        raise TpuctlError(f"cannot ask run {record.run_id} to stop: {folder.stop_request}: {err.strerror or err}", exit_code=FAILED) from None
    try:
        if folder.is_running():  # else it ended since it was found, and its pid is nobody's business
            os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it ended between the two
    except OSError as err:
        raise TpuctlError(f"cannot signal run {record.run_id} (pid {record.pid}): {err.strerror or err}", exit_code=FAILED) from None
    deadline = time.monotonic() + wait_s
    if folder.is_running():
        notice(f"stopping {record.run_id} (pid {record.pid}): waiting up to {wait_s:g}s for its workers to stop")
    while folder.is_running():
        if time.monotonic() > deadline:
            raise TpuctlError(
                f"run {record.run_id} did not stop within {wait_s:g}s",
                hint=f"it may still be stopping: `tpuctl runs` shows its state; `tpuctl stop {record.run_id} --wait S` waits longer",
                exit_code=FAILED,
            )
        time.sleep(_POLL_S)
    return records.find(record.run_id, warn)[0]  # read afresh: its end is written now
