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
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl import reaper, signals
from tpuctl.backends.kubernetes.manifest import (
    CONTAINER,
    JOB_INDEX_ANNOTATION,
    TFJOB_INDEX_LABEL,
    TFJOB_TYPE_LABEL,
    Manifest,
)
from tpuctl.errors import FAILED, TpuctlError, one_line
from tpuctl.launch.backend import RunContext
from tpuctl.launch.cause import classify
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.outcome import EXIT_INTERRUPTED, Failure, JobRef, Outcome
from tpuctl.private_files import private_dir
from tpuctl.seconds import from_env

DEFAULT_POLL_S = 2.0
DRAIN_S = 10.0  # how long the logs of finished pods may take to arrive once the job is over
JSON = dict[str, Any]


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
        feed: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        try:
            done = reaper.run(self.argv(*args), check=False, capture_output=True, text=True, timeout=timeout, **feed)
        except subprocess.TimeoutExpired:
            raise TpuctlError(f"kubectl {args[0]} did not answer in {timeout:.0f}s", exit_code=FAILED) from None
        if done.returncode != 0:
            why = one_line(done.stderr, last=True) or f"exit status {done.returncode}"
            raise TpuctlError(f"kubectl {args[0]} failed: {why}", hint=hint, exit_code=FAILED)
        output: str = done.stdout
        return output

    def get_json(self, *args: str) -> JSON:
        text = self.run("get", *args, "-o", "json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
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


def job_result(kind: str, job: JSON) -> str | None:
    """`succeeded`, `failed`, or None while the job runs."""
    status = job.get("status") or {}
    if kind == "JobSet":
        terminal = status.get("terminalState")
        if terminal in ("Completed", "Failed"):
            return "succeeded" if terminal == "Completed" else "failed"
        done = {"Completed": "succeeded", "Failed": "failed"}
    else:
        done = {"Succeeded": "succeeded", "Failed": "failed"}
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


# ---- following pods -------------------------------------------------------------------------


class _Follower:
    """One `kubectl logs -f` for one run of one pod's container; lines tagged, saved, remembered."""

    def __init__(
        self,
        kubectl: Kubectl,
        pod: str,
        prefix: str,
        writer: logs.LineWriter,
        log_path: Path,
        tail: deque[str],
        notice: Callable[[str], None],
        fold: Fold,
    ) -> None:
        self.pod = pod
        self.notice = notice
        self.stopping = False
        self.fold = fold
        self.reaped = kubectl.follow_logs(pod)
        self.proc = self.reaped.proc
        self.thread = threading.Thread(target=self._pump, args=(prefix, writer, log_path, tail), daemon=True)
        self.thread.start()

    def _pump(self, prefix: str, writer: logs.LineWriter, log_path: Path, tail: deque[str]) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        # Appended: a JobSet restart brings new pods for the same worker within one attempt's file.
        logs.pump(self.proc.stdout, prefix, writer, log_path, tail, append=True, hide=self.fold.hides)
        error = self.proc.stderr.read().decode("utf-8", "replace")
        if self.proc.wait() != 0 and not self.stopping:
            self.notice(f"could not follow the log of pod {self.pod}: {one_line(error, last=True) or 'kubectl logs failed'}")

    def stop(self) -> None:
        self.stopping = True
        self.reaped.stop(grace_s=2, first=signal.SIGTERM)
        self.thread.join(timeout=2)


class KubeRun:
    def __init__(
        self,
        manifest: Manifest,
        kubectl: Kubectl,
        *,
        writer: logs.LineWriter,
        notice: Callable[[str], None],
        log_dir: Path,
        colour: bool,
        poll_s: float,
        fold: Fold | None = None,
    ) -> None:
        self.manifest = manifest
        self.fold = fold if fold is not None else Fold(verbose=True)  # TensorFlow's start-up lines (tf_noise.py)
        self.kubectl = kubectl
        self.writer = writer
        self.notice = notice
        self.log_dir = log_dir
        self.colour = colour
        self.poll_s = poll_s
        self.followers: dict[tuple[str, int], _Follower] = {}
        self.tails: dict[str, deque[str]] = {}
        self.ended: dict[tuple[str, int], Ended] = {}
        self.said: set[tuple[str, str]] = set()
        self.present: set[str] = set()  # pods in the last poll (a JobSet restart replaces them all)
        self.started = time.monotonic()

    # -- one poll ----------------------------------------------------------------------------

    def _poll(self) -> JSON | None:
        """Look at the job and its pods once: start log followers, note exits. Returns the job object."""
        kind = self.manifest.kind
        listing = self.kubectl.get_json(f"{self.manifest.resource},pods", "--selector", self.manifest.selector)
        job = None
        present = set()
        for item in listing.get("items") or []:
            if item.get("kind") == kind and (item.get("metadata") or {}).get("name") == self.manifest.name:
                job = item
            elif item.get("kind") == "Pod":
                present.add(str((item.get("metadata") or {}).get("name", "")))
                self._see_pod(item)
        if present:
            self.present = present
        return job

    def _position(self, worker: str) -> int:
        workers = self.manifest.workers
        return workers.index(worker) if worker in workers else len(workers) + len(self.tails)

    def _see_pod(self, pod: JSON) -> None:
        name = str((pod.get("metadata") or {}).get("name", ""))
        worker = worker_name(self.manifest.kind, pod)
        container = _container(pod)
        state = container.get("state") or {}
        restarts = int(container.get("restartCount") or 0)
        if "running" in state or "terminated" in state:
            key = (name, restarts)
            if key not in self.followers:
                tail = self.tails.setdefault(worker, logs.new_tail())
                prefix = logs.tag(worker, self._position(worker), self.colour)
                log_path = self._log_path(worker, restarts)
                self.followers[key] = _Follower(self.kubectl, name, prefix, self.writer, log_path, tail, self.notice, self.fold)
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

    def _log_path(self, worker: str, restarts: int) -> Path:
        """The local launch's layout: one folder per attempt (a container's run), one file per worker."""
        folder = private_dir(self.log_dir / f"attempt-{restarts + 1}")
        return folder / f"{worker.replace(':', '-')}.log"

    def _say_once(self, pod: str, reason: str, line: str) -> None:
        if (pod, reason) not in self.said:
            self.said.add((pod, reason))
            self.notice(line)

    # -- the whole run ------------------------------------------------------------------------

    def run(self) -> Outcome:
        crd = self.manifest.resource
        hint = f"`kubectl get crd {crd}` tells whether the cluster has the {self.manifest.kind} controller"
        # `apply` would quietly change a job that already has this name; a launch starts a new one.
        if self.kubectl.run("get", crd, self.manifest.name, "--ignore-not-found", "--output", "name", hint=hint).strip():
            raise TpuctlError(
                f"{self.manifest.kind} {self.manifest.name} already exists in namespace {self.manifest.namespace}",
                hint=f"pick another --job-name, or delete it: {self.manifest.delete_command}",
                exit_code=FAILED,
            )
        try:
            with signals.handled(signals.raise_stopped):
                try:
                    self.kubectl.run("apply", "-f", "-", stdin=self.manifest.text, hint=hint)
                    self.notice(f"applied {self.manifest.kind} {self.manifest.name} in namespace {self.manifest.namespace}; following its pods")
                    return self._follow()
                finally:
                    for follower in self.followers.values():
                        follower.stop()
        except signals.Stopped as stopped:
            return self._interrupted(stopped.signum)

    def _follow(self) -> Outcome:
        missing = 0
        while True:
            job = self._poll()
            if job is None:
                missing += 1
                if missing >= 3:
                    self._drain()
                    return self._outcome(FAILED, message=f"{self.manifest.kind} {self.manifest.name} is gone (deleted?)")
            else:
                missing = 0
                result = job_result(self.manifest.kind, job)
                if result is not None:
                    self._poll()  # pods that finished since the last look
                    self._drain()
                    return self._finish(result, job)
            time.sleep(self.poll_s)

    def _drain(self) -> None:
        deadline = time.monotonic() + DRAIN_S
        for follower in self.followers.values():
            follower.thread.join(timeout=max(0.0, deadline - time.monotonic()))

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

    def _finish(self, result: str, job: JSON) -> Outcome:
        if result == "succeeded":
            return self._outcome(0)
        failure = self._first_failure()
        code = failure.exit_code if failure is not None else FAILED
        return self._outcome(code, failure=failure, message=job_message(job))

    def _outcome(self, code: int, failure: Ended | None = None, message: str = "") -> Outcome:
        m = self.manifest
        restarts = max((restarts for _, restarts in self.ended), default=0)
        return Outcome(
            exit_code=code,
            attempts=restarts + 1,
            elapsed_s=time.monotonic() - self.started,
            failure=None if failure is None else self._failure(failure),
            job=JobRef(kind=m.kind, name=m.name, namespace=m.namespace, delete_command=m.delete_command, message=message),
        )

    def _failure(self, ended: Ended) -> Failure:
        reason = f" ({ended.reason})" if ended.reason and ended.reason != "Error" else ""
        tail = list(self.tails.get(ended.worker, ()))
        return Failure(
            worker=ended.worker,
            host=ended.pod,
            status=f"exited with {ended.exit_code}{reason}",
            exit_code=ended.exit_code,
            runtime_s=None,
            tail=tail,
            log=self._log_path(ended.worker, ended.restarts),
            # A container's status is its process's, 128+N for signal N; the kubelet names the OOM killer.
            cause=classify(ended.exit_code, tail, oom_reported=ended.reason == "OOMKilled"),
        )

    def _interrupted(self, signum: int) -> Outcome:
        for follower in self.followers.values():
            follower.stop()
        outcome = self._outcome(EXIT_INTERRUPTED)
        outcome.interrupted = True
        job = outcome.job
        assert job is not None
        where = f"{self.manifest.kind} {self.manifest.name} (namespace {self.manifest.namespace})"
        # Only a person at a terminal pressing Ctrl-C is asked; `kill` and a lost terminal are not.
        if signum == signal.SIGINT and _interactive():
            import click

            try:
                delete = click.confirm(f"tpuctl: interrupted. Delete {where} and its pods?", default=False, err=True)
            except (click.Abort, KeyboardInterrupt, EOFError, signals.Stopped):
                delete = False
            if delete:
                self.kubectl.run("delete", self.manifest.resource, self.manifest.name, "--wait=false", "--ignore-not-found")
                self.notice(f"deleted {where}")
                job.deleted = True
                return outcome
        self.notice(f"received {signal.Signals(signum).name}; {where} keeps running. Delete it with: {self.manifest.delete_command}")
        return outcome


def _interactive() -> bool:
    return sys.stdin.isatty()


def follow(manifest: Manifest, context: RunContext) -> Outcome:
    """Apply the manifest and follow its pods until the job ends or a signal stops the launch."""
    run = KubeRun(
        manifest,
        Kubectl(manifest.namespace),
        writer=context.writer,
        notice=context.notice,
        log_dir=context.log_dir,
        colour=context.colour,
        poll_s=poll_interval(),
        fold=Fold(context.verbose),
    )
    outcome = run.run()
    folded = run.fold.note()
    if folded is not None:
        context.notice(folded)
    return outcome
