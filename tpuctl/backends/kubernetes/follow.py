"""Run a rendered manifest with kubectl: apply it, follow every pod's log, exit with the job's result.

Everything goes through kubectl, so whatever reaches the user's cluster today
(kubeconfig contexts, gke-gcloud-auth-plugin, proxies) reaches it from tpuctl:

    kubectl apply -f -                                  the manifest, on stdin
    kubectl get RESOURCE,pods -l SELECTOR -o json       job status and pods, every poll
    kubectl logs -f POD -c tensorflow                   one per container run, tagged [worker:N]
    kubectl delete RESOURCE NAME --wait=false           only when asked after Ctrl-C

The job's result decides the exit status: 0 when it succeeded; when it failed,
the exit code of the replica that failed first (by finish time), else 1; 130
after SIGINT, SIGTERM or SIGHUP. A signal never deletes anything unasked: after
Ctrl-C on a terminal tpuctl asks, otherwise it names the command that deletes the job.

This module is the cluster's part (KubeScheduler); polling, the tagged and saved
lines, draining, signals and the Outcome are the job engine's (tpuctl/launch/follow/).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpuctl.backends.kubernetes.manifest import (
    CONTAINER,
    JOB_INDEX_ANNOTATION,
    TFJOB_INDEX_LABEL,
    TFJOB_TYPE_LABEL,
    Manifest,
)
from tpuctl.endings import Kind, exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.seconds import from_env
from tpuctl.launch.console.logs import LINE_PIECE
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.follow.engine import JobFollower
from tpuctl.launch.follow.scheduler import JobStatus, Replica, ReplicaRun, Scheduler
from tpuctl.launch.outcome import JobRef, Outcome
from tpuctl.launch.runner import RunContext
from tpuctl.safety import child_output, reaper

DEFAULT_POLL_S = 2.0
DRAIN_S = 10.0  # how long the logs of finished pods may take to arrive once the job is over
JSON = dict[str, Any]
# What kubectl prints is read no further than this (then it is stopped): `get RESOURCE,pods -o json` is ~10 KB a pod,
# so 64 MiB is thousands of pods; a kubectl (or a wrapper of it) that prints without end is not held until its deadline.
KUBECTL_LIMIT = 64 << 20
ERROR_KEPT = 64 << 10  # the last bytes of `kubectl logs`' stderr kept: its last line says why it failed
ENDED_S = 10.0


def poll_interval() -> float:
    return from_env("TPUCTL_KUBE_POLL_S", DEFAULT_POLL_S)


class Kubectl:
    """kubectl, pointed at one namespace; failures become one-line TpuctlErrors."""

    def __init__(self, namespace: str, binary: str | None = None) -> None:
        found = binary or shutil.which("kubectl")
        if not found:
            raise TpuctlError(
                "kubectl not found on PATH",
                hint="install it (`gcloud components install kubectl` or your OS's package) and point it at the cluster",
                exit_code=FAILED,
            )
        self.binary = found
        self.namespace = namespace

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--namespace", self.namespace, *args]

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120, hint: str | None = None) -> str:
        feed = None if stdin is None else stdin.encode()
        try:
            done = child_output.run(self.argv(*args), input=feed, timeout=timeout, limit=KUBECTL_LIMIT)
        except subprocess.TimeoutExpired:
            raise TpuctlError(f"kubectl {args[0]} did not answer in {timeout:.0f}s", exit_code=FAILED) from None
        if done.returncode is None:
            raise TpuctlError(f"kubectl {args[0]} printed more than {KUBECTL_LIMIT} bytes (stopped)", exit_code=FAILED)
        if done.returncode != 0:
            why = one_line(done.stderr.decode("utf-8", "replace"), last=True) or exit_words(done.returncode)
            raise TpuctlError(f"kubectl {args[0]} failed: {why}", hint=hint, exit_code=FAILED)
        return done.stdout.decode("utf-8", "replace")

    def get_json(self, *args: str) -> JSON:
        text = self.run("get", *args, "-o", "json")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth, as no object is
            raise TpuctlError("kubectl get printed something that is not JSON", exit_code=FAILED) from None
        if not isinstance(data, dict):
            raise TpuctlError("kubectl get printed something that is not a JSON object", exit_code=FAILED)
        return data

    def follow_logs(self, pod: str) -> reaper.Reaped:
        """`kubectl logs -f` in a session of its own (Ctrl-C on the terminal reaches tpuctl, which
        stops these itself) under a reaper, so that it dies with tpuctl however tpuctl ends, SIGKILL included."""
        return reaper.spawn(
            self.argv("logs", "--follow", pod, "--container", CONTAINER),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )


# ---- reading job and pod objects ------------------------------------------------------------


def job_result(kind: str, job: JSON) -> Kind | None:
    """SUCCEEDED, FAILED, or None while the job runs."""
    status = job.get("status") or {}
    if kind == "JobSet":
        terminal = status.get("terminalState")
        if terminal in ("Completed", "Failed"):
            return Kind.SUCCEEDED if terminal == "Completed" else Kind.FAILED
        done = {"Completed": Kind.SUCCEEDED, "Failed": Kind.FAILED}
    else:
        done = {"Succeeded": Kind.SUCCEEDED, "Failed": Kind.FAILED}
    for condition in status.get("conditions") or []:
        if condition.get("type") in done and str(condition.get("status")) == "True":
            return done[condition["type"]]
    return None


def job_message(job: JSON) -> str:
    for condition in reversed((job.get("status") or {}).get("conditions") or []):
        if str(condition.get("status")) == "True" and condition.get("message"):
            return str(condition["message"])
    return ""


def worker_name(kind: str, pod: JSON) -> str:
    """`worker:1`, `chief:0`, `ps:0` from the labels the operators put on their pods; else the pod's name."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if kind == "JobSet":
        index = annotations.get(JOB_INDEX_ANNOTATION, labels.get(JOB_INDEX_ANNOTATION))
        if index is not None:
            return f"worker:{index}"
    else:
        role, index = labels.get(TFJOB_TYPE_LABEL), labels.get(TFJOB_INDEX_LABEL)
        if role and index is not None:
            return f"{str(role).lower()}:{index}"
    return str(meta.get("name", "?"))


def _container(pod: JSON) -> JSON:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            found: JSON = status
            return found
    return {}


@dataclass
class Ended:
    """One finished container run."""

    worker: str
    pod: str
    exit_code: int
    reason: str
    finished_at: str
    restarts: int = 0  # the container's restart count: which attempt this run was


# ---- the Scheduler ---------------------------------------------------------------------------


class _PodLog:
    """`kubectl logs -f` for one run of one pod's container: a LogStream."""

    def __init__(self, kubectl: Kubectl, pod: str) -> None:
        self.pod = pod
        self.reaped = kubectl.follow_logs(pod)
        self.proc = self.reaped.proc
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.stdout, self.stderr = self.proc.stdout, self.proc.stderr

    def readline(self) -> bytes:
        line: bytes = self.stdout.readline(LINE_PIECE)  # a longer line comes in pieces (logs.LineSource)
        return line

    def ended(self) -> str | None:
        try:  # its stdout has ended: its last words on stderr, and its status, come within ENDED_S
            done = child_output.read(self.proc, deadline=time.monotonic() + ENDED_S, limit=ERROR_KEPT)
        except subprocess.TimeoutExpired:
            return f"kubectl logs for pod {self.pod} did not end within {ENDED_S:g}s of its log's end"
        if done.returncode != 0:
            error = done.stderr.decode("utf-8", "replace")
            return f"could not follow the log of pod {self.pod}: {one_line(error, last=True) or 'kubectl logs failed'}"
        return None

    def stop(self) -> None:
        self.reaped.stop(grace_s=2, first=signal.SIGTERM)


class KubeScheduler(Scheduler):
    """A TFJob or JobSet, through kubectl. A signal leaves it running (deleting is asked, never assumed)."""

    drain_s = DRAIN_S

    def __init__(self, manifest: Manifest, kubectl: Kubectl, *, notice: Callable[[str], None], poll_s: float) -> None:
        self.manifest = manifest
        self.kubectl = kubectl
        self.notice = notice
        self.poll_s = poll_s
        self.workers = manifest.workers
        self.ended: dict[tuple[str, int], Ended] = {}
        self.said: set[tuple[str, str]] = set()
        self.present: set[str] = set()  # pods in the last poll (a JobSet restart replaces them all)
        self.missing = 0  # polls in a row that did not find the job

    @property
    def _hint(self) -> str:
        crd = self.manifest.resource
        return f"`kubectl get crd {crd}` tells whether the cluster has the {self.manifest.kind} controller"

    def refuse_existing(self) -> None:
        """`apply` would quietly change a job that already has this name; a launch starts a new one."""
        m = self.manifest
        if self.kubectl.run("get", m.resource, m.name, "--ignore-not-found", "--output", "name", hint=self._hint).strip():
            raise TpuctlError(
                f"{m.kind} {m.name} already exists in namespace {m.namespace}",
                hint=f"pick another --job-name, or delete it: {m.delete_command}",
                exit_code=FAILED,
            )

    def submit(self) -> None:
        m = self.manifest
        self.kubectl.run("apply", "-f", "-", stdin=m.text, hint=self._hint)
        self.notice(f"applied {m.kind} {m.name} in namespace {m.namespace}; following its pods")

    def describe(self) -> JobStatus:
        running: list[ReplicaRun] = []
        job = self._poll(running)
        if job is None:
            self.missing += 1
            if self.missing >= 3:
                gone = f"{self.manifest.kind} {self.manifest.name} is gone (deleted?)"
                return JobStatus(end=Kind.FAILED, exit_code=FAILED, message=gone, running=tuple(running))
            return JobStatus(running=tuple(running))
        self.missing = 0
        result = job_result(self.manifest.kind, job)
        if result is None:
            return JobStatus(running=tuple(running))
        self._poll(running)  # pods that finished since the last look
        if result is Kind.SUCCEEDED:
            return JobStatus(end=result, running=tuple(running))
        failure = self._first_failure()
        return JobStatus(
            end=Kind.FAILED,
            exit_code=failure.exit_code if failure is not None else FAILED,
            message=job_message(job),
            failed=None if failure is None else _replica(failure),
            running=tuple(running),
        )

    def cancel(self) -> None:
        self.kubectl.run("delete", self.manifest.resource, self.manifest.name, "--wait=false", "--ignore-not-found")

    def job_ref(self) -> JobRef:
        m = self.manifest
        return JobRef(kind=m.kind, name=m.name, namespace=m.namespace, delete_command=m.delete_command)

    def attempts(self) -> int:
        return max((restarts for _, restarts in self.ended), default=0) + 1

    def open_log(self, run: ReplicaRun) -> _PodLog:
        return _PodLog(self.kubectl, run.host)

    # -- one poll ----------------------------------------------------------------------------

    def _poll(self, running: list[ReplicaRun]) -> JSON | None:
        """Look at the job and its pods once: note container runs and exits. Returns the job object."""
        kind = self.manifest.kind
        listing = self.kubectl.get_json(f"{self.manifest.resource},pods", "--selector", self.manifest.selector)
        job = None
        present = set()
        for item in listing.get("items") or []:
            if item.get("kind") == kind and (item.get("metadata") or {}).get("name") == self.manifest.name:
                job = item
            elif item.get("kind") == "Pod":
                present.add(str((item.get("metadata") or {}).get("name", "")))
                self._see_pod(item, running)
        if present:
            self.present = present
        return job

    def _see_pod(self, pod: JSON, running: list[ReplicaRun]) -> None:
        name = str((pod.get("metadata") or {}).get("name", ""))
        worker = worker_name(self.manifest.kind, pod)
        container = _container(pod)
        state = container.get("state") or {}
        restarts = int(container.get("restartCount") or 0)
        if "running" in state or "terminated" in state:
            # One attempt a container run: the local launch's layout, attempt = restarts + 1.
            running.append(ReplicaRun(worker=worker, attempt=restarts + 1, host=name))
        terminated = state.get("terminated")
        if terminated is not None and (name, restarts) not in self.ended:
            self.ended[(name, restarts)] = Ended(
                worker=worker,
                pod=name,
                exit_code=int(terminated.get("exitCode") or 0),
                reason=str(terminated.get("reason") or ""),
                finished_at=str(terminated.get("finishedAt") or ""),
                restarts=restarts,
            )
        waiting = state.get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason and reason not in ("ContainerCreating", "PodInitializing"):
            self._say_once(name, reason, f"{worker} (pod {name}) is waiting: {reason}: {waiting.get('message', '')}".rstrip(": "))
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and str(condition.get("status")) == "False" and condition.get("reason"):
                self._say_once(name, str(condition["reason"]), f"{worker} (pod {name}) is not scheduled yet: {condition.get('message', condition['reason'])}")

    def _say_once(self, pod: str, reason: str, line: str) -> None:
        if (pod, reason) not in self.said:
            self.said.add((pod, reason))
            self.notice(line)

    def _first_failure(self) -> Ended | None:
        """The first failure of the last attempt: each pod's latest container run, pods of the last poll first."""
        latest: dict[str, tuple[int, Ended]] = {}
        for (pod, restarts), ended in self.ended.items():
            if pod not in latest or restarts > latest[pod][0]:
                latest[pod] = (restarts, ended)
        failed = [e for _, e in latest.values() if e.exit_code != 0]
        failed = [e for e in failed if e.pod in self.present] or failed
        order = {w: i for i, w in enumerate(self.manifest.workers)}
        failed.sort(key=lambda e: (e.finished_at or "~", order.get(e.worker, len(order))))
        return failed[0] if failed else None


def _replica(ended: Ended) -> Replica:
    reason = f" ({ended.reason})" if ended.reason and ended.reason != "Error" else ""
    return Replica(
        worker=ended.worker,
        host=ended.pod,
        status=f"exited with {ended.exit_code}{reason}",
        returncode=ended.exit_code,
        exit_code=ended.exit_code,
        attempt=ended.restarts + 1,
        oom_reported=ended.reason == "OOMKilled",  # the kubelet names the OOM killer
    )


def follow(manifest: Manifest, context: RunContext) -> Outcome:
    """Apply the manifest and follow its pods until the job ends or a signal stops the launch."""
    scheduler = KubeScheduler(manifest, Kubectl(manifest.namespace), notice=context.notice, poll_s=poll_interval())
    follower = JobFollower(scheduler, context, Fold(context.verbose, manifest.framework))
    scheduler.refuse_existing()
    outcome = follower.run()
    folded = follower.fold.note()
    if folded is not None:
        context.notice(folded)
    return outcome
