"""The one shape of a launch backend: what the launch flow asks of every backend, and what it may leave out.

A backend is a package under tpuctl/backends/ whose `runner` module defines

    Options                a frozen dataclass of its command-line options (option_fields.option),
                           a BackendOptions; importing the module must stay cheap: `launch --help` reads it
    runner(options)        -> a Runner

and a Runner turns a Job into either the exact request it would make (`dry_run`)
or an Outcome (`run`). Process backends (local, ssh) run through the process
engine (tpuctl/launch/process/); job backends (Kubernetes, Vertex AI) submit a
job and follow it with the job engine (tpuctl/launch/follow/). Every optional
member is declared here with its default, so the flow calls it without probing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.console import logs
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Outcome
from tpuctl.runs.records import RunRecord
from tpuctl.runs.timeline import Timeline
from tpuctl.runs.vm_record import VmRecord


class Request(Protocol):
    """What a dry run returns: the plan, manifest or job body a run would send, unsent."""

    def to_json(self) -> Any: ...
    def render(self) -> str: ...


@dataclass
class RunContext:
    """What a run needs from the command line besides the Job: where its output and logs go."""

    run_id: str
    log_dir: Path
    writer: logs.LineWriter  # worker lines
    notice: Callable[[str], None]  # tpuctl's own lines (stderr)
    colour: bool
    tail_view: bool = False  # --tail: the model dir's scalars beside the logs
    verbose: bool = False  # --verbose: TensorFlow's start-up log lines on the console too
    record: RunRecord | None = None  # the run's record (tpuctl/runs/records.py), where the supervisor says what it answers
    timeline: Timeline | None = None  # the run's timeline (tpuctl/runs/timeline.py): the engines write what happens when
    # Change fields of the run's record while it runs (Keeper.amend, the record's one writer): a run's own TPU VM, named
    # the moment it exists; the supervisor's answers_stacks. None where the run keeps no record.
    amend_record: Callable[..., None] | None = None


class BackendOptions:
    """What the launch flow asks of every backend's Options besides its fields; the defaults say "nothing special"."""

    # The line for an option of this backend given to another one ({flag}, {backend}, {chosen}).
    misplaced: ClassVar[str] = "{flag} is for --backend {backend} (this launch uses --backend {chosen})"

    @classmethod
    def implied_by(cls, params: Mapping[str, Any]) -> str | None:
        """What on the command line names this backend without --backend (ssh: --hosts), in words; None if nothing does."""
        return None


@dataclass(frozen=True)
class Unsupported:
    """A Job option a backend cannot honour: refused in one line when given, with what the backend does instead."""

    instead: str
    line: str = "{flag} is for local and ssh workers"


class Runner(ABC):
    name: ClassVar[str]
    # Job options (by field) this backend refuses: the one refusal table every backend fills (refuse_unsupported).
    unsupported: ClassVar[Mapping[str, Unsupported]] = {}
    # Its workers write this machine's own disk: a model dir that is a path (not gs://) is the one they write. Elsewhere
    # such a path is on the hosts' disks (ssh) or in the image (kubernetes), never seen from here.
    shares_disk: ClassVar[bool] = False

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        """The job as this backend runs it (its paths, interpreter and worker count), checked.

        `given` names the options the user typed, for refusals such as an option
        this backend cannot honour.
        """
        return job

    def slice_cost(self, notice: Callable[[str], None]) -> VmRecord | None:
        """The TPU VM the run will run on, for its record (what its cost is priced at); None where it runs on no TPU VM.
        `notice` hears the line a slow price read says while it waits."""
        return None

    @abstractmethod
    def dry_run(self, job: Job, run_id: str) -> Request: ...

    @abstractmethod
    def run(self, job: Job, context: RunContext) -> Outcome: ...


def refuse_unsupported(runner: Runner, given: Iterable[str], flag: Callable[[str], str]) -> None:
    """The first option in `given` that the runner's table refuses, as one line; `flag` spells a field as typed."""
    for name in given:
        refused = runner.unsupported.get(name)
        if refused is not None:
            raise TpuctlError(refused.line.format(flag=flag(name), backend=runner.name), hint=refused.instead)
