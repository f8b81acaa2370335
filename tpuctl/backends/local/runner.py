"""The local backend (the default): its option, its checks of the Job, and its run under the process engine.

Every worker is a process group on this machine (processes.py); a rehearsal
(--rehearse) is one such worker, whose report is read back into the outcome.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from tpuctl.backends.local import bindshim
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import role_counts
from tpuctl.devices import gpus
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.launch import rehearsal_report, shared_options
from tpuctl.launch.job import Job
from tpuctl.launch.option_fields import option
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.process import ports
from tpuctl.launch.process.plan import Plan, build_plan
from tpuctl.launch.runner import BackendOptions, RunContext, Runner, Unsupported
from tpuctl.launch.tfpair.rehearsal import Runtime, resolve


@dataclass(frozen=True)
class Options(BackendOptions):
    """The local backend's options: whether its workers' servers may listen beyond loopback; GPUs per worker."""

    expose: bool = option(
        "--expose",
        is_flag=True,
        default=False,
        help="Let local workers' TensorFlow servers listen on every interface, as TensorFlow does by default "
        "(tpuctl keeps them on 127.0.0.1; docs/security.md).",
    )
    gpus_per_worker: int = shared_options.gpus_per_worker()


# The Job options that set up hosts: refused on the command line, left alone (and said) where a [launch] table sets them.
_HOSTS_ONLY = Unsupported(
    "the local workers run in this machine's interpreter: install there (`pip install -r FILE`)", line="{flag} is for hosts (--hosts, --tpu, --new-tpu)"
)
HOSTS_ONLY_NOTE = "[launch] requirements and setup are for hosts (--hosts, --tpu, --new-tpu): the local workers run in this machine's interpreter as it is"
REHEARSAL_SETUP_NOTE = "[launch] setup is for hosts (--hosts, --tpu, --new-tpu): a rehearsal installs the requirements alone"


class LocalRunner(Runner):
    name = "local"
    shares_disk = True
    unsupported: ClassVar[Mapping[str, Unsupported]] = {"setup": _HOSTS_ONLY}
    # A rehearsal installs these into its environment (tfpair/rehearsal.py); any other local launch refuses them at prepare().
    for_rehearsals: ClassVar[dict[str, str]] = {"requirements": "--requirements", "index_url": "--index-url"}

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        self.gpus: gpus.Share | None = None  # each worker's GPUs, decided once by prepare() for the dry run and the run
        self.rehearsal: Runtime | None = None  # the TensorFlow a --rehearse runs on (tfpair/rehearsal.py)

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        refused = next((flag for name, flag in self.for_rehearsals.items() if name in given), None)
        if refused is not None and job.rehearse is None:
            instead = f"{_HOSTS_ONLY.instead}, or rehearse a TPU run with them: --rehearse TYPE {refused} ..."
            raise TpuctlError(_HOSTS_ONLY.line.format(flag=refused), hint=instead)
        if not os.path.isfile(job.script):
            raise TpuctlError(f"script not found: {job.script}")
        if job.python and shutil.which(job.python) is None:
            raise TpuctlError(f"--python {job.python}: no such interpreter, or not executable")
        model_dir = job.model_dir
        if model_dir and "://" not in model_dir:
            model_dir = os.path.abspath(model_dir)
        job = replace(job, python=job.python or sys.executable, model_dir=model_dir)
        self.gpus = share_gpus(job, self.options.gpus_per_worker if "gpus_per_worker" in given else None)
        self.rehearsal = resolve(job)
        return job if self.rehearsal is None else replace(job, python=self.rehearsal.python)

    def _hosts_only(self, job: Job) -> str | None:
        """What a [launch] table sets that this launch leaves alone, said (a rehearsal installs the requirements)."""
        if self.rehearsal is not None:
            return REHEARSAL_SETUP_NOTE if job.setup else None
        return HOSTS_ONLY_NOTE if job.requirements or job.setup else None

    def request(self, job: Job, run_id: str) -> Plan | RehearsalPlan:
        """The plan with real free ports, each bound and released in turn (a launch picks afresh); a rehearsal's with
        the TensorFlow it runs on.

        A dry run holds nothing: reserving every port at once took two descriptors per
        worker, and `--dry-run --workers 1001` died of EMFILE under a 1024 limit.
        """
        plan = build_plan(job, _free_addresses(job.processes), run_id=run_id, attempt=1, gpus=self.gpus)
        note = self._hosts_only(job)
        plan = replace(plan, notes=(note,)) if note else plan
        return plan if self.rehearsal is None else RehearsalPlan(plan, self.rehearsal)

    def run(self, job: Job, context: RunContext) -> Outcome:
        from tpuctl.launch.preflight import LocalChecks

        if self.rehearsal is not None:  # its environment first: the checks below start the workers' interpreter
            self.rehearsal.prepare(context.notice)
        checks = LocalChecks(job)  # its interpreter starts while the machinery below loads
        from tpuctl.backends.local.processes import LocalStarter
        from tpuctl.launch.process.supervised import run_supervised

        shim = None if self.options.expose else _loopback_shim(context.notice)
        checks.result()
        note = self._hosts_only(job)
        if note:
            context.notice(note)
        context.notice(f"launching {job.workers} worker(s) of {job.script}; logs: {context.log_dir}")
        if self.gpus is not None and self.gpus.pool.warning:
            context.notice(f"warning: {self.gpus.pool.warning}")
        if self.gpus is not None and any(chosen is not None for chosen in self.gpus.gpus):
            context.notice(f"GPUs: {self.gpus.summary()}")
        starter = LocalStarter(context.log_dir, shim, profiler=job.profiler_server, gpus=self.gpus)
        if not job.rehearse:
            return run_supervised(starter, job, context)
        report = context.log_dir / rehearsal_report.FILE_NAME  # LOG_DIR is this launch's alone: no earlier report
        job = replace(job, env=(*job.env, (contract.REHEARSAL_REPORT, str(report))))
        outcome = run_supervised(starter, job, context)
        read = rehearsal_report.read(report)
        if read is None:
            if outcome.exit_code == 0:
                context.notice(
                    f"the rehearsal wrote no report ({report} is missing or unreadable): nothing was checked; "
                    "a script that leaves through os._exit() skips the report, see the worker's log"
                )
            return outcome
        return _rehearsed(outcome, {**read, "runtime": self.rehearsal.image if self.rehearsal is not None else None})


@dataclass(frozen=True)
class RehearsalPlan:
    """A rehearsal's dry run: its plan, and the TensorFlow it runs on (the image it stands for, the environment)."""

    plan: Plan
    runtime: Runtime

    def to_json(self) -> dict[str, object]:
        return {**self.plan.to_json(), "rehearsal_runtime": self.runtime.to_json()}

    def render(self) -> str:
        *lines, last = self.plan.render().splitlines()
        return "\n".join([*lines, *self.runtime.lines, last])


def _rehearsed(outcome: Outcome, rehearsal: dict[str, Any]) -> Outcome:
    """The run's outcome with the rehearsal's report in it: a run that exited 0 but whose report found problems
    failed, and a failure's cause is read with what the report knows."""
    failure = outcome.failure
    if failure is not None and failure.cause is not None:
        failure = replace(failure, cause=rehearsal_report.explained(failure.cause, rehearsal))
    failed = outcome.exit_code == 0 and bool(rehearsal_report.problems(rehearsal))
    return replace(outcome, rehearsal=rehearsal, failure=failure, exit_code=FAILED if failed else outcome.exit_code)


def share_gpus(job: Job, per_worker: int | None) -> gpus.Share | None:
    """Each task's GPUs (tpuctl/devices/gpus.py): the pool is --env's CUDA_VISIBLE_DEVICES, else this environment's,
    else the machine's; how the user said memory is held (TF_FORCE_GPU_ALLOW_GROWTH, JAX's XLA_PYTHON_CLIENT_*) stays
    theirs. None where nothing is set."""
    environ = {**os.environ, **dict(job.env)}
    roles = [role for role, count in role_counts(job.workers, chief=job.parameter_server, ps=job.ps).items() for _ in range(count)]
    share = gpus.split(gpus.find_pool(environ), roles, per_worker, gpus.memory_chosen(environ, job.framework), job.framework)
    return share if any(chosen is not None for chosen in share.gpus) or share.pool.warning else None


def _loopback_shim(notice: Callable[[str], None]) -> Path | None:
    """The bind shim, or None after one warning line where it cannot apply (docs/security.md)."""
    try:
        return bindshim.library()
    except bindshim.Unavailable as why:
        notice(bindshim.warning(str(why)))
        return None


def _free_addresses(count: int) -> list[str]:
    """`count` distinct loopback ports that were free a moment ago, one socket open at a time.

    Ports the kernel offers twice are drawn again; on a machine too busy to offer enough,
    the rest read `<port>`, as an ssh dry run's do: a dry run never fails for want of ports.
    """
    found: dict[int, None] = {}
    for _ in range(4 * count + 100):
        if len(found) == count:
            break
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((ports.LOOPBACK, 0))
            found[sock.getsockname()[1]] = None
    return [f"{ports.LOOPBACK}:{port}" for port in found] + [f"{ports.LOOPBACK}:<port>"] * (count - len(found))


def runner(options: Options) -> LocalRunner:
    return LocalRunner(options)
