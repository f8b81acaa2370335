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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tpuctl import worker_contract as contract
from tpuctl.backends.local import bindshim
from tpuctl.errors import FAILED, TpuctlError
from tpuctl.launch import rehearsal_report
from tpuctl.launch.backend import BackendOptions, RunContext, Runner
from tpuctl.launch.job import Job
from tpuctl.launch.option_fields import option
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.process import ports
from tpuctl.launch.process.plan import Plan, build_plan


@dataclass(frozen=True)
class Options(BackendOptions):
    """The local backend's one option of its own: whether its workers' servers may listen beyond loopback."""

    expose: bool = option(
        "--expose",
        is_flag=True,
        default=False,
        help="Let local workers' TensorFlow servers listen on every interface, as TensorFlow does by default "
        "(tpuctl keeps them on 127.0.0.1; docs/security.md).",
    )


class LocalRunner(Runner):
    name = "local"

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        if not os.path.isfile(job.script):
            raise TpuctlError(f"script not found: {job.script}")
        if job.python and shutil.which(job.python) is None:
            raise TpuctlError(f"--python {job.python}: no such interpreter, or not executable")
        model_dir = job.model_dir
        if model_dir and "://" not in model_dir:
            model_dir = os.path.abspath(model_dir)
        return replace(job, python=job.python or sys.executable, model_dir=model_dir)

    def dry_run(self, job: Job, run_id: str) -> Plan:
        """The plan with real free ports, each bound and released in turn (a launch picks afresh).

        A dry run holds nothing: reserving every port at once took two descriptors per
        worker, and `--dry-run --workers 1001` died of EMFILE under a 1024 limit.
        """
        return build_plan(job, _free_addresses(job.processes), run_id=run_id, attempt=1)

    def run(self, job: Job, context: RunContext) -> Outcome:
        from tpuctl.launch.preflight import LocalChecks

        checks = LocalChecks(job)  # its interpreter starts while the machinery below loads
        from tpuctl.backends.local.processes import LocalBackend
        from tpuctl.launch.process.supervised import run_supervised

        shim = None if self.options.expose else _loopback_shim(context.notice)
        checks.result()
        context.notice(f"launching {job.workers} worker(s) of {job.script}; logs: {context.log_dir}")
        if not job.rehearse:
            return run_supervised(LocalBackend(context.log_dir, shim, profiler=job.profiler_server), job, context)
        report = context.log_dir / rehearsal_report.FILE_NAME  # LOG_DIR is this launch's alone: no earlier report
        job = replace(job, env=(*job.env, (contract.REHEARSAL_REPORT, str(report))))
        outcome = run_supervised(LocalBackend(context.log_dir, shim, profiler=job.profiler_server), job, context)
        outcome.rehearsal = rehearsal_report.read(report)
        if outcome.rehearsal is None and outcome.exit_code == 0:
            context.notice(
                f"the rehearsal wrote no report ({report} is missing or unreadable): nothing was checked; "
                "a script that leaves through os._exit() skips the report, see the worker's log"
            )
        if outcome.rehearsal is not None and outcome.exit_code == 0 and rehearsal_report.problems(outcome.rehearsal):
            outcome.exit_code = FAILED
        failure = outcome.failure
        if outcome.rehearsal is not None and failure is not None and failure.cause is not None:
            failure.cause = rehearsal_report.explained(failure.cause, outcome.rehearsal)
        return outcome


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
