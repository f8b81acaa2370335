"""A JAX run's replicas on Vertex AI, rehearsed here with real JAX: Vertex starts `python -m tpuctl.runtime SCRIPT` in
each with the env tpuctl's job body gave its pool (tpuctl/backends/vertex/job_body.py) and what Vertex adds itself
(CLUSTER_SPEC with worker-pool names, TF_CONFIG for TensorFlow). The runtime turns CLUSTER_SPEC into the
KERAS_DISTRIBUTION_* variables (tpuctl/runtime/vertex_jax.py), so a plain `jax.distributed.initialize()` finds the
other replica with no argument: both processes join and one cross-process collective sees both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, SCRIPTS, free_ports
from tpuctl.backends.vertex.job_body import VertexSpec, custom_job
from tpuctl.launch.job import Job
from tpuctl.tpu.accelerators import VertexMachine

LIMIT_S = 120.0  # two JAX imports on a busy 2-core machine
POOLS = (("workerpool0", "chief"), ("workerpool1", "worker"))


@dataclass(frozen=True)
class Replicas:
    codes: dict[str, int]
    logs: dict[str, str]

    def shown(self) -> str:
        return "\n".join(f"--- {pool} (exit {self.codes[pool]}) ---\n{log}" for pool, log in self.logs.items())


def _pool_env(body: dict[str, Any], index: int) -> dict[str, str]:
    return {e["name"]: e["value"] for e in body["jobSpec"]["workerPoolSpecs"][index]["containerSpec"]["env"]}


def run_replicas(script: Path, tmp_path: Path) -> Replicas:
    """Both replicas of a 2-process JAX job, each with its pool's env from the body tpuctl submits, and Vertex's own."""
    job = Job(script=str(script), python=sys.executable, framework="jax", workers=2)
    spec = VertexSpec("vertex-jax", "img", VertexMachine("n1-standard-4", "", None, None), False, None, None, "vertex-jax")
    body = custom_job(job, spec)
    pools = {pool: [f"127.0.0.1:{port}"] for (pool, _), port in zip(POOLS, free_ports(2), strict=True)}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TPUCTL_", "KERAS_", "JAX_")) and k not in ("TF_CONFIG", "CLUSTER_SPEC")}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for index, (pool, role) in enumerate(POOLS):
            vertex = {
                "CLUSTER_SPEC": json.dumps({"cluster": pools, "environment": "cloud", "task": {"type": pool, "index": 0, "trial": ""}, "job": body["jobSpec"]}),
                # Vertex's TF_CONFIG too: a JAX run reads none of it.
                "TF_CONFIG": json.dumps({"cluster": {r: pools[p] for p, r in POOLS}, "environment": "cloud", "task": {"type": role, "index": 0}}),
                "CLOUD_ML_JOB_ID": "1234567890",
            }
            with (tmp_path / f"{pool}.log").open("wb") as sink:  # files, not pipes: neither replica can block on output
                procs[pool] = subprocess.Popen(
                    [sys.executable, "-m", "tpuctl.runtime", str(script)],
                    env={**base, **_pool_env(body, index), **vertex},
                    cwd=tmp_path,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        codes = {pool: proc.wait(timeout=LIMIT_S) for pool, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    return Replicas(codes, {pool: (tmp_path / f"{pool}.log").read_text(errors="replace") for pool in procs})


@pytest.fixture(scope="module")
def gathered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    yield run_replicas(SCRIPTS / "vertex_jax_gather.py", tmp_path_factory.mktemp("vertex-jax"))


def test_both_replicas_join_one_jax_cluster_from_cluster_spec(gathered: Replicas) -> None:
    assert gathered.codes == {"workerpool0": 0, "workerpool1": 0}, gathered.shown()
    for process, pool in enumerate(("workerpool0", "workerpool1")):
        # workerpool0's replica is process 0, workerpool1's process 1; the collective saw both.
        assert f"process {process} of 2: gathered [0, 1]" in gathered.logs[pool], gathered.shown()


def test_a_replica_that_never_joins_fails_naming_its_place(tmp_path: Path) -> None:
    """A script that never calls initialize() trains alone in each replica: that is a failure, named from CLUSTER_SPEC."""
    alone = tmp_path / "alone.py"
    alone.write_text('print("training alone")\n')
    replicas = run_replicas(alone, tmp_path)
    assert replicas.codes == {"workerpool0": 1, "workerpool1": 1}, replicas.shown()
    assert "process 1 of 2 ended without joining the others" in replicas.logs["workerpool1"], replicas.shown()
