"""Real TensorFlow, two real worker processes on CPU. Few and meaningful: each costs seconds."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, SCRIPTS, run_tpuctl, tpuctl_cmd

pytestmark = pytest.mark.tf


def test_unmodified_single_device_script_trains_in_sync_on_two_workers(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "single_device_keras.py"), "--workers", "2", "--log-dir", str(tmp_path / "logs"),
        env={**os.environ, "WEIGHTS_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker:0] replicas in sync: 2" in result.stdout
    assert "[worker:1] replicas in sync: 2" in result.stdout
    # said once, by the chief only
    assert result.stdout.count("tf.keras is tf-keras here") == 1
    w0, w1 = np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy")
    np.testing.assert_array_equal(w0, w1)
    # and training moved the weights: a run without the strategy would not agree by accident
    assert np.abs(w0).sum() > 0


def test_one_worker_runs_under_the_default_strategy(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "single_device_keras.py"), "--log-dir", str(tmp_path / "logs"),
        env={**os.environ, "WEIGHTS_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker:0] tpuctl: worker:0: default strategy, 1 replica(s) in sync, devices: /device:CPU:0" in result.stdout
    assert "[worker:0] replicas in sync: 1" in result.stdout
    assert "tf-keras" not in result.stdout  # one worker: Keras 3 fit works, nothing to switch


def test_script_that_builds_its_own_strategy_runs_under_default_options(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "own_strategy.py"), "--workers", "2", "--log-dir", str(tmp_path / "logs"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # tpuctl.runtime.strategy() hands the explicit caller the very same strategy
    assert "[worker:0] task 0: own strategy replicas 2, shared True" in result.stdout
    assert "[worker:1] task 1: own strategy replicas 2, shared True" in result.stdout
    assert "Mixing different" not in result.stdout
    # tpuctl built none: the script's construction ran, with its CommunicationOptions
    assert "[worker:0] tpuctl: worker:0: the script constructs MultiWorkerMirroredStrategy(...) on line 15" in result.stdout
    assert "[worker:0] task 0: collectives RING, timeout 120.0" in result.stdout
    assert "[worker:1] task 1: collectives RING, timeout 120.0" in result.stdout


def test_restart_resumes_the_example_from_its_last_epoch(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    result = run_tpuctl(
        "launch", str(ROOT / "examples" / "train_keras.py"), "--workers", "2", "--model-dir", str(model_dir),
        "--max-restarts", "1", "--log-dir", str(tmp_path / "logs"), "--json", "--tail",
        "--", "--epochs", "3", "--examples", "1024", "--simulate-preemption", "2",
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    # --tail: the summaries and checkpoints appear beside the logs, each once, across both attempts
    tail = [line for line in result.stderr.splitlines() if line.startswith("[tail] ")]
    losses = [line.split()[1:4] for line in tail if " epoch_loss " in line]
    steps = [int(step.removeprefix("step=")) for _, _, step in losses]
    # Each step once, in order. The crashed attempt may die before flushing its last epoch's summary.
    assert {run for run, _, _ in losses} == {"logs/train"} and steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 2
    assert [line.split()[2] for line in tail if line.startswith("[tail] keras ")] == [
        "checkpoints/epoch-01.weights.h5", "checkpoints/epoch-02.weights.h5", "checkpoints/epoch-03.weights.h5",
    ]
    assert "tpuctl: last checkpoint: checkpoints/epoch-03.weights.h5 (step 3)" in result.stderr
    assert any(line.startswith("tpuctl: logs/train/epoch_loss: ") and line.endswith(" at step 2") for line in result.stderr.splitlines())
    assert outcome["attempts"] == 2
    first = (tmp_path / "logs" / "attempt-1" / "worker-0.log").read_text()
    second = (tmp_path / "logs" / "attempt-2" / "worker-0.log").read_text()
    assert "Epoch 2/3" in first
    # BackupAndRestore brought attempt 2 back at epoch 3, not epoch 1
    assert "Epoch 1/3" not in second and "Epoch 3/3" in second
    assert "trained epochs 3-3 of 3" in second
    assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == [
        "epoch-01.weights.h5", "epoch-02.weights.h5", "epoch-03.weights.h5",
    ]
    assert list((model_dir / "logs" / "train").glob("events.out.tfevents.*"))


def test_multi_worker_without_tf_keras_fails_before_training(tmp_path: Path) -> None:
    # A real interpreter from another environment, one that has no tf-keras, and at first no TensorFlow either.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)

    def launch(log_dir: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_tpuctl(
            "launch", str(SCRIPTS / "single_device_keras.py"), "--workers", "2", "--python", str(bare / "bin" / "python"),
            "--log-dir", str(tmp_path / log_dir), *extra,
        )

    # The preflight finds it before any worker starts, and names doctor; without it, each worker says it.
    result = launch("logs-no-tf")
    assert result.returncode == 1
    assert f"no TensorFlow for the workers' interpreter {bare / 'bin' / 'python'}" in result.stdout + result.stderr
    assert f"tpuctl doctor --python {bare / 'bin' / 'python'}" in result.stdout + result.stderr
    result = launch("logs-no-tf-unchecked", "--no-preflight")
    assert result.returncode == 2
    assert f"tpuctl: error: TensorFlow is not installed for {bare / 'bin' / 'python'}" in result.stdout
    # A stand-in TensorFlow, known by its metadata alone (the runtime never imports it before choosing Keras).
    site = next((bare / "lib").glob("python3*")) / "site-packages"
    (site / "tensorflow").mkdir()
    (site / "tensorflow" / "__init__.py").write_text(
        "import os, sys\nsys.exit(f'stand-in TensorFlow imported, TF_USE_LEGACY_KERAS={os.environ.get(\"TF_USE_LEGACY_KERAS\")}')\n"
    )
    (site / "tensorflow-2.21.0.dist-info").mkdir()
    result = launch("logs-stand-in-tf")
    assert result.returncode == 2
    assert "tf-keras is not installed, and Keras 3 (tf.keras in TensorFlow 2.21)" in result.stdout
    assert "pip install tf-keras==2.21.*" in result.stdout
    # TensorFlow 2.15: tf.keras is Keras 2, so no tf-keras is needed and none is asked for.
    (site / "tensorflow-2.21.0.dist-info").rename(site / "tensorflow_cpu-2.15.1.dist-info")
    result = launch("logs-tf215")
    assert "tf-keras" not in result.stdout
    assert "stand-in TensorFlow imported, TF_USE_LEGACY_KERAS=None" in result.stdout


def test_a_peer_frozen_by_sigstop_is_named_as_stopped_not_as_holding_the_cause(tmp_path: Path) -> None:
    """Its log is empty after the freeze: the cause says what tpuctl sees (process state T), TF's heartbeats aside."""
    pids = tmp_path / "pids"
    pids.mkdir()
    launch = subprocess.Popen(
        [*tpuctl_cmd("launch", str(SCRIPTS / "mw_steps_pid.py"), "--workers", "2", "--log-dir", str(tmp_path / "logs"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PID_DIR": str(pids)},
    )
    frozen: int | None = None
    try:
        assert launch.stdout is not None
        for line in launch.stdout:
            if line.startswith("[worker:1] step 3"):
                frozen = int((pids / "1").read_text())
                os.kill(frozen, signal.SIGSTOP)
                break
        out, err = launch.communicate(timeout=120)
    finally:
        if launch.poll() is None:
            launch.kill()
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
    assert frozen is not None and launch.returncode != 0, err
    assert "tpuctl: cause: peer lost: worker:1 is stopped (process state T: SIGSTOP or Ctrl-Z)" in err, err
    assert "holds the root cause" not in err
