"""Stopping a run from another terminal (`tpuctl stop`): what Ctrl-C does to an attached launch, asked for by file and signal.

The stop-request file goes first, so the run can tell a stop asked for from a lost terminal
(a Kubernetes job is deleted then; without it the job outlives its follower). Then SIGTERM
to the run's supervisor, which stops every worker (the process engine), cancels a Vertex
job (the job engine) and writes its end: `stopped`. Both only once the supervisor is proven
to be the run's (runs/proof.py: its record, its folder, its start time and its own hold on the
folder's lock, on this machine): a record may name a pid that is any process's by now, or
another run's folder, and such a record is refused in one line with nothing written or signalled.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from tpuctl import endings
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.runs import proof, records
from tpuctl.runs.folder import STOP_REQUEST
from tpuctl.runs.records import RunRecord

DEFAULT_WAIT_S = 90.0  # workers: a grace period, then SIGKILL (seconds); a Vertex job: up to 60 s until it says CANCELLED
_POLL_S = 0.1


def stop(record: RunRecord, notice: Callable[[str], None], warn: Callable[[str], None], wait_s: float = DEFAULT_WAIT_S) -> RunRecord:
    """Ask the run to stop and wait until it has; the record as it ended. A run that had ended is returned as it is."""
    if record.state != endings.RUNNING:
        return record
    folder = record.folder
    with proof.live_run(record) as live:
        if live is not None:  # else it ended since it was found
            try:
                live.write(STOP_REQUEST, f"{time.time():.3f} pid {os.getpid()}\n")
            except OSError as err:
                raise TpuctlError(f"cannot ask run {record.run_id} to stop: {folder.stop_request}: {err.strerror or err}", exit_code=FAILED) from None
            try:
                live.signal(signal.SIGTERM)  # False: it ended between the two
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
