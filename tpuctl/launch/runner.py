"""The one shape of a launch backend: what the launch flow asks of every backend, and what it may leave out.

A backend is a package under tpuctl/backends/ whose `runner` module defines

    Options                a frozen dataclass of its command-line options (option_fields.option),
                           a BackendOptions; importing the module must stay cheap: `launch --help` reads it
    runner(options)        -> a Runner

and a Runner turns a Job into the exact request a run makes (`request`, what
--dry-run prints) or an Outcome (`run`). Process backends (local, ssh) run
through the process engine (tpuctl/launch/process/); job backends (Kubernetes,
Vertex AI) are JobRunners: their run submits the very request `request` built
(TorchX's `schedule(dryrun(...))`) and follows the job with the job engine
(tpuctl/launch/follow/). Every optional member is declared here with its
default, so the flow calls it without probing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar, final

from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.console import logs
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Outcome
from tpuctl.runs.recorded import Keeper
from tpuctl.runs.records import RunRecord
from tpuctl.runs.timeline import Timeline
from tpuctl.runs.vm_record import VmRecord


class Request(Protocol):
    """What a dry run returns: the plan, manifest or job body a run would send, unsent."""

    def to_json(self) -> Any: ...
    def render(self) -> str: ...


R = TypeVar("R", bound=Request)


@dataclass(frozen=True)
class RunContext:
    """What a run needs from the command line besides the Job: where its output and logs go.

    A value, built once by the launch flow (tpuctl/launch/execute.py) when the run holds its folder, its record
    and its timeline; what changes while the run goes (the record) changes in its keeper, the record's one writer."""

    run_id: str
    log_dir: Path
    writer: logs.LineWriter  # worker lines
    notice: Callable[[str], None]  # tpuctl's own lines (stderr)
    colour: bool
    tail_view: bool = False  # --tail: the model dir's scalars beside the logs
    verbose: bool = False  # --verbose: TensorFlow's start-up log lines on the console too
    timeline: Timeline | None = None  # the run's timeline (tpuctl/runs/timeline.py): the engines write what happens when
    keeper: Keeper | None = None  # the run's record and its one writer (tpuctl/runs/recorded.py); None where the run keeps none
    hosts: tuple[HostEntry, ...] | None = None  # the hosts of the machine the provisioning step made for the run; None: the backend's own

    @property
    def record(self) -> RunRecord | None:
        """The run's record as last written (where the supervisor says what it answers, a run's own TPU VM is named);
        None where it keeps none or its first write failed."""
        return self.keeper.record if self.keeper is not None and self.keeper.written else None

    @property
    def amend_record(self) -> Callable[..., None] | None:
        """Change fields of the run's record while it runs (Keeper.amend): a run's own TPU VM, named the moment it
        exists; the supervisor's answers_stacks. None where the run keeps no record."""
        return self.keeper.amend if self.keeper is not None else None


class Provisioner(ABC):
    """A machine made for one run (`launch --new-tpu`: its own TPU VM). The launch flow's provisioning step
    (tpuctl/launch/provisioning.py) makes it before the backend's run, hands that run its hosts (RunContext.hosts), and
    ends it after, however the run ended; the backend never makes or deletes it."""

    @abstractmethod
    def machine(self, run_id: str) -> str:
        """The machine in words, known before it exists: what the step says it was creating or running on when stopped."""

    @abstractmethod
    def provision(self, job: Job, context: RunContext) -> list[HostEntry]:
        """Make the machine and return its hosts once they can run workers."""

    @abstractmethod
    def finish(self, ended: Kind | None, context: RunContext) -> None:
        """Delete or keep what `provision` made (nothing, where it made nothing), by how the run `ended` (None: the
        launch failed before the workers said anything); it says what it did in one line and raises nothing."""


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

    def provisioner(self) -> Provisioner | None:
        """What makes the machine the run runs on, for the launch's provisioning step; None where the backend runs on
        what exists (hosts, a cluster, a managed service)."""
        return None

    @abstractmethod
    def request(self, job: Job, run_id: str) -> Request:
        """The request a run of `job` makes, unsent, built without credentials or requests: --dry-run prints it, of the
        job with its secret values hidden (tpuctl/launch/prepare.py)."""

    @abstractmethod
    def run(self, job: Job, context: RunContext) -> Outcome: ...


class JobRunner(Runner, Generic[R]):
    """A backend that submits one request to a cluster and follows the job: its run builds the request once, the
    same way its dry run does, and submits exactly that, so what a dry run printed is what runs."""

    @abstractmethod
    def request(self, job: Job, run_id: str) -> R: ...

    @final
    def run(self, job: Job, context: RunContext) -> Outcome:
        return self.submit(self.request(job, context.run_id), context)

    @abstractmethod
    def submit(self, request: R, context: RunContext) -> Outcome:
        """Send `request`, as it is, and follow the job to its end."""


def refuse_unsupported(runner: Runner, given: Iterable[str], flag: Callable[[str], str]) -> None:
    """The first option in `given` that the runner's table refuses, as one line; `flag` spells a field as typed."""
    for name in given:
        refused = runner.unsupported.get(name)
        if refused is not None:
            raise TpuctlError(refused.line.format(flag=flag(name), backend=runner.name), hint=refused.instead)
