"""Following a detached run's console (`tpuctl attach`): what an attached launch would have shown, from its start.

The detached supervisor's stdout and stderr are the run's console file (runs/detach.py), so
the file holds the worker lines, tpuctl's notices and, at the end, the summary. Attaching
copies it from the start and then as it grows, until the run lets go of its folder. A
stopping signal (Ctrl-C, SIGTERM, a closed terminal) ends the attaching, never the run:
the run was never this process's to stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.runs import records
from tpuctl.runs.reading import FOLLOW_BUDGET, POLL_S
from tpuctl.runs.records import RunRecord
from tpuctl.runs.tailing import Refused, Tail
from tpuctl.safety import signals


@dataclass(frozen=True)
class Attached:
    record: RunRecord  # as it is when attaching ended: its end, or still running where `detached`
    detached: bool  # a stopping signal ended the attaching; the run goes on


def attach(record: RunRecord, write: Callable[[bytes], None], warn: Callable[[str], None]) -> Attached:
    """Copy the run's console to `write` (whole lines, newlines included, a few MiB at most a call) until the run ends
    or a signal comes."""
    if not record.detached:
        raise TpuctlError(
            f"run {record.run_id} runs attached to the terminal it was launched from (pid {record.pid} on {record.host}); "
            "its console is that terminal",
            hint=f"its workers' output: tpuctl logs {record.run_id} -f",
            exit_code=FAILED,
        )
    folder = record.folder
    tail = Tail(folder.console_log)
    try:
        with signals.handled(signals.raise_stopped):
            while True:
                running = folder.is_running()
                while True:  # what is there now, a bounded piece at a time, each in one write
                    piece = b"".join(line + b"\n" for line in tail.lines(final=not running, budget=FOLLOW_BUDGET))
                    if piece:
                        write(piece)
                    if tail.at_end:
                        break
                if not running:
                    break
                time.sleep(POLL_S)
    except signals.Stopped:
        return Attached(record, detached=True)
    except Refused as why:
        raise TpuctlError(f"cannot follow {folder.console_log}: {why}", exit_code=FAILED) from None
    finally:
        tail.close()
    return Attached(records.find(record.run_id, warn)[0], detached=False)  # read afresh: its end is written now
