"""How a followed TFJob/JobSet is read: results, worker names, which failure decides the exit status."""

from __future__ import annotations

from typing import Any

import pytest

from tpuctl.backends.kubernetes.follow import Ended, Kubectl, KubeScheduler, job_result, worker_name
from tpuctl.backends.kubernetes.manifest import KubeOptions, render
from tpuctl.endings import Kind
from tpuctl.launch.job import Job


@pytest.mark.parametrize(
    ("kind", "status", "result"),
    [
        ("TFJob", {}, None),
        ("TFJob", {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}, None),
        ("TFJob", {"conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]}, Kind.SUCCEEDED),
        ("TFJob", {"conditions": [{"type": "Failed", "status": "True", "message": "boom"}]}, Kind.FAILED),
        ("TFJob", {"conditions": [{"type": "Failed", "status": "False"}]}, None),
        ("JobSet", {"terminalState": "Completed"}, Kind.SUCCEEDED),
        ("JobSet", {"terminalState": "Failed"}, Kind.FAILED),
        ("JobSet", {"conditions": [{"type": "Completed", "status": "True"}]}, Kind.SUCCEEDED),
        ("JobSet", {"conditions": [{"type": "Succeeded", "status": "True"}]}, None),
    ],
)
def test_job_result(kind: str, status: dict[str, Any], result: Kind | None) -> None:
    """The job's end as endings' Kind itself, never a word spelt here."""
    assert job_result(kind, {"status": status}) is result


def test_worker_names_come_from_the_operators_labels() -> None:
    tfjob_pod = {"metadata": {"name": "x-ps-1", "labels": {"training.kubeflow.org/replica-type": "PS", "training.kubeflow.org/replica-index": "1"}}}
    assert worker_name("TFJob", tfjob_pod) == "ps:1"
    jobset_pod = {"metadata": {"name": "x-slice-0-3-abcde", "annotations": {"batch.kubernetes.io/job-completion-index": "3"}}}
    assert worker_name("JobSet", jobset_pod) == "worker:3"
    assert worker_name("JobSet", {"metadata": {"name": "odd"}}) == "odd"


def test_the_last_attempts_first_failure_decides() -> None:
    manifest = render(Job(script="t.py", workers=2, python="python"), KubeOptions(image="i", name="x"))
    run = KubeScheduler(manifest, Kubectl("default", binary="/bin/false"), notice=lambda line: None, poll_s=1)
    run.ended = {
        ("x-worker-0", 0): Ended("worker:0", "x-worker-0", 3, "Error", "2026-01-01T00:00:01Z"),  # restarted since
        ("x-worker-0", 1): Ended("worker:0", "x-worker-0", 0, "Completed", "2026-01-01T00:00:09Z"),
        ("x-worker-1", 1): Ended("worker:1", "x-worker-1", 137, "OOMKilled", "2026-01-01T00:00:05Z"),
        ("gone-pod", 0): Ended("worker:1", "gone-pod", 1, "Error", "2026-01-01T00:00:00Z"),  # an earlier JobSet attempt
    }
    run.present = {"x-worker-0", "x-worker-1"}
    failure = run._first_failure()
    assert failure is not None and (failure.worker, failure.exit_code) == ("worker:1", 137)
