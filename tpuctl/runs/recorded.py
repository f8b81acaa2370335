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

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tpuctl.endings import INTERRUPTED, Ending, Kind, state_of
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs import naming, proof, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import VmRecord


@dataclass(frozen=True)
class Recorded:
    """What a kept run is called, what it runs and where its folder is; `run` keeps it."""

    run_id: str
    kind: str  # records.RUN_KINDS: what the run is (babysit's loop); it has no launch backend
    script: str  # what `tpuctl runs` shows in its script column: babysit's command line
    job: str | None  # what it looks after: babysit's TPU VM
    folder: RunFolder

    @classmethod
    def new(cls, kind: str, name: str, script: str, job: str | None = None) -> Recorded:
        """A fresh run id made from `name`, its folder in the user's state folder, as a launch's is by default."""
        run_id = naming.run_id(name)
        return cls(run_id, kind, script, job, RunFolder(naming.default_log_dir(run_id).absolute()))

    def run(self, body: Callable[[], int], notice: Callable[[str], None], *, started: Callable[[Path], None] | None = None) -> int:
        """Claim the folder, say running, run `body`, say how it ended; `body`'s exit status, or its TpuctlError.

        `started` (a detached run's `ready`) is called with the console file once the folder is
        claimed and the record says running.
        """
        with kept(self.folder, self.run_id, None, self.script, notice, detached=started is not None, job=self.job, kind=self.kind) as keeper:
            if started is not None:
                started(self.folder.console_log)
            code = body()
            # A stopping signal ends the loop with INTERRUPTED; its command's own statuses are its, not a preemption's.
            kind = Kind.STOPPED if code == INTERRUPTED else Kind.SUCCEEDED if code == 0 else Kind.FAILED
            keeper.end(state_of(Ending(kind, code)), code)
            return code


class Keeper:
    """A run's record while the run holds its folder: written as running, then once as it ended.

    A record that cannot be written costs `tpuctl runs` this run (one warning through `notice`),
    never the run."""

    def __init__(self, record: RunRecord, notice: Callable[[str], None]) -> None:
        self.record = record
        self.notice = notice
        self.ended = False
        self.written = self._write(record)

    def amend(self, *, vm: VmRecord | None = None, answers_stacks: bool | None = None, job: str | None = None) -> None:
        """What changes in a running record, written at once: its VM (`vm`, the next value of its life, from the one
        owner of it: a launcher killed the next moment leaves a record naming the VM), whether its supervisor
        answers SIGQUIT with stacks (runs/stacks.py), the cluster job it submitted (`tpuctl runs` shows it while it
        runs); `end` keeps them."""
        if vm is not None:
            self.record = replace(self.record, vm=vm)
        if answers_stacks is not None:
            self.record = replace(self.record, answers_stacks=answers_stacks)
        if job is not None:
            self.record = replace(self.record, job=job)
        self._write(self.record)

    def end(self, state: str, exit_code: int | None, job: str | None = None, goodput: float | None = None) -> None:
        self.ended = True
        self._write(replace(self.record, state=state, ended=time.time(), exit_code=exit_code, job=job or self.record.job, goodput=goodput))

    def _write(self, record: RunRecord) -> bool:
        try:
            records.write(record)
        except OSError as err:
            self.notice(f"warning: cannot write the run's record in {records.folder()}: {err.strerror or err}")
            return False
        return True


@contextlib.contextmanager
def kept(
    folder: RunFolder,
    run_id: str,
    backend: str | None,
    script: str,
    notice: Callable[[str], None],
    *,
    detached: bool = False,
    job: str | None = None,
    on: VmRecord | None = None,
    kind: str = records.LAUNCH,
) -> Iterator[Keeper]:
    """Claim the run's folder (a folder that cannot be claimed is an error before anything runs) and keep its record
    for as long as the block runs; a block that raises before it said how the run ended ends it `failed`."""
    claim = folder.claim(run_id)
    try:
        record = RunRecord(
            run_id=run_id,
            backend=backend,
            script=script,
            log_dir=str(folder.path.absolute()),
            started=time.time(),
            pid=os.getpid(),
            pid_start=proof.start_time(os.getpid()),  # what tells this process from a later one with its pid (stop, stacks)
            host=socket.gethostname(),
            detached=detached,
            job=job,
            vm=on,
            kind=kind,
        )
        keeper = Keeper(record, notice)
        try:
            yield keeper
        except TpuctlError as err:
            if not keeper.ended:  # a stopping signal that ended the run before its workers could (130): stopped
                keeper.end((Kind.STOPPED if err.exit_code == INTERRUPTED else Kind.FAILED).value, err.exit_code)
            raise
        finally:
            if not keeper.ended:
                keeper.end(Kind.FAILED.value, None)
    finally:
        os.close(claim)  # after the record's end: `running` is true while this lock is held
