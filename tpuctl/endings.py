"""How a run, an attempt or a worker ended: the one vocabulary every layer speaks.

Before issue 35 each layer had its own words for an end (the outcome's `result`, a record's
`state`, the timeline's `attempt_end`, goodput's `ended`, the job engine's End, the process
engine's worker states) and read some facts back from prose ("exit status ..." in a status line).
Here an end is a value: its Kind (what happened), its exit status and its words for a person.
The words written to disk (outcome.json, run records, timeline.jsonl) are the ones those files
always held, so older files read as they did: `Kind.word` and `Ending.result` spell them.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from typing import Any

from tpuctl.cluster.worker_contract import PREEMPTED_EXIT_CODE

# The exit status after a stopping signal (SIGINT, SIGTERM, SIGHUP; `tpuctl stop`): 128 + SIGINT,
# what a shell reports for Ctrl-C, whichever of the three arrived.
INTERRUPTED = 128 + signal.SIGINT


class Kind(str, enum.Enum):
    """What happened. A str, so a record's `state` and a JSON file hold the plain word."""

    SUCCEEDED = "succeeded"  # exit status 0
    FAILED = "failed"  # ended otherwise, by itself
    STOPPED = "stopped"  # ended because tpuctl (or `tpuctl stop`) asked it to
    PREEMPTED = "preempted"  # exit status PREEMPTED_EXIT_CODE: the runtime saved and left (tpuctl/runtime/preemption.py)
    HANG = "hang"  # made no progress for --hang-timeout and was stopped
    LOST = "lost"  # nobody can say any more: the launcher died, or the ssh connection to its worker did
    CANCELLED = "cancelled"  # a cluster's job cancelled outside this launch
    ERROR = "error"  # tpuctl's own error ended it before it could say how the workers did

    def __str__(self) -> str:
        return str(self.value)

    @property
    def word(self) -> str:
        """The word the timeline's attempt_end has always used: `interrupted` for a stop."""
        return "interrupted" if self is Kind.STOPPED else self.value


RUNNING = "running"  # the one run state that is not an end
# What a run's record may say (tpuctl/runs/records.py); a hang, a lost connection or a cancelled job is a failed run.
RUN_STATES: tuple[str, ...] = (RUNNING, *(k.value for k in (Kind.SUCCEEDED, Kind.FAILED, Kind.PREEMPTED, Kind.STOPPED, Kind.LOST)))
_RESULTS = {Kind.SUCCEEDED: "succeeded", Kind.STOPPED: "interrupted"}  # `launch --json`'s result; the rest is "failed"


@dataclass(frozen=True)
class Ending:
    """One end: what happened, the exit status it maps to (None: none known), and its words for a person
    ("exit status 7", "killed by SIGKILL", "did not start within 30s", "lost the ssh connection to h")."""

    kind: Kind
    exit_code: int | None
    words: str = ""

    @classmethod
    def of_returncode(cls, returncode: int) -> Ending:
        """A process's end as subprocess reports it (negative: killed by that signal); a death by signal N
        exits 128+N, as a shell reports it. Only an exit status of PREEMPTED_EXIT_CODE is a preemption."""
        if returncode < 0:
            return cls(Kind.FAILED, 128 - returncode, exit_words(returncode))
        return cls.of_exit(returncode, exit_words(returncode))

    @classmethod
    def of_exit(cls, exit_code: int, words: str) -> Ending:
        """An exit status a platform reported (a pod's container, a Vertex replica), in its own words."""
        kind = Kind.SUCCEEDED if exit_code == 0 else Kind.PREEMPTED if exit_code == PREEMPTED_EXIT_CODE else Kind.FAILED
        return cls(kind, exit_code, words)

    @property
    def result(self) -> str:
        """`launch --json`'s result (outcome.json): succeeded, interrupted or failed."""
        return _RESULTS.get(self.kind, Kind.FAILED.value)

    def to_json(self) -> dict[str, Any]:
        """The timeline's attempt_end fields."""
        return {"result": self.kind.word, "exit_code": self.exit_code}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> Ending | None:
        """An end as any of tpuctl's files wrote it: attempt_end's `result`, a record's or run_end's `state`,
        outcome.json's `result` with `interrupted`; None where the words are none of ours."""
        said = fields.get("result", fields.get("state"))
        code = fields.get("exit_code")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        if fields.get("interrupted") is True or said == Kind.STOPPED.word:
            return cls(Kind.STOPPED, exit_code)
        kind = next((k for k in Kind if k.value == said), None)
        return None if kind is None else cls(kind, exit_code)


def state_of(ending: Ending) -> str:
    """How a run ended, in the words of `tpuctl runs` (its record, the timeline's run_end): stopped, succeeded,
    preempted (once more than --max-preemptions allowed), else failed: a hang, a lost worker, a cancelled job."""
    return ending.kind.value if ending.kind in (Kind.SUCCEEDED, Kind.STOPPED, Kind.PREEMPTED) else Kind.FAILED.value


def signal_name(number: int) -> str:
    """A signal by its name ("SIGKILL"), or by its number where this platform names none ("signal 99")."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_words(returncode: int) -> str:
    """How any process tpuctl ran ended, a worker's or a tool's (ssh, kubectl, a compiler), in the words of
    `Ending.of_returncode`: "exit status 7", or "killed by SIGKILL" where subprocess reports -9."""
    return f"killed by {signal_name(-returncode)}" if returncode < 0 else f"exit status {returncode}"
