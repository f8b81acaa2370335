"""Keras 3 on JAX and plain JAX launched as N processes, with real JAX on CPU (its cross-process CPU collectives):
locally and over two sshd hosts (tests/integration/sshd.py). The runs that several tests only read are made once."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SCRIPTS, run_tpuctl
from tests.integration.sshd import SshCluster

JAX_SCRIPTS = SCRIPTS / "jax"
FIT = JAX_SCRIPTS / "data_parallel_fit.py"
_LOSS = re.compile(r"process (\d) of (\d): backend (\w+), loaded first \[(.*)\], loss ([0-9.]+)")


class Run:
    def __init__(self, result: subprocess.CompletedProcess[str], weights: Path, logs: Path) -> None:
        self.result, self.weights, self.logs = result, weights, logs

    @property
    def output(self) -> str:
        return self.result.stdout + self.result.stderr

    def saved(self, process: int) -> list[np.ndarray]:
        with np.load(self.weights / f"{process}.npz") as data:
            return [data[f"arr_{i}"] for i in range(len(data.files) - 1)] + [data["loss"]]

    def said(self) -> list[tuple[str, ...]]:
        return sorted(_LOSS.findall(self.output))


def _fit(folder: Path, *args: str, **kwargs: object) -> Run:
    weights, logs = folder / "weights", folder / "logs"
    weights.mkdir(parents=True)
    result = run_tpuctl("launch", str(FIT), "--env", f"WEIGHTS_OUT={weights}", "--log-dir", str(logs), *args, timeout=240, **kwargs)  # type: ignore[arg-type]
    return Run(result, weights, logs)


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _fit(tmp_path_factory.mktemp("one"), "--workers", "1")


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _fit(tmp_path_factory.mktemp("two"), "--workers", "2")


def test_two_local_processes_train_one_model_on_the_batches_one_process_would(one: Run, two: Run) -> None:
    """DataParallel over 2 processes, each feeding half of every global batch: identical weights in both, and the loss
    and weights of one process trained on the same global batches. Nothing imported TensorFlow, Keras or JAX before the
    script, which chose JAX itself."""
    assert one.result.returncode == 0, one.output
    assert two.result.returncode == 0, two.output
    assert [said[:4] for said in two.said()] == [("0", "2", "jax", ""), ("1", "2", "jax", "")]
    first, second, alone = two.saved(0), two.saved(1), one.saved(0)
    for a, b, c in zip(first, second, alone, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    assert float(first[-1]) > 0
    plan = json.loads((two.logs / "attempt-1" / "plan.json").read_text())
    assert (plan["framework"], plan["tf_config"]) == ("jax", False)
    assert "sets KERAS_BACKEND" in plan["framework_found"]
    envs = [worker["env"] for worker in plan["workers"]]
    coordinator = envs[0]["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")[0]
    assert coordinator.startswith("127.0.0.1:")
    for index, env in enumerate(envs):
        assert env["KERAS_DISTRIBUTION_PROCESS_ID"] == str(index) and env["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "2"
        assert env["JAX_COORDINATOR_ADDRESS"] == env["JAX_COORDINATOR_BIND_ADDRESS"] == coordinator  # loopback only
        assert "TF_CONFIG" not in env


def test_two_sshd_hosts_train_one_model(cluster: SshCluster, two: Run, tmp_path: Path) -> None:
    run = _fit(tmp_path, "--ssh-config", str(cluster.config), "--hosts", "host1,host2")
    assert run.result.returncode == 0, run.output
    assert "[worker:0@host1] process 0 of 2: backend jax" in run.output
    assert "[worker:1@host2] process 1 of 2: backend jax" in run.output
    for a, b, local in zip(run.saved(0), run.saved(1), two.saved(0), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, local, rtol=1e-5, atol=1e-6)
    plan = json.loads((tmp_path / "logs" / "attempt-1" / "plan.json").read_text())
    addresses = plan["workers"][0]["env"]["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")
    assert [w["host"] for w in plan["workers"]] == ["host1", "host2"] and len(set(addresses)) == 2  # each host's agent's port


def test_a_plain_jax_script_finds_its_peers_with_no_argument(tmp_path: Path) -> None:
    """`jax.distributed.initialize()` alone (JAX reads only the coordinator's address from the environment; the process
    count and id come from the cluster tpuctl's runtime adds), 2 CPU devices a process, a shard_map'd psum."""
    script = JAX_SCRIPTS / "plain_shard_map.py"
    result = run_tpuctl("launch", str(script), "--workers", "2", "--simulate-devices", "2", "--log-dir", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for process in (0, 1):  # rows 0..3 and 100..103, summed over 4 devices in 2 processes
        assert f"[worker:{process}] process {process} of 2: 4 devices, total 412" in result.stdout


def test_processes_that_each_trained_alone_are_a_failure(tmp_path: Path) -> None:
    script = tmp_path / "alone.py"
    script.write_text(FIT.read_text().replace("keras.distribution.initialize()\n", ""))
    result = run_tpuctl("launch", str(script), "--workers", "2", "--log-dir", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "process 0 of 1: backend jax" in result.stdout  # it did train, alone
    assert "ended without joining the others: the script never called keras.distribution.initialize()" in result.stderr
    assert "finished" not in result.stderr


def test_a_process_that_never_reaches_initialize_is_named_instead_of_hanging_the_others(tmp_path: Path) -> None:
    script = tmp_path / "late.py"
    script.write_text(
        "import os, time\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n"
        "if os.environ['KERAS_DISTRIBUTION_PROCESS_ID'] == '1':\n    time.sleep(600)\n"
        "keras.distribution.initialize()\n"
    )
    began = time.monotonic()
    result = run_tpuctl("launch", str(script), "--workers", "2", "--start-timeout", "4", "--log-dir", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "worker:1 on localhost did not reach jax.distributed.initialize() within 4s of the others" in result.stderr
    assert "cause: never joined: worker:1 on localhost" in result.stderr
    assert time.monotonic() - began < 60  # JAX's own wait is 300 s


def test_a_restart_resumes_from_keras_backup_under_jax(tmp_path: Path, two: Run) -> None:
    """Attempt 1 fails after epoch 2 (BackupAndRestore saved it); attempt 2 starts at epoch 2 (0-based) and ends
    where an uninterrupted run ends."""
    run = _fit(tmp_path, "--workers", "2", "--model-dir", str(tmp_path / "model"), "--max-restarts", "1", "--env", "CRASH_AT_EPOCH=2")
    assert run.result.returncode == 0, run.output
    assert "restarting all workers (attempt 2/2)" in run.result.stderr
    attempt_2 = (run.logs / "attempt-2" / "worker-0.log").read_text()
    assert "process 0: first epoch 2" in attempt_2
    np.testing.assert_allclose(run.saved(0)[-1], two.saved(0)[-1], rtol=1e-5)


def test_a_process_that_fails_beside_one_in_a_collective_ends_the_run_at_once(tmp_path: Path) -> None:
    """Python's exit would wait at JAX's shutdown barrier (up to 300 s) for the peer blocked in the collective; the
    failed process ends at once, and the launch names its own error, not a SIGABRT from JAX's shutdown."""
    script = tmp_path / "fails.py"
    script.write_text(
        "import time\nimport jax, jax.numpy as jnp, numpy as np\nfrom jax.sharding import Mesh, NamedSharding, PartitionSpec\n"
        "jax.distributed.initialize()\nmesh = Mesh(np.array(jax.devices()), ('d',))\n"
        "if jax.process_index() == 1:\n    time.sleep(1)\n    raise RuntimeError('process 1 fails')\n"
        "rows = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec('d')), np.ones(2, np.float32))\n"
        "print(float(jax.jit(jnp.sum)(rows)))\n"
    )
    began = time.monotonic()
    result = run_tpuctl("launch", str(script), "--workers", "2", "--log-dir", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cause: uncaught Python exception: RuntimeError: process 1 fails" in result.stderr
    assert time.monotonic() - began < 25, result.stderr  # about 5 s; Python's own exit took 35 s to 300 s here
