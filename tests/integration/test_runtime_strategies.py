"""The worker runtime's strategies with real TensorFlow on CPU: virtual devices, data sharding,
parameter servers, and TPU targets that must fail within their deadline instead of hanging."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf


def _json_line(stdout: str, prefix: str = "") -> list[dict[str, object]]:
    found = []
    for line in stdout.splitlines():
        text = re.sub(r"^\[[^\]]+\] ", "", line)
        if text.startswith(prefix + "{"):
            found.append(json.loads(text[len(prefix):]))
    return found


def test_simulated_devices_rehearse_an_eight_core_batch_split(tmp_path: Path) -> None:
    result = run_tpuctl("launch", str(SCRIPTS / "simulated_fit.py"), "--simulate-devices", "8", "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tpuctl: worker:0: MirroredStrategy, 8 replica(s) in sync, devices: /job:localhost/replica:0/task:0/device:CPU:0" in result.stdout
    (report,) = _json_line(result.stdout)
    assert report == {"replicas": 8, "global_batch": 32, "per_replica_shapes": [4] * 8, "loss_finite": True, "write_dir": "/tmp/m"}


def test_mirrored_on_chosen_devices(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "argv_dump.py"), "--strategy", "mirrored", "--simulate-devices", "4", "--devices", "CPU:1,CPU:3",
        "--log-dir", str(tmp_path / "logs"), env={**os.environ, "ARGV_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "MirroredStrategy, 2 replica(s) in sync, devices: /job:localhost/replica:0/task:0/device:CPU:1, /job:localhost/replica:0/task:0/device:CPU:3"
    ) in result.stdout


def test_auto_sharding_splits_each_global_batch_and_off_duplicates(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "shard_report.py"), "--workers", "2", "--communication", "ring",
        "--log-dir", str(tmp_path / "logs"), "--", "AUTO", "DATA", "OFF",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {(r["policy"], r["worker"]): r["elements"] for r in _json_line(result.stdout, "seen ")}
    for policy in ("AUTO", "DATA"):  # a range has no files: AUTO falls back to DATA
        assert seen[(policy, 0)] == [0, 1, 4, 5, 8, 9, 12, 13]
        assert seen[(policy, 1)] == [2, 3, 6, 7, 10, 11, 14, 15]
    assert seen[("OFF", 0)] == seen[("OFF", 1)] == list(range(16))  # every worker trains on everything
    assert "[worker:0] write_dir gs://b/run\n" in result.stdout
    assert "[worker:1] write_dir gs://b/run/workertemp_1\n" in result.stdout


def test_parameter_server_training_ends_when_the_chief_is_done(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "ps_fit.py"), "--strategy", "parameter-server", "--workers", "1", "--ps", "1",
        "--log-dir", str(tmp_path / "logs"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[chief:0] tpuctl: chief:0: ParameterServerStrategy" in result.stdout
    assert "[worker:0] tpuctl: worker:0: serving for ParameterServerStrategy" in result.stdout
    assert "[ps:0] tpuctl: ps:0: serving" in result.stdout
    assert re.search(r"\[chief:0\] ps training done: loss [0-9.]+, first variable on /job:ps/replica:0/task:0", result.stdout)
    assert "1 worker(s), a chief and 1 ps finished" in result.stderr  # as "launching 1 worker(s)" counted them


def test_tpu_targets_fail_within_the_deadline(tmp_path: Path, silent_port: int) -> None:
    """Only the port that accepts and never answers gets as far as TensorFlow: `local` without chips and a closed
    port are refused before the import. The workers of those two cases find a stand-in `tensorflow` first on their
    path, which ends the worker with its own words if anything imports it."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    stand_in = tmp_path / "stand-in" / "tensorflow"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("raise SystemExit('stand-in TensorFlow imported')\n")
    cases = [
        (f"grpc://127.0.0.1:{closed_port}", "is not reachable", "Connection refused", False),
        (f"grpc://127.0.0.1:{silent_port}", "no TPU answered", "hung", True),
        ("local", "no TPU on this machine", "/dev/accel", False),
    ]
    timeout = 4.0
    for case, (target, words, detail, imports_tensorflow) in enumerate(cases):
        env = {**os.environ, "TPU_NAME": target}
        if not imports_tensorflow:
            env["PYTHONPATH"] = os.pathsep.join([str(stand_in.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
        started = time.monotonic()
        result = run_tpuctl(
            "launch", str(SCRIPTS / "argv_dump.py"), "--strategy", "tpu", "--tpu-timeout", str(timeout),
            "--log-dir", str(tmp_path / f"logs-{case}"), env=env,  # one folder, one launch
        )
        elapsed = time.monotonic() - started
        assert result.returncode == 1, result.stdout + result.stderr
        assert "stand-in TensorFlow imported" not in result.stdout + result.stderr
        errors = [line for line in result.stdout.splitlines() if "tpuctl: error:" in line]
        assert len(errors) == 1 and words in errors[0] and detail in errors[0], result.stdout
        # TensorFlow's import comes on top of the deadline: a few seconds on 2 cores, 25 s beside two other test suites;
        # the error line above says the deadline fired, and a hang would run into run_tpuctl's 300 s.
        assert elapsed < timeout + 60, f"{target}: {elapsed:.1f}s"


def test_a_keras3_custom_loop_on_simulated_devices_gets_its_lazily_created_variables_built_in_scope(tmp_path: Path) -> None:
    """The tutorials' custom loop (a model without an input shape, Adam built by its first apply_gradients inside
    strategy.run) on 2 replicas in one process: Keras 3 failed its first step ("You must feed a value for placeholder
    tensor 'cond/...'"); under the default --keras it now trains, still Keras 3, and the chief says what tpuctl did."""
    result = run_tpuctl(
        "launch", str(SCRIPTS / "custom_loop_lazy.py"), "--simulate-devices", "2", "--model-dir", str(tmp_path / "model"),
        "--log-dir", str(tmp_path / "logs"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = _json_line(result.stdout)
    assert str(report.pop("keras")).startswith("3.")
    assert report == {"replicas": 2, "steps": 2 * 512 // 64, "losses_finite": True, "replicas_in_sync": True, "checkpoint": "ckpt-2"}
    built = "[worker:0] tpuctl: Keras 3 on 2 replicas in one process: built {} in the strategy's scope before the first step"
    assert built.format("the layers of 'sequential'") in result.stdout
    assert built.format("Adam's variables") in result.stdout
    assert "keras-team/keras#19246); --keras tf-keras runs tf-keras instead" in result.stdout
    assert "TF_USE_LEGACY_KERAS" not in result.stdout


@pytest.fixture(scope="module")
def hub_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A feature-vector SavedModel written here (no download), the handle hub.KerasLayer loads."""
    if importlib.util.find_spec("tensorflow_hub") is None:  # not importorskip: importing it here imports TensorFlow
        pytest.skip("tensorflow_hub is in the test extra: make test installs it")
    handle = tmp_path_factory.mktemp("hub") / "feature_vector"
    subprocess.run([sys.executable, str(SCRIPTS / "hub_module_save.py"), str(handle)], check=True, capture_output=True, timeout=120)
    return handle


def test_a_tf_hub_tutorial_script_gets_tf_keras_by_itself(tmp_path: Path, hub_module: Path) -> None:
    """hub.KerasLayer is a tf-keras layer wherever tf.keras is Keras 3: on one worker, whose strategy alone would
    keep Keras 3, --keras auto reads the script and chooses tf-keras, and the tutorial trains."""
    script = SCRIPTS / "hub_feature_vector.py"
    result = run_tpuctl("launch", str(script), str(hub_module), "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "[worker:0] tpuctl: tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1): the script uses tensorflow_hub's KerasLayer, "
        "a tf-keras layer that Keras 3 models refuse (line 11)"
    ) in result.stdout
    assert "[worker:0] hub fit done: tf_keras 2 epochs" in result.stdout


def test_a_tf_hub_script_forced_onto_keras3_fails_naming_the_fix(tmp_path: Path, hub_module: Path) -> None:
    result = run_tpuctl("launch", str(SCRIPTS / "hub_feature_vector.py"), str(hub_module), "--keras", "keras3", "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ValueError: Only instances of `keras.Layer` can be added to a Sequential model" in result.stdout
    assert (
        "; tensorflow_hub's KerasLayer is a tf-keras layer, which a Keras 3 model refuses: --keras tf-keras or auto (pip install tf-keras)"
    ) in result.stderr
    assert "hub fit done" not in result.stdout
