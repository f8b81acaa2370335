"""A Vertex AI CustomJob's two replicas, rehearsed on this machine with real TensorFlow.

Vertex starts each replica's container command itself, with no `tpuctl launch`
around it: `python -m tpuctl.runtime SCRIPT`, the TPUCTL_* variables the vertex
backend puts in the job's env, and what Vertex adds: CLUSTER_SPEC (worker pools),
TF_CONFIG (TensorFlow roles, `environment: cloud`, the job spec under `job`) and
the AIP_* directories. Pool 0 holds the primary replica (chief), pool 1 one worker.
Both must train in sync under MultiWorkerMirroredStrategy and exit 0, the chief
finding its place from CLUSTER_SPEC alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, SCRIPTS, free_ports
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import Task, parse_tf_config
from tpuctl.launch.job import Job, worker_env
from tpuctl.runtime.vertex_env import parse_cluster_spec

pytestmark = pytest.mark.tf

LIMIT_S = 240.0  # two TensorFlow imports and a short fit on a busy 2-core machine


def _vertex_env(pools: dict[str, list[str]], pool: str, role: str, base: Path, job: Mapping[str, object]) -> dict[str, str]:
    """The variables Vertex AI sets in one replica, beside the ones the job spec asked for."""
    tf_roles = {"workerpool0": "chief", "workerpool1": "worker"}
    cluster_spec = {"cluster": pools, "environment": "cloud", "task": {"type": pool, "index": 0, "trial": ""}, "job": job}
    tf_config = {
        "cluster": {tf_roles[name]: addresses for name, addresses in pools.items()},
        "environment": "cloud",
        "task": {"type": role, "index": 0, "trial": ""},
        "job": job,
    }
    return {
        "CLUSTER_SPEC": json.dumps(cluster_spec),
        "TF_CONFIG": json.dumps(tf_config),
        "AIP_MODEL_DIR": str(base / "model") + "/",
        "AIP_CHECKPOINT_DIR": str(base / "checkpoints") + "/",
        "AIP_TENSORBOARD_LOG_DIR": str(base / "logs") + "/",
        "CLOUD_ML_JOB_ID": "1234567890",
    }


def test_two_vertex_replicas_train_in_sync(tmp_path: Path) -> None:
    chief_port, worker_port = free_ports(2)
    pools = {"workerpool0": [f"127.0.0.1:{chief_port}"], "workerpool1": [f"127.0.0.1:{worker_port}"]}
    # What the vertex backend writes into every pool's env (tpuctl/backends/vertex/job_body.py).
    job_env = {
        **worker_env(Job(script="train.py")),
        contract.RUN_ID: "vertex-rehearsal",
        contract.MODEL_DIR: str(tmp_path / "model"),
        "PYTHONUNBUFFERED": "1",
    }
    job: dict[str, object] = {
        "workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": {"imageUri": "img", "env": []}},
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": {"imageUri": "img", "env": []}},
        ],
        "baseOutputDirectory": {"outputUriPrefix": str(tmp_path / "out")},
    }
    script = SCRIPTS / "single_device_keras.py"  # unmodified single-device Keras: the runtime distributes it
    base = {k: v for k, v in os.environ.items() if not k.startswith("TPUCTL_") and k not in ("TF_CONFIG", "CLUSTER_SPEC")}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    procs: dict[str, subprocess.Popen[bytes]] = {}
    out: dict[str, Path] = {}
    try:
        for pool, role in (("workerpool0", "chief"), ("workerpool1", "worker")):
            env = {**base, **job_env, **_vertex_env(pools, pool, role, tmp_path / "out", job)}
            # What tpuctl will conclude from either variable: the same task.
            assert parse_tf_config(env["TF_CONFIG"]) == parse_cluster_spec(env["CLUSTER_SPEC"])
            assert parse_tf_config(env["TF_CONFIG"])[1] == Task(role, 0)
            if role == "chief":
                # One replica on each path: the chief has CLUSTER_SPEC alone (the runtime writes its TF_CONFIG),
                # the worker Vertex's TF_CONFIG too; a cluster that forms proves both readings agree.
                del env["TF_CONFIG"]
            out[role] = tmp_path / role
            out[role].mkdir()
            env["WEIGHTS_OUT"] = str(out[role])
            with (tmp_path / f"{role}.log").open("wb") as sink:  # files, not pipes: neither replica can block on output
                procs[role] = subprocess.Popen(
                    [sys.executable, "-m", "tpuctl.runtime", str(script)],
                    env=env,
                    cwd=tmp_path,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        deadline = time.monotonic() + LIMIT_S
        for proc in procs.values():
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs.values():
            if proc.poll() is None:  # SIGTERM does not stop a MultiWorkerMirrored worker (FIELD-NOTES)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    logs = {role: (tmp_path / f"{role}.log").read_text(errors="replace") for role in procs}
    shown = "\n".join(f"--- {role} ---\n{log}" for role, log in logs.items())
    assert procs["chief"].returncode == 0 and procs["worker"].returncode == 0, shown
    for role, log in logs.items():
        assert f"tpuctl: {role}:0: MultiWorkerMirroredStrategy, 2 replica(s) in sync" in log, shown
        assert "replicas in sync: 2" in log, shown
    assert "tf.keras is tf-keras here" in logs["chief"] and "tf.keras is tf-keras here" not in logs["worker"], shown
    chief_weights, worker_weights = np.load(out["chief"] / "0.npy"), np.load(out["worker"] / "0.npy")
    assert np.allclose(chief_weights, worker_weights), "the replicas' weights differ: they did not train in sync"
