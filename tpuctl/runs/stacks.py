"""Asking a running run for every worker's stacks (`tpuctl stacks`): SIGQUIT to its supervisor, then the view it writes.

Only a run whose supervisor has its SIGQUIT handler in place is signalled (the record says so
while it is: `answering`); a SIGQUIT to any other tpuctl would end it with a core dump. And only
a supervisor proven to be the run's (runs/proof.py: its record, its folder, its start time and
its own hold on the folder's lock): a launch that died leaves a record nobody holds, whatever
process has its pid now, and a record may name another run's folder; such a process is never
signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from tpuctl import endings
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.runs import proof, records
from tpuctl.runs.records import RunRecord

DEFAULT_WAIT_S = 30.0  # py-spy on every worker, over ssh, takes seconds


@contextlib.contextmanager
def answering(record: RunRecord, amend: Callable[..., None] | None = None) -> Iterator[None]:
    """While the block runs, the run's record says its SIGQUIT shows the stacks. A record that cannot be
    written costs only `tpuctl stacks` (SIGQUIT to the launch still works), never the launch. `amend`: the record's
    own writer (recorded.Keeper.amend), where other fields change while the run goes (a run's own TPU VM moves zone):
    a copy of the record as it started would write them back."""

    def say(answers: bool) -> None:
        if amend is not None:
            amend(answers_stacks=answers)
            return
        with contextlib.suppress(OSError):
            records.write(replace(record, answers_stacks=answers))

    say(True)
    try:
        yield
    finally:
        say(False)


def request(record: RunRecord, wait_s: float = DEFAULT_WAIT_S) -> str:
    """SIGQUIT the run's supervisor and return the view it writes (the same it prints on its own console)."""
    if record.state != endings.RUNNING:
        raise TpuctlError(f"run {record.run_id} is not running ({record.state})", hint="`tpuctl runs` lists the running ones", exit_code=FAILED)
    if not record.answers_stacks:
        raise TpuctlError(
            f"run {record.run_id} ({record.backend or record.kind}) has no stacks to show",
            hint="stacks are taken from local and ssh workers while they run",
            exit_code=FAILED,
        )
    view = record.folder.stacks_view
    before = _stamp(view)
    with proof.live_run(record) as live:
        try:
            if live is None or not live.signal(signal.SIGQUIT):  # ended since it was found: its pid may be another's by now
                raise ProcessLookupError(errno.ESRCH, "the launch has ended")
        except OSError as err:
            raise TpuctlError(f"cannot signal launch {record.run_id} (pid {record.pid}): {err.strerror}", exit_code=FAILED) from None
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
    raise TpuctlError(f"launch {record.run_id} wrote no stacks within {wait_s:g}s", hint=f"its log folder: {record.log_dir}", exit_code=FAILED)


def _stamp(path: os.PathLike[str]) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino
