"""`tpuctl launch --backend kubernetes` through the real kubectl, against a stand-in API server.

kubectl does its own discovery, OpenAPI check, client-side apply, get, logs --follow and
delete against tests/standins/kube_api.py; a toy operator there turns the applied TFJob or
JobSet into pods that print lines and exit as each test says.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import documented_outcome, run_tpuctl, tpuctl_cmd
from tests.standins import kube_schemas
from tests.standins.kube_api import KubeStandin, PodScript
from tests.standins.processes import read_until

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

IMAGE = "registry.example/train:1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[KubeStandin, dict[str, str]]]:
    with KubeStandin() as standin:
        env = {
            **os.environ,
            "KUBECONFIG": str(standin.write_kubeconfig(tmp_path / "kubeconfig")),
            "KUBECACHEDIR": str(tmp_path / "kube-cache"),
            "TPUCTL_KUBE_POLL_S": "0.1",
            "NO_COLOR": "1",
        }
        yield standin, env


def launch_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["launch", "train.py", "--backend", "kubernetes", "--image", IMAGE, "--log-dir", str(tmp_path / "logs"), *extra]


def applied(standin: KubeStandin) -> dict[str, Any]:
    """The one object kubectl created, less the annotation client-side apply adds."""
    (obj,) = standin.created
    annotations = obj["metadata"].get("annotations") or {}
    assert LAST_APPLIED in annotations
    annotations.pop(LAST_APPLIED)
    if not annotations:
        obj["metadata"].pop("annotations")
    return obj


def test_applied_manifest_is_the_dry_run_one_hostile_arguments_included(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    hostile = ["a\nb: c", '"quoted" #x', "nel\x85ls\u2028", "caf\u00e9 \U0001f600", "{{ x }}", "--workers", "yes"]
    args = launch_args(tmp_path, "--workers", "2", "--job-name", "hostile", "--env", "NOTE=x: y\n- z")
    dry = run_tpuctl(*args, "--dry-run", "--", *hostile, env=env, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert standin.created == []
    real = run_tpuctl(*args, "--", *hostile, env=env, timeout=60)
    assert real.returncode == 0, real.stderr
    expected = yaml.safe_load(dry.stdout)
    assert applied(standin) == expected  # what Go's YAML made of the text is what PyYAML made of it
    assert kube_schemas.errors(expected) == []
    container = expected["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"][4:] == hostile
    # kubectl asked the server to validate (the stand-in checks the CRD schema, strictly).
    assert any("fieldValidation=Strict" in path for method, path in standin.requests if method == "POST")


def test_logs_are_prefixed_saved_and_success_exits_0(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.scripts = {
        "worker:0": PodScript(lines=["epoch 1 loss 0.5", "epoch 2 loss 0.25"]),
        "worker:1": PodScript(lines=["worker one here"], start_after=0.3),
    }
    result = run_tpuctl(*launch_args(tmp_path, "--workers", "2", "--job-name", "ok"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "[worker:0] epoch 1 loss 0.5" in lines
    assert "[worker:0] epoch 2 loss 0.25" in lines
    assert "[worker:1] worker one here" in lines
    assert "TFJob ok succeeded" in result.stderr
    # The local launch's layout: a folder per attempt, a file per worker, the outcome beside them.
    assert (tmp_path / "logs" / "attempt-1" / "worker-0.log").read_text() == "epoch 1 loss 0.5\nepoch 2 loss 0.25\n"
    assert (tmp_path / "logs" / "attempt-1" / "worker-1.log").read_text() == "worker one here\n"
    assert applied(standin)["kind"] == "TFJob" and "name: \"ok\"" in (tmp_path / "logs" / "attempt-1" / "manifest.yaml").read_text()
    assert json.loads((tmp_path / "logs" / "outcome.json").read_text())["result"] == "succeeded"


def test_tensorflow_start_up_lines_are_folded_from_the_console_and_kept_in_the_log(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    chatter = "I0000 00:00:1763900000.123456    1234 port.cc:153] oneDNN custom operations are on."
    standin.scripts = {"worker:0": PodScript(lines=[chatter, "epoch 1 loss 0.5"])}
    result = run_tpuctl(*launch_args(tmp_path, "--job-name", "quiet"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "[worker:0] epoch 1 loss 0.5" in result.stdout.splitlines() and "oneDNN" not in result.stdout
    assert "1 TensorFlow log line folded" in result.stderr, result.stderr
    assert chatter in (tmp_path / "logs" / "attempt-1" / "worker-0.log").read_text()
    verbose = run_tpuctl(*launch_args(tmp_path / "v", "--job-name", "loud", "--verbose"), env=env, timeout=60)
    assert f"[worker:0] {chatter}" in verbose.stdout.splitlines(), verbose.stdout


def test_a_failed_replica_gives_its_exit_code(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.scripts = {
        "chief:0": PodScript(lines=["coordinating"], exit_code=None),
        "worker:0": PodScript(lines=["serving"], exit_code=None),
        "ps:0": PodScript(lines=["serving"], exit_code=None),
        "worker:1": PodScript(lines=["about to fail", "Traceback: boom"], start_after=1.0, exit_code=7),
    }
    args = launch_args(tmp_path, "--strategy", "parameter-server", "--workers", "2", "--ps", "1", "--job-name", "ps-job", "--json")
    result = run_tpuctl(*args, env=env, timeout=60)
    assert result.returncode == 7, result.stderr
    record = json.loads(result.stdout)
    assert record["result"] == "failed"
    assert record["failure"]["worker"] == "worker:1"
    assert record.keys() == documented_outcome().keys()  # the one schema every backend prints
    assert record["backend"] == "kubernetes" and record["exit_code"] == 7 and not record["interrupted"]
    assert record["failure"]["host"] == "ps-job-worker-1"  # the pod it ran in
    assert record["failure"]["exit_code"] == 7
    assert record["job"] == {"kind": "TFJob", "name": "ps-job", "namespace": "default", "message": record["job"]["message"], "deleted": False}
    assert record["failure"]["tail"] == ["about to fail", "Traceback: boom"]
    assert "[worker:1] Traceback: boom" in result.stderr.splitlines()  # with --json, logs go to stderr
    assert "[chief:0] coordinating" in result.stderr.splitlines()


def test_a_tpu_slice_runs_as_a_jobset_one_pod_per_host(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.default_script = lambda worker: PodScript(lines=[f"host {worker} ready"])
    args = launch_args(tmp_path, "--accelerator", "tpu-v4-podslice", "--topology", "2x2x4", "--job-name", "slice")
    result = run_tpuctl(*args, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    obj = applied(standin)
    assert obj["kind"] == "JobSet" and kube_schemas.errors(obj) == []
    for index in range(4):
        assert f"[worker:{index}] host worker:{index} ready" in result.stdout.splitlines()
    assert "JobSet slice succeeded" in result.stderr


def test_a_jax_run_on_cpu_pods_runs_as_a_jobset_told_its_cluster(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.default_script = lambda worker: PodScript(lines=[f"process {worker} joined"])
    result = run_tpuctl(*launch_args(tmp_path, "--framework", "jax", "--workers", "2", "--job-name", "keras-jax"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    obj = applied(standin)  # what a strict API server took, through the real kubectl
    assert obj["kind"] == "JobSet" and kube_schemas.errors(obj) == []
    (container,) = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    names = {var["name"] for var in container["env"]}
    assert {"KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES", "KERAS_DISTRIBUTION_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"} <= names
    assert "TF_CONFIG" not in names
    for index in range(2):
        assert f"[worker:{index}] process worker:{index} joined" in result.stdout.splitlines()
    assert "JobSet keras-jax succeeded" in result.stderr


def test_a_failed_tpu_host_fails_the_launch_with_its_code(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.default_script = lambda worker: PodScript(lines=["ok"], start_after=0.3)
    standin.scripts = {"worker:2": PodScript(lines=["TPU init failed"], exit_code=139, start_after=0.5, reason="Error")}
    args = launch_args(tmp_path, "--accelerator", "tpu-v5-lite-podslice", "--topology", "4x4", "--job-name", "slice-bad")
    result = run_tpuctl(*args, env=env, timeout=60)
    assert result.returncode == 139, result.stderr
    assert "worker:2 (pod slice-bad-slice-0-2-" in result.stderr
    assert "kubectl delete jobsets.jobset.x-k8s.io slice-bad -n default" in result.stderr


def test_a_waiting_pod_is_reported(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.scripts = {"worker:0": PodScript(lines=["late"], waiting="ImagePullBackOff", start_after=0.6)}
    result = run_tpuctl(*launch_args(tmp_path, "--job-name", "slow"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "worker:0 (pod slow-worker-0) is waiting: ImagePullBackOff" in result.stderr


def test_a_job_name_in_use_is_refused_not_changed(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    first = run_tpuctl(*launch_args(tmp_path, "--job-name", "twice"), env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    again = run_tpuctl(*launch_args(tmp_path / "again", "--job-name", "twice", "--workers", "3"), env=env, timeout=60)  # its own --log-dir
    assert again.returncode == 1
    assert "TFJob twice already exists in namespace default" in again.stderr
    assert len(standin.created) == 1
    assert not [path for method, path in standin.requests if method in ("PATCH", "PUT")]


def test_a_job_deleted_while_followed_ends_the_launch(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    standin, env = kube
    standin.scripts = {"worker:0": PodScript(lines=["training forever"], exit_code=None)}
    proc = start(launch_args(tmp_path, "--job-name", "vanishing"), env, subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        read_until(proc.stdout, "[worker:0] training forever")
        standin.delete_job("TFJob", "default", "vanishing")
        assert proc.wait(timeout=30) == 1
        assert "TFJob vanishing is gone (deleted?)" in proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()


def test_a_detached_launch_is_listed_logged_and_stop_deletes_its_job(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    """`launch --detach` (issue 23): the follower goes on in a process of its own; `runs` lists the run, `logs`
    prints the replicas' lines, and `stop`, which asks for the stop, deletes the job (a lost terminal would not)."""
    standin, env = kube
    env = {**env, "XDG_STATE_HOME": str(tmp_path / "state")}
    standin.scripts = {"worker:0": PodScript(lines=["epoch 1 loss 0.5"], exit_code=None)}
    result = run_tpuctl(*launch_args(tmp_path, "--job-name", "detached", "--detach"), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip()
    deadline = time.monotonic() + 30
    while "[worker:0] epoch 1 loss 0.5" not in (logs := run_tpuctl("logs", run_id, env=env, timeout=60)).stdout.splitlines():
        assert time.monotonic() < deadline, logs.stdout + logs.stderr
        time.sleep(0.2)
    assert _row(env, run_id)["state"] == "running" and standin.deleted == []
    stop = run_tpuctl("stop", run_id, env=env, timeout=90)
    assert stop.returncode == 0, stop.stderr
    assert f"run {run_id} stopped" in stop.stdout
    assert standin.deleted == [("TFJob", "default", "detached")]
    row = _row(env, run_id)
    assert (row["state"], row["exit_code"], row["backend"], row["job"]) == ("stopped", 130, "kubernetes", "TFJob detached (default)")
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert not [line for line in processes if "logs" in line and "detached" in line]  # no `kubectl logs -f` outlives it


def _row(env: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run as `tpuctl runs --json` lists it."""
    (row,) = [row for row in json.loads(run_tpuctl("runs", "--json", env=env, timeout=60).stdout) if row["run_id"] == run_id]
    return dict(row)


def test_the_standin_validates_like_a_strict_api_server(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    """What makes the tests above meaningful: kubectl's server-side validation does refuse a bad field."""
    standin, env = kube
    dry = run_tpuctl(*launch_args(tmp_path, "--job-name", "typo", "--dry-run"), env=env, timeout=60)
    broken = dry.stdout.replace("restartPolicy:", "restartPolicyy:")
    result = subprocess.run(["kubectl", "apply", "-f", "-"], input=broken, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "restartPolicyy" in result.stderr and "is invalid" in result.stderr
    assert standin.created == []


# ---- Ctrl-C ---------------------------------------------------------------------------------


def start(args: list[str], env: dict[str, str], stdin: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(tpuctl_cmd(*args), env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_without_a_terminal_leaves_the_job_and_says_how_to_delete_it(
    kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path, sig: signal.Signals
) -> None:
    standin, env = kube
    standin.scripts = {"worker:0": PodScript(lines=["training forever"], exit_code=None)}
    proc = start(launch_args(tmp_path, "--job-name", "forever"), env, subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        read_until(proc.stdout, "[worker:0] training forever")
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 130
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
    delete = "kubectl delete tfjobs.kubeflow.org forever -n default"
    assert f"received {sig.name}; TFJob forever (namespace default) keeps running. Delete it with: {delete}" in err
    assert "interrupted; TFJob forever left running (exit 130)" in err
    assert standin.deleted == []
    # No `kubectl logs -f` outlives the launch.
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert not [line for line in processes if "logs" in line and "forever" in line]
    assert ("TFJob", "default", "forever") in standin.jobs


@pytest.mark.parametrize(("answer", "deleted"), [("y", True), ("n", False)])
def test_ctrl_c_on_a_terminal_asks_before_deleting(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path, answer: str, deleted: bool) -> None:
    standin, env = kube
    standin.scripts = {"worker:0": PodScript(lines=["training forever"], exit_code=None)}
    master, slave = pty.openpty()
    proc = start(launch_args(tmp_path, "--job-name", "asked"), env, slave)
    os.close(slave)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        read_until(proc.stdout, "[worker:0] training forever")
        proc.send_signal(signal.SIGINT)
        read_until(proc.stderr, "and its pods? [y/N]")
        os.write(master, f"{answer}\n".encode())
        assert proc.wait(timeout=30) == 130
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    if deleted:
        assert standin.deleted == [("TFJob", "default", "asked")]
        assert "deleted TFJob asked" in err
    else:
        assert standin.deleted == []
        assert "Delete it with: kubectl delete tfjobs.kubeflow.org asked -n default" in err


def test_without_kubectl_the_launch_fails_in_one_line(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    _, env = kube
    env = {**env, "PATH": str(tmp_path / "empty")}
    result = run_tpuctl(*launch_args(tmp_path, "--job-name", "nokubectl"), env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "kubectl not found on PATH" in result.stderr


def test_a_refusal_that_quotes_the_manifest_never_shows_a_secret(kube: tuple[KubeStandin, dict[str, str]], tmp_path: Path) -> None:
    """An admission webhook that quotes what it denies (Gatekeeper does) relays the --env value through kubectl's error:
    tpuctl's words keep the job's secrets out (docs/security.md), the refusal itself stays readable."""
    standin, env = kube
    token, password = "tok-3f9a1c7e2b", "pw-long-enough"

    def deny(obj: dict[str, Any]) -> str | None:
        container = obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        values = {item["name"]: item.get("value") for item in container.get("env", [])}
        return f"[no-plaintext-secrets] API_TOKEN={values.get('API_TOKEN')} args={' '.join(container['command'][-4:])}"

    standin.admission = deny
    for extra in ((), ("--json",)):
        logs = tmp_path / f"logs{len(extra)}"
        args = ["launch", "train.py", "--backend", "kubernetes", "--image", IMAGE, "--log-dir", str(logs), "--job-name", f"secret{len(extra)}"]
        result = run_tpuctl(*args, "--env", f"API_TOKEN={token}", *extra, "--", "--password", password, "--epochs", "3", env=env, timeout=60)
        assert result.returncode == 1, result.stderr
        written = (logs / "outcome.json").read_text() if (logs / "outcome.json").exists() else ""
        shown = result.stdout + result.stderr + written
        assert "denied the request: [no-plaintext-secrets] API_TOKEN=" in result.stderr and "--epochs 3" in result.stderr, result.stderr  # readable
        assert token not in shown and password not in shown, shown
        assert "<hidden: 14 characters>" in result.stderr
    assert standin.created == []
