"""Scripts that build their own strategy, with real TensorFlow on CPU: tpuctl builds none, the script's
construction (arguments and all) is what runs, start-up is still under --start-timeout, and TPU
connections the script makes itself get tpuctl's deadline (tpuctl/runtime/deferred.py, tpu_connect.py)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf


def test_parameter_server_tutorial_keeps_its_variable_partitioner(tmp_path: Path) -> None:
    # Two parameter servers are the point (two shards, one on each); one worker is enough to train on them.
    result = run_tpuctl(
        "launch", str(SCRIPTS / "ps_partitioned.py"), "--strategy", "parameter-server", "--workers", "1", "--ps", "2",
        "--log-dir", str(tmp_path / "logs"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[chief:0] tpuctl: chief:0: the script constructs ParameterServerStrategy(...) on line 13: tpuctl builds no strategy" in result.stdout
    assert "[chief:0] tpuctl: chief:0: ParameterServerStrategy, 1 replica(s) in sync" in result.stdout
    assert re.search(r"\[chief:0\] embedding shards 2 on \['/job:ps/replica:0/task:0/device:CPU:0', '/job:ps/replica:0/task:1/device:CPU:0'\]", result.stdout)
    # the chief of a parameter-server run is told about its own strategy, not MultiWorkerMirrored
    assert "the script builds a ParameterServerStrategy, whose model.fit and legacy optimizers Keras 3 does not support" in result.stdout
    assert "MultiWorkerMirroredStrategy" not in result.stdout
    assert "launching 1 worker(s)" in result.stderr and "1 worker(s), a chief and 2 ps finished" in result.stderr


def test_a_forced_prebuilt_strategy_says_that_it_drops_the_scripts_arguments(tmp_path: Path) -> None:
    """--strategy-builder tpuctl: today's sharing, named with public class names, and the way out."""
    result = run_tpuctl(
        "launch", str(SCRIPTS / "own_strategy.py"), "--strategy", "multi-worker-mirrored", "--strategy-builder", "tpuctl",
        "--log-dir", str(tmp_path / "logs"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "[worker:0] tpuctl: the script's MultiWorkerMirroredStrategy(...) is tpuctl's MultiWorkerMirroredStrategy "
        "(its arguments are ignored; --strategy-builder script runs the script's own construction)"
    ) in result.stdout
    assert "[worker:0] task 0: collectives AUTO, timeout None" in result.stdout
    assert "CollectiveAllReduceStrategy" not in result.stdout


def test_start_up_lasts_until_the_scripts_strategy_is_built(tmp_path: Path) -> None:
    late = run_tpuctl(
        "launch", str(SCRIPTS / "late_strategy.py"), "--strategy", "multi-worker-mirrored", "--start-timeout", "3",
        "--log-dir", str(tmp_path / "late"), "--", "30",
    )
    assert late.returncode != 0
    assert "did not start within 3s (--start-timeout)" in late.stderr
    # graph mode with no strategy to build: ready at once, however long the script then takes
    graph = run_tpuctl(
        "launch", str(SCRIPTS / "graph_mode_wait.py"), "--start-timeout", "3", "--log-dir", str(tmp_path / "graph"), "--", "6",
    )
    assert graph.returncode == 0, graph.stdout + graph.stderr
    assert "[worker:0] tpuctl: worker:0: the script calls disable_eager_execution() on line 8: tpuctl builds no strategy" in graph.stdout
    assert "[worker:0] graph mode: True" in graph.stdout


def test_a_scripts_own_tpu_connection_fails_within_the_deadline(tmp_path: Path, silent_port: int) -> None:
    timeout = 4.0
    started = time.monotonic()
    result = run_tpuctl(
        "launch", str(SCRIPTS / "own_tpu_connect.py"), "--tpu-timeout", str(timeout), "--log-dir", str(tmp_path / "logs"),
        "--", f"grpc://127.0.0.1:{silent_port}", env={**os.environ, "TPU_NAME": ""},
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if "tpuctl: error:" in line]
    assert len(errors) == 1, result.stdout
    assert f"no TPU answered at 'grpc://127.0.0.1:{silent_port}' within 4s" in errors[0]
    assert "the script's experimental_connect_to_cluster hung" in errors[0]
    assert "Traceback" not in result.stdout
    # TensorFlow's import comes on top of the deadline: a few seconds on 2 cores, 25 s beside two other test suites;
    # the error line above says the deadline fired, and a hang would run into run_tpuctl's 300 s.
    assert elapsed < timeout + 60, f"{elapsed:.1f}s"


def test_a_script_with_its_own_in_process_parameter_server_cluster_gets_tf_keras(tmp_path: Path) -> None:
    """TensorFlow's parameter-server tutorial in one process: its own ParameterServerStrategy on its own servers,
    fit and a ClusterCoordinator loop with tf.keras.optimizers.legacy. One worker, default options: tpuctl saw the
    strategy, and Keras 3 refused the legacy optimizers ("keras.optimizers.legacy is not supported")."""
    result = run_tpuctl("launch", str(SCRIPTS / "ps_in_process_keras.py"), "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "[worker:0] tpuctl: tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1): the script builds a ParameterServerStrategy, "
        "whose model.fit and legacy optimizers Keras 3 does not support (the script constructs ParameterServerStrategy(...) on line 42)"
    ) in result.stdout
    assert "[worker:0] fit done" in result.stdout
    assert re.search(r"\[worker:0\] Finished epoch 1, accuracy is [0-9.]+\.", result.stdout)
    assert re.search(r"\[worker:0\] Final loss is [0-9.]+", result.stdout)
