"""Run a rendered manifest with kubectl: apply it, follow every pod's log, exit with the job's result.

Everything goes through kubectl, so whatever reaches the user's cluster today
(kubeconfig contexts, gke-gcloud-auth-plugin, proxies) reaches it from tpuctl:

    kubectl apply -f -                                  the manifest, on stdin
    kubectl get RESOURCE,pods -l SELECTOR -o json       job status and pods, every poll
    kubectl logs -f POD -c tensorflow                   one per container run, tagged [worker:N]
    kubectl delete RESOURCE NAME --wait=false           only when asked after Ctrl-C

The job's result decides the exit status: 0 when it succeeded; when it failed,
the exit code of the replica that failed first (by finish time), else 1; 130
after Ctrl-C. Ctrl-C never deletes anything unasked: on a terminal tpuctl asks,
elsewhere it prints the command that deletes the job.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tpuctl.errors import FAILED, TpuctlError
from tpuctl.launch import logs
from tpuctl.launch.k8s_manifest import (
    CONTAINER,
    JOB_INDEX_ANNOTATION,
    TFJOB_INDEX_LABEL,
    TFJOB_TYPE_LABEL,
    Manifest,
)

DEFAULT_POLL_S = 2.0
DRAIN_S = 10.0  # how long the logs of finished pods may take to arrive once the job is over
INTERRUPTED = 130
JSON = dict[str, Any]


def poll_interval() -> float:
    raw = os.environ.get("TPUCTL_KUBE_POLL_S", "")
    try:
        value = float(raw) if raw else DEFAULT_POLL_S
    except ValueError:
        raise TpuctlError(f"TPUCTL_KUBE_POLL_S={raw!r} is not a number of seconds") from None
    return max(value, 0.05)


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
            done = subprocess.run(self.argv(*args), check=False, capture_output=True, text=True, timeout=timeout, **feed)
        except subprocess.TimeoutExpired:
            raise TpuctlError(f"kubectl {args[0]} did not answer in {timeout:.0f}s", exit_code=FAILED) from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            why = lines[-1] if lines else f"exit status {done.returncode}"
            raise TpuctlError(f"kubectl {args[0]} failed: {why}", hint=hint, exit_code=FAILED)
        return done.stdout

    def get_json(self, *args: str) -> JSON:
        text = self.run("get", *args, "-o", "json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise TpuctlError("kubectl get printed something that is not JSON", exit_code=FAILED) from None
        if not isinstance(data, dict):
            raise TpuctlError("kubectl get printed something that is not a JSON object", exit_code=FAILED)
        return data

    def follow_logs(self, pod: str) -> subprocess.Popen[bytes]:
        # A session of its own: Ctrl-C on the terminal reaches tpuctl, which stops these itself.
        return subprocess.Popen(
            self.argv("logs", "--follow", pod, "--container", CONTAINER),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
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
            return status
    return {}


@dataclass
class Ended:
    """One finished container run."""

    worker: str
    pod: str
    exit_code: int
    reason: str
    finished_at: str


@dataclass
class KubeOutcome:
    exit_code: int
    result: str  # succeeded | failed | interrupted | gone
    elapsed_s: float
    failure: Ended | None = None
    message: str = ""
    tail: list[str] = field(default_factory=list)
    deleted: bool = False


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
    ) -> None:
        self.pod = pod
        self.notice = notice
        self.stopping = False
        self.proc = kubectl.follow_logs(pod)
        self.thread = threading.Thread(target=self._pump, args=(prefix, writer, log_path, tail), daemon=True)
        self.thread.start()

    def _pump(self, prefix: str, writer: logs.LineWriter, log_path: Path, tail: deque[str]) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        with open(log_path, "ab") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                line = logs.display_text(raw)
                tail.append(line)
                writer.write(f"{prefix} {line}")
        error = self.proc.stderr.read().decode("utf-8", "replace").strip()
        if self.proc.wait() != 0 and not self.stopping:
            lines = error.splitlines()
            self.notice(f"could not follow the log of pod {self.pod}: {lines[-1] if lines else 'kubectl logs failed'}")

    def stop(self) -> None:
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
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
    ) -> None:
        self.manifest = manifest
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
                log_path = self.log_dir / f"{worker.replace(':', '-')}.log"
                self.followers[key] = _Follower(self.kubectl, name, prefix, self.writer, log_path, tail, self.notice)
        terminated = state.get("terminated")
        if terminated is not None and (name, restarts) not in self.ended:
            self.ended[(name, restarts)] = Ended(
                worker=worker,
                pod=name,
                exit_code=int(terminated.get("exitCode") or 0),
                reason=str(terminated.get("reason") or ""),
                finished_at=str(terminated.get("finishedAt") or ""),
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

    # -- the whole run ------------------------------------------------------------------------

    def run(self) -> KubeOutcome:
        crd = self.manifest.resource
        hint = f"`kubectl get crd {crd}` tells whether the cluster has the {self.manifest.kind} controller"
        # `apply` would quietly change a job that already has this name; a launch starts a new one.
        if self.kubectl.run("get", crd, self.manifest.name, "--ignore-not-found", "--output", "name", hint=hint).strip():
            raise TpuctlError(
                f"{self.manifest.kind} {self.manifest.name} already exists in namespace {self.manifest.namespace}",
                hint=f"pick another --job-name, or delete it: {self.manifest.delete_command}",
                exit_code=FAILED,
            )
        # Ctrl-C must reach us even when the shell that started tpuctl in the background
        # left SIGINT ignored (Python then installs no KeyboardInterrupt handler itself).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self.kubectl.run("apply", "-f", "-", stdin=self.manifest.text, hint=hint)
            self.notice(f"applied {self.manifest.kind} {self.manifest.name} in namespace {self.manifest.namespace}; following its pods")
            return self._follow()
        except KeyboardInterrupt:
            return self._interrupted()
        finally:
            signal.signal(signal.SIGINT, previous)
            for follower in self.followers.values():
                follower.stop()

    def _follow(self) -> KubeOutcome:
        missing = 0
        while True:
            job = self._poll()
            if job is None:
                missing += 1
                if missing >= 3:
                    self._drain()
                    return self._outcome("gone", FAILED, message=f"{self.manifest.kind} {self.manifest.name} is gone (deleted?)")
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

    def _finish(self, result: str, job: JSON) -> KubeOutcome:
        if result == "succeeded":
            return self._outcome("succeeded", 0)
        failure = self._first_failure()
        code = failure.exit_code if failure is not None else FAILED
        return self._outcome("failed", code, failure=failure, message=job_message(job))

    def _outcome(self, result: str, code: int, failure: Ended | None = None, message: str = "") -> KubeOutcome:
        tail = list(self.tails.get(failure.worker, ())) if failure else []
        return KubeOutcome(code, result, time.monotonic() - self.started, failure, message, tail)

    def _interrupted(self) -> KubeOutcome:
        for follower in self.followers.values():
            follower.stop()
        outcome = self._outcome("interrupted", INTERRUPTED)
        where = f"{self.manifest.kind} {self.manifest.name} (namespace {self.manifest.namespace})"
        if _interactive():
            import click

            try:
                delete = click.confirm(f"tpuctl: interrupted. Delete {where} and its pods?", default=False, err=True)
            except (click.Abort, KeyboardInterrupt, EOFError):
                delete = False
            if delete:
                self.kubectl.run("delete", self.manifest.resource, self.manifest.name, "--wait=false", "--ignore-not-found")
                self.notice(f"deleted {where}")
                outcome.deleted = True
                return outcome
        self.notice(f"interrupted; {where} keeps running. Delete it with: {self.manifest.delete_command}")
        return outcome


def _interactive() -> bool:
    return sys.stdin.isatty()


def summarise(outcome: KubeOutcome, manifest: Manifest, log_dir: Path, as_json: bool, out: TextIO = sys.stdout) -> None:
    failure = outcome.failure
    if as_json:
        record = {
            "exit_code": outcome.exit_code,
            "result": outcome.result,
            "kind": manifest.kind,
            "name": manifest.name,
            "namespace": manifest.namespace,
            "elapsed_s": round(outcome.elapsed_s, 3),
            "log_dir": str(log_dir),
            "deleted": outcome.deleted,
            "message": outcome.message,
            "failure": None
            if failure is None
            else {"worker": failure.worker, "pod": failure.pod, "exit_code": failure.exit_code, "reason": failure.reason, "tail": outcome.tail},
        }
        print(json.dumps(record), file=out, flush=True)
        return

    def say(line: str) -> None:
        print(f"tpuctl: {line}", file=sys.stderr, flush=True)

    what = f"{manifest.kind} {manifest.name}"
    if outcome.result == "succeeded":
        say(f"{what} succeeded after {outcome.elapsed_s:.1f}s; logs: {log_dir}")
    elif outcome.result == "gone":
        say(outcome.message)
    elif outcome.result == "failed":
        if failure is not None:
            reason = f" ({failure.reason})" if failure.reason and failure.reason != "Error" else ""
            say(f"{what} failed: {failure.worker} (pod {failure.pod}) exited with {failure.exit_code}{reason}")
        else:
            say(f"{what} failed" + (f": {outcome.message}" if outcome.message else "; no replica's exit code is known"))
        if outcome.tail:
            say(f"last lines of {failure.worker if failure else '?'}:")
            for line in outcome.tail:
                print(f"    {line}", file=sys.stderr)
        say(f"logs: {log_dir}; the job stays until deleted: {manifest.delete_command}")


def launch(manifest: Manifest, *, log_dir: Path, as_json: bool) -> int:
    """`tpuctl launch --backend kubernetes` without --dry-run: apply, follow, exit status."""
    kubectl = Kubectl(manifest.namespace)
    stream = sys.stderr if as_json else sys.stdout
    run = KubeRun(
        manifest,
        kubectl,
        writer=logs.LineWriter(stream),
        notice=lambda line: print(f"tpuctl: {line}", file=sys.stderr, flush=True),
        log_dir=log_dir,
        colour=logs.use_colour(stream),
        poll_s=poll_interval(),
    )
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TpuctlError(f"cannot create log dir {log_dir}: {err.strerror}", hint="pass --log-dir") from None
    outcome = run.run()
    summarise(outcome, manifest, log_dir, as_json)
    return outcome.exit_code
