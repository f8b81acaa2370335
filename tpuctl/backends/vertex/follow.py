"""Submit a CustomJob and follow it to its end: state changes, every replica's log lines, the exit status.

Log lines come from Cloud Logging (entries:list, filtered by the job's id) and
are tagged by replica as local worker lines are (`[chief:0]`, `[worker:1]`),
saved per replica in the run folder's first attempt (tpuctl/runs/folder.py), and folded of TensorFlow's start-up
chatter as elsewhere. Ctrl-C (or SIGTERM) cancels the job and waits a little
for Vertex to say so.

This module is the cluster's part (VertexScheduler); polling, the tagged and saved
lines, draining, signals and the Outcome are the job engine's (tpuctl/launch/follow/).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tpuctl.cloud.vertex.vertex_api import TERMINAL, JobLogs, VertexJobs, job_id
from tpuctl.endings import INTERRUPTED, Kind, exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.seconds import from_env
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.follow.engine import JobFollower
from tpuctl.launch.follow.scheduler import JobStatus, LogBatch, OnInterrupt, Replica, Scheduler
from tpuctl.launch.outcome import JobRef, Outcome
from tpuctl.launch.runner import RunContext
from tpuctl.safety import signals

DEFAULT_POLL_S = 5.0
DRAIN_S = 30.0  # how long after the job's end its last log entries may take to arrive
ROLES = ("chief", "worker", "ps", "evaluator")  # worker pools 0..3
_TASK = re.compile(r"workerpool([0-3])-([0-9]{1,6})\Z")
# How Vertex words a replica's failure in the job's error message.
_REPLICA_EXIT = re.compile(r"replica (workerpool[0-3]-[0-9]+) exited with a non-zero status of (-?[0-9]+)")


def poll_interval() -> float:
    return from_env("TPUCTL_VERTEX_POLL_S", DEFAULT_POLL_S)


def worker_name(task: str) -> str:
    """workerpool1-0 -> worker:0: the names TF_CONFIG gives the same replicas inside the job."""
    match = _TASK.match(task)
    return f"{ROLES[int(match[1])]}:{match[2]}" if match else (task or "job")


def console_url(name: str, project: str, region: str) -> str:
    return f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{job_id(name)}/cpu?project={project}"


class VertexScheduler(Scheduler):
    """A CustomJob over REST; its lines from Cloud Logging. A signal cancels it."""

    on_interrupt = OnInterrupt.CANCEL
    drain_s = DRAIN_S

    def __init__(
        self, jobs: VertexJobs, logs_api: Callable[[str], JobLogs], body: dict[str, Any], region: str, *, notice: Callable[[str], None], poll_s: float
    ) -> None:
        self.jobs = jobs
        self.new_logs = logs_api
        self.body = body
        self.region = region
        self.notice = notice
        self.poll_s = poll_s
        self.name = ""
        self.logs_of_job: JobLogs | None = None

    def submit(self) -> JobStatus:
        try:
            created = self.jobs.create(self.body)
        except signals.Stopped:
            raise TpuctlError(
                "interrupted while submitting the job; it may exist",
                hint=f"gcloud ai custom-jobs list --region {self.region} --filter=displayName={self.body.get('displayName')}",
                exit_code=INTERRUPTED,
            ) from None
        self.name = str(created["name"])
        self.notice(f"submitted CustomJob {job_id(self.name)} ({self.body.get('displayName')}) in {self.region}")
        self.notice(f"console: {console_url(self.name, self.jobs.parent.split('/')[1], self.region)}")
        return _status(created)

    def describe(self) -> JobStatus:
        return _status(self.jobs.get(self.name))

    def cancel(self) -> None:
        self.jobs.cancel(self.name)

    def job_ref(self) -> JobRef:
        name = job_id(self.name)
        return JobRef(
            kind="CustomJob",
            name=name,
            namespace=self.region,
            delete_command=f"gcloud ai custom-jobs cancel {name} --region {self.region}",
            note=f"gcloud ai custom-jobs describe {name} --region {self.region}",
            unit="replica",
        )

    def read_logs(self) -> list[LogBatch]:
        if self.logs_of_job is None:
            self.logs_of_job = self.new_logs(self.name)
        by_task: dict[str, list[str]] = {}
        for line in self.logs_of_job.new_lines():
            by_task.setdefault(line.task, []).append(line.text)
        return [LogBatch(worker_name(task), texts) for task, texts in by_task.items()]

    def logs_settled(self, quiet: int) -> bool:
        """Entries trail the job's end (Logging ingests them late): all are in once two polls bring nothing."""
        return quiet >= 2


def _status(job: dict[str, Any]) -> JobStatus:
    state = str(job.get("state", "")) or "JOB_STATE_UNSPECIFIED"
    label = state.removeprefix("JOB_STATE_")
    code = TERMINAL.get(state)
    if code is None:
        return JobStatus(state, label)
    if code == 0:
        return JobStatus(state, label, Kind.SUCCEEDED)
    if state == "JOB_STATE_CANCELLED":
        return JobStatus(state, label, Kind.CANCELLED, code)
    error = job.get("error") if isinstance(job.get("error"), dict) else {}
    message = one_line(str(error.get("message", "")), 400) if error else ""
    # A failed job exits 1 (FAILED, EXPIRED, PARTIALLY_SUCCEEDED alike); the replica Vertex names, with its own
    # status and last lines, is the failure shown.
    return JobStatus(state, label, Kind.FAILED, code, message=message or state, failed=_replica(message, label))


def _replica(message: str, label: str) -> Replica | None:
    """The replica Vertex names in its error message, with its status; None where it names none."""
    found = _REPLICA_EXIT.search(message)
    if found is None:
        return None
    status = int(found[2])
    return Replica(
        worker=worker_name(found[1]),
        host=found[1],
        status=f"{exit_words(status)} ({label})",
        returncode=status,
        exit_code=status or FAILED,
    )


class VertexRun:
    """The Vertex runner's entry: a CustomJob submitted and followed by the job engine."""

    def __init__(
        self, jobs: VertexJobs, logs_api: Callable[[str], JobLogs], context: RunContext, region: str, poll_s: float, framework: str
    ) -> None:
        self.jobs = jobs
        self.new_logs = logs_api
        self.context = context
        self.region = region
        self.poll_s = poll_s
        self.fold = Fold(context.verbose, framework)  # the runner says its note at the end

    def run(self, body: dict[str, Any]) -> Outcome:
        scheduler = VertexScheduler(self.jobs, self.new_logs, body, self.region, notice=self.context.notice, poll_s=self.poll_s)
        return JobFollower(scheduler, self.context, self.fold).run()
