"""Scripts written for older TensorFlow, unchanged, on workers running TensorFlow 2.15 (`--python .venv-tf215/bin/python`).

TF 2.15 is the oldest TensorFlow tpuctl's workers are tested with, and the last with Estimator and
TPUEstimator; there `tf.keras` is Keras 2, so no tf-keras is needed. The environment comes from
`make compat-env` (see tests/integration/compat_env.py); without it these tests skip, saying how to build it.
Each test is one real launch and checks what the script itself printed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SCRIPTS, run_tpuctl
from tests.integration.compat_env import WorkerEnv, outcome, reports, tf215_env, trained_in_sync

pytestmark = pytest.mark.tf

COMPAT = SCRIPTS / "compat"
TIMEOUT = 240  # TF 2.15 imports slower than 2.21; a hang must not cost the default 300 s


@pytest.fixture(scope="module")
def tf215() -> WorkerEnv:
    """TensorFlow 2.15 + tensorflow-estimator for the workers, or a skip saying why and how to build it."""
    return tf215_env()


def launch(env: WorkerEnv, script: Path, tmp_path: Path, *options: str, extra_env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_tpuctl(
        "launch", str(script), "--python", str(env.python), "--log-dir", str(tmp_path / "logs"), "--start-timeout", "120", *options,
        timeout=TIMEOUT, env={**os.environ, **(extra_env or {})},
    )


def latest_checkpoint(folder: Path) -> str:
    """The checkpoint a `checkpoint` state file names, read without TensorFlow."""
    for line in (folder / "checkpoint").read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError(f"no model_checkpoint_path in {folder / 'checkpoint'}")


def test_multi_worker_estimator_tutorial_trains_in_sync_on_two_workers(tmp_path: Path, tf215: WorkerEnv) -> None:
    # disable_eager_execution() first, its own MultiWorkerMirroredStrategy, RunConfig(train_distribute=...),
    # train_and_evaluate: nothing tpuctl builds may get there first.
    model_dir = tmp_path / "model"
    result = launch(tf215, COMPAT / "estimator_mwms.py", tmp_path, "--workers", "2", "--model-dir", str(model_dir))
    assert result.returncode == 0, outcome(result)
    seen = reports(result.stdout, "estimator_mwms")
    assert set(seen) == {"worker:0", "worker:1"}, outcome(result)
    for tag, record in seen.items():
        assert record["tf"] == tf215.tf_version
        assert record["graph_mode"] is True and record["eager"] is False, record
        assert record["replicas_in_sync"] == 2, record
        assert record["model_dir"] == str(model_dir), record  # tpuctl's --model-dir reached the script
        assert record["is_chief"] is (tag == "worker:0"), record
    # trained in step: the same number of synchronised steps on both
    assert seen["worker:0"]["global_step"] == seen["worker:1"]["global_step"] == 20
    # the chief keeps the checkpoints; the other worker writes into its own scratch folder, not over them
    assert latest_checkpoint(model_dir) == "model.ckpt-20"
    assert (model_dir / "model.ckpt-20.index").exists()
    assert latest_checkpoint(model_dir / "tmp_worker_1") == "model.ckpt-20"
    assert not (model_dir / "tmp_worker_0").exists()
    assert "tf-keras is not installed" not in result.stdout
    assert "cross_replica" not in result.stdout


def test_tpu_estimator_code_trains_on_cpu(tmp_path: Path, tf215: WorkerEnv) -> None:
    # Cloud TPU guide code (TF1 behaviour, TPUConfig, TPUEstimatorSpec, params['batch_size']) with --use_tpu=False.
    model_dir = tmp_path / "model"
    result = launch(tf215, COMPAT / "tpu_estimator_cpu.py", tmp_path, "--model-dir", str(model_dir), "--", "--use_tpu=False")
    assert result.returncode == 0, outcome(result)
    seen = reports(result.stdout, "tpu_estimator_cpu")
    assert set(seen) == {"worker:0"}, outcome(result)
    record = seen["worker:0"]
    assert record["tf"] == tf215.tf_version
    assert record["use_tpu"] is False and record["eager"] is False, record
    assert record["input_batch_sizes"] == [64], record  # on CPU each input_fn call gets the whole batch
    assert record["global_step"] == 30, record
    assert record["accuracy"] > 0.6, record  # three classes: chance is 1/3
    assert record["latest_checkpoint"] == str(model_dir / "model.ckpt-30"), record
    assert latest_checkpoint(model_dir) == "model.ckpt-30"


def test_unmodified_single_device_keras_script_needs_no_tf_keras_on_tf_215(tmp_path: Path, tf215: WorkerEnv) -> None:
    # tf.keras is Keras 2 on TF <= 2.15: model.fit works under MultiWorkerMirroredStrategy as it is.
    assert "tf-keras" not in tf215.packages, tf215.packages  # the point of the test: no tf-keras there
    result = launch(tf215, SCRIPTS / "single_device_keras.py", tmp_path, "--workers", "2", extra_env={"WEIGHTS_OUT": str(tmp_path)})
    assert result.returncode == 0, outcome(result)
    assert "tf-keras is not installed" not in result.stdout
    assert "tf.keras is tf-keras here" not in result.stdout  # nothing was switched: Keras 2 is tf.keras
    assert "[worker:0] replicas in sync: 2" in result.stdout
    assert "[worker:1] replicas in sync: 2" in result.stdout
    w0, w1 = np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy")
    np.testing.assert_array_equal(w0, w1)
    assert np.abs(w0).sum() > 0


def test_custom_loop_under_its_own_strategy_on_tf_215(tmp_path: Path, tf215: WorkerEnv) -> None:
    model_dir = tmp_path / "model"
    result = launch(tf215, COMPAT / "custom_loop_mwms.py", tmp_path, "--workers", "2", "--model-dir", str(model_dir))
    assert result.returncode == 0, outcome(result)
    seen = reports(result.stdout, "custom_loop_mwms")
    assert set(seen) == {"worker:0", "worker:1"}, outcome(result)
    chief, other = seen["worker:0"], seen["worker:1"]
    for record in (chief, other):
        assert record["tf"] == tf215.tf_version and str(record["keras"]).startswith("2.15"), record
        assert record["replicas_in_sync"] == 2 and record["global_batch"] == 32, record
    trained_in_sync(chief, other, model_dir)
