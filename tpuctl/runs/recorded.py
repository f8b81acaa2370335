"""A run that is no launch, kept as a launch is: `tpuctl babysit`'s loop with a folder, a claim and a record.

The launch core writes a launch's record (launch/execute.py); babysit runs no launch of its
own (its command may be one, with a record of its own), so this wraps its loop the same way:
the folder claimed for as long as the loop lives (the lock that tells `running` from `lost`),
the record written as it starts and again as it ends, its state read from the exit status
(0 succeeded, 130 stopped, anything else failed). `tpuctl runs` lists it, `tpuctl stop`
stops it (SIGTERM: the loop stops its command and exits 130), and a detached one's console
is its folder's console file.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tpuctl.errors import TpuctlError
from tpuctl.runs import naming, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord

STOPPED_EXIT = 130  # what a stopping signal (SIGINT, SIGTERM, SIGHUP; `tpuctl stop`) ends a loop with


def state_of(exit_code: int | None) -> str:
    """How a loop ended, in the words of `tpuctl runs`; None: it ended by an error that is not tpuctl's."""
    if exit_code == 0:
        return records.SUCCEEDED
    return records.STOPPED if exit_code == STOPPED_EXIT else records.FAILED_STATE


@dataclass(frozen=True)
class Recorded:
    """What a kept run is called, what it runs and where its folder is; `run` keeps it."""

    run_id: str
    backend: str
    script: str  # what `tpuctl runs` shows in its script column: babysit's command line
    job: str | None  # what it looks after: babysit's TPU VM
    folder: RunFolder

    @classmethod
    def new(cls, backend: str, name: str, script: str, job: str | None = None) -> Recorded:
        """A fresh run id made from `name`, its folder in the user's state folder, as a launch's is by default."""
        run_id = naming.run_id(name)
        return cls(run_id, backend, script, job, RunFolder(naming.default_log_dir(run_id).absolute()))

    def run(self, body: Callable[[], int], notice: Callable[[str], None], *, started: Callable[[Path], None] | None = None) -> int:
        """Claim the folder, say running, run `body`, say how it ended; `body`'s exit status, or its TpuctlError.

        `started` (a detached run's `ready`) is called with the console file once the folder is
        claimed and the record says running. A record that cannot be written costs `tpuctl runs`
        this run (one warning through `notice`), never the run; a folder that cannot be claimed
        is an error before anything runs.
        """
        claim = self.folder.claim(self.run_id)
        record = RunRecord(
            run_id=self.run_id,
            backend=self.backend,
            script=self.script,
            log_dir=str(self.folder.path),
            started=time.time(),
            pid=os.getpid(),
            host=socket.gethostname(),
            detached=started is not None,
            job=self.job,
        )
        _write(record, notice)
        code: int | None = None
        try:
            if started is not None:
                started(self.folder.console_log)
            code = body()
            return code
        except TpuctlError as err:
            code = err.exit_code
            raise
        finally:
            _write(replace(record, state=state_of(code), ended=time.time(), exit_code=code), notice)
            os.close(claim)  # after the record's end: `running` is true while this lock is held


def _write(record: RunRecord, notice: Callable[[str], None]) -> None:
    try:
        records.write(record)
    except OSError as err:
        notice(f"warning: cannot write the run's record in {records.folder()}: {err.strerror or err}")
