"""A launch as a Vertex AI CustomJob body: pure data, what `--dry-run --json` prints and a run POSTs.

Vertex's worker pools map onto TensorFlow's roles (pool 0 the chief, 1 the
workers, 2 the parameter servers; tpuctl/runtime/vertex_env.py reads them back
inside the job). Every replica runs tpuctl's runtime, so the strategy is built
as in every other backend: from a staged bundle of the script's folder on an
image with TensorFlow (pythonPackageSpec), or from an image that already holds
the script (containerSpec).

A JAX run (Keras 3 on JAX, or plain JAX) has the same pools (pool 0 process 0,
pool 1 the others) and no strategy: its env carries TPUCTL_FRAMEWORK=jax and
KERAS_BACKEND=jax (unless --env sets it), and each replica's runtime turns
Vertex's CLUSTER_SPEC into the KERAS_DISTRIBUTION_* variables
(tpuctl/runtime/vertex_jax.py) instead of reading TF_CONFIG.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from tpuctl.cloud.vertex.vertex_api import RUN_LABEL
from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.launch.job import Job, worker_env
from tpuctl.tpu.accelerators import VertexMachine

# What the staged bundle's entry module is called inside the job (tpuctl/runtime/bundle.py).
BUNDLE_MODULE = "tpuctl.runtime.bundle"
# Parameter servers hold variables, not accelerators: a plain CPU machine each.
PS_MACHINE = "n1-standard-4"
_LABEL = re.compile(r"[^a-z0-9_-]")
# TensorFlow's strategy settings, which a JAX worker never reads (the launch plan leaves them out too).
_TENSORFLOW_ONLY = (contract.STRATEGY, contract.SCOPE, contract.KERAS)


@dataclass(frozen=True)
class VertexSpec:
    """What the body needs beside the Job."""

    display_name: str
    image: str
    machine: VertexMachine
    tpu: bool  # the machine is a TPU: one replica drives the slice under TPUStrategy
    package_uri: str | None  # gs:// of the staged bundle; None: the image holds the script
    service_account: str | None
    run_id: str


def _machine_spec(machine: VertexMachine) -> dict[str, Any]:
    spec: dict[str, Any] = {"machineType": machine.machine_type}
    if machine.accelerator_type:
        spec["acceleratorType"] = machine.accelerator_type
    if machine.accelerator_count:
        spec["acceleratorCount"] = machine.accelerator_count
    if machine.tpu_topology:
        spec["tpuTopology"] = machine.tpu_topology
    return spec


def _environment(job: Job, spec: VertexSpec) -> list[dict[str, str]]:
    jax = job.framework == contract.JAX
    strategy = "tpu" if spec.tpu and job.strategy == "auto" and not jax else job.strategy
    options = worker_env(replace(job, strategy=strategy, simulate_devices=0, rehearse=None))
    values = {
        **({jax_cluster.BACKEND: contract.JAX} if jax else {}),  # the user's --env, and the script's own assignment, still win
        **dict(job.env),
        **{name: value for name, value in options.items() if not (jax and name in _TENSORFLOW_ONLY)},
        contract.RUN_ID: spec.run_id,
        "PYTHONUNBUFFERED": "1",
    }
    if job.model_dir:
        values[contract.MODEL_DIR] = job.model_dir
    return [{"name": name, "value": value} for name, value in values.items()]


def _code(job: Job, spec: VertexSpec) -> dict[str, Any]:
    args = [job.script, *job.args]
    env = _environment(job, spec)
    if spec.package_uri is not None:
        return {
            "pythonPackageSpec": {
                "executorImageUri": spec.image,
                "packageUris": [spec.package_uri],
                "pythonModule": BUNDLE_MODULE,
                "args": args,
                "env": env,
            }
        }
    return {"containerSpec": {"imageUri": spec.image, "command": [job.python, "-m", "tpuctl.runtime"], "args": args, "env": env}}


def _pool(machine: dict[str, Any], replicas: int, code: dict[str, Any]) -> dict[str, Any]:
    # replicaCount is an int64, which proto3 JSON writes as a string.
    return {"machineSpec": machine, "replicaCount": str(replicas), **code}


def label(text: str) -> str:
    """A label value as Google allows one: lowercase letters, digits, _ and -, at most 63."""
    return _LABEL.sub("-", text.lower())[:63]


def custom_job(job: Job, spec: VertexSpec) -> dict[str, Any]:
    """The CustomJob body (vertex-ai/docs/reference/rest/v1/projects.locations.customJobs#CustomJob)."""
    code = _code(job, spec)
    machine = _machine_spec(spec.machine)
    if job.parameter_server:
        pools = [_pool(machine, 1, code), _pool(machine, job.workers, code), _pool({"machineType": PS_MACHINE}, job.ps, code)]
    elif job.workers > 1:
        pools = [_pool(machine, 1, code), _pool(machine, job.workers - 1, code)]
    else:
        pools = [_pool(machine, 1, code)]
    job_spec: dict[str, Any] = {"workerPoolSpecs": pools}
    if spec.service_account:
        job_spec["serviceAccount"] = spec.service_account
    if job.model_dir:
        job_spec["baseOutputDirectory"] = {"outputUriPrefix": job.model_dir}
    return {"displayName": spec.display_name, "labels": {RUN_LABEL: label(spec.run_id)}, "jobSpec": job_spec}
