"""`launch --rehearse`: unmodified TPU scripts on CPU with real TensorFlow, and what the rehearsal flags.

Each script here is written as the Cloud TPU tutorials write theirs; none knows about tpuctl.
A TPU address that nobody answers would hang TensorFlow forever (FIELD-NOTES), so the
address forms given below also prove that a rehearsal reaches for nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf

REHEARSE = SCRIPTS / "rehearse"
DEAD_ADDRESS = "127.0.0.1:9"  # discard port: nothing listens, a real connect would wait forever


def _rehearse(script: Path, accelerator: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    result = run_tpuctl(
        "launch", str(script), "--rehearse", accelerator, "--json", "--log-dir", str(tmp_path / "logs"), *args,
        env={**os.environ, **(env or {})}, timeout=240,
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def _verdicts(outcome: Any) -> dict[str, str]:
    return {c["check"]: c["verdict"] for c in outcome["rehearsal"]["checks"]}


def test_a_colab_script_rehearses_as_v2_8_without_colab_tpu_addr(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_TPU_ADDR", "TPU_NAME")}
    result = run_tpuctl(
        "launch", str(REHEARSE / "colab_fit.py"), "--rehearse", "v2-8", "--log-dir", str(tmp_path / "logs"), env=env, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads(re.findall(r"^\[worker:0\] (\{.*\})$", result.stdout, re.M)[-1])
    assert seen == {
        "replicas": 8, "is_tpu_strategy": True, "tpu_devices": 8, "master": "grpc://rehearsal:8470",
        "epochs": 2, "validated": 2, "variables_mirrored": True,
    }
    assert "the script's TPUStrategy(...) is tpuctl's rehearsal of v2-8" in result.stdout
    report = (tmp_path / "logs" / "rehearsal.json").read_text()
    rehearsal = json.loads(report)
    assert (rehearsal["replicas"], rehearsal["global_batch"], rehearsal["per_replica_batch"]) == (8, 64, 8)
    assert rehearsal["steps"] == 2 * (512 // 64)  # every train step of both epochs, counted inside the step; not validation's
    assert rehearsal["seconds_per_step"] > 0
    assert {c["check"]: c["verdict"] for c in rehearsal["checks"]} == {
        "batch split": "ok", "static shapes": "ok", "XLA ops": "ok", "float64": "ok", "steps_per_execution": "ok",
    }
    # The report as a person reads it, at the end of the run.
    assert "tpuctl: rehearsal of v2-8: 8 replicas; rehearsed as one process, one virtual CPU per replica" in result.stderr
    assert "tpuctl:   batch: 64 global, 8 per replica" in result.stderr
    assert re.search(r"tpuctl:   steps: 16, [0-9.]+s per step on this CPU", result.stderr)


def test_the_bundled_example_rehearses_a_multi_host_slice_and_says_what_it_stands_in_for(tmp_path: Path) -> None:
    outcome, _ = _rehearse(
        ROOT / "examples" / "train_tpu.py", "v4-32", tmp_path, "--model-dir", str(tmp_path / "model"),
        "--", "--epochs", "1", "--examples", "512", env={"COLAB_TPU_ADDR": DEAD_ADDRESS},
    )
    assert outcome["exit_code"] == 0, outcome
    rehearsal = outcome["rehearsal"]
    assert (rehearsal["replicas"], rehearsal["hosts"]) == (16, 4)  # v4 is megacore: one replica per chip
    assert "standing in for all 4 hosts" in rehearsal["rehearsed_as"]
    assert rehearsal["global_batch"] == 16 * 16 and rehearsal["steps"] == 512 // 256
    assert _verdicts(outcome)["checkpoints"] == "warning"  # a local model dir on a 4-host slice
    assert (tmp_path / "model" / "checkpoints" / "epoch-1.weights.h5").is_file()


def test_a_custom_loop_reaches_its_tpu_by_name_and_checkpoints(tmp_path: Path) -> None:
    outcome, _ = _rehearse(
        REHEARSE / "custom_loop.py", "v3-8", tmp_path, "--model-dir", str(tmp_path / "model"), env={"TPU_NAME": "my-tpu"}
    )
    assert outcome["exit_code"] == 0, outcome
    assert outcome["rehearsal"]["steps"] == 6
    assert (outcome["rehearsal"]["global_batch"], outcome["rehearsal"]["per_replica_batch"]) == (128, 16)
    assert _verdicts(outcome) == {"batch split": "ok", "static shapes": "ok", "XLA ops": "ok", "float64": "ok"}
    assert list((tmp_path / "model").glob("ckpt-1.index"))


@pytest.mark.parametrize(
    ("defect", "check", "verdict", "exit_code", "detail"),
    [
        # TPUStrategy pads uneven per-replica batches (tpu_strategy.py: maximum_shapes when
        # RunOptions.experimental_enable_dynamic_batch_size, True by default): it runs, cores idle.
        ("uneven-batch", "batch split", "warning", 0, "global batch 131 does not split evenly across 8 replicas: TPUStrategy pads"),
        # With the padder off, the replicas' batches reach one program of one shape unpadded: TPUExecute refuses
        # the others ("Run-time shape mismatch for TPUExecute argument").
        ("uneven-batch --no-dynamic-batch", "batch split", "failed", 1, "RunOptions(experimental_enable_dynamic_batch_size=False)"),
        ("partial-batch", "static shapes", "warning", 0, "drop_remainder=True"),
        # Inside tf.function soft placement is off unless the script turns it on: the TPU bridge refuses the op
        # ("isn't compilable for TPU device"); turned on, automatic outside compilation runs it on the host.
        ("host-op", "XLA ops", "failed", 1, "no XLA kernel for PyFunc: without soft device placement"),
        ("host-op --soft-placement", "XLA ops", "warning", 0, "no XLA kernel for PyFunc: soft device placement is on"),
        # TPU kernels are registered for DT_DOUBLE (tensorflow/core/tpu/tpu_defs.h): compiled, slow.
        ("float64", "float64", "warning", 0, "the step computes in float64"),
        # TPUStrategy.run refuses a plain Python function eagerly (tpu_strategy.py: validate_run_function).
        ("eager-step", "tf.function", "failed", 1, "TPUStrategy.run(fn, ...) does not support pure eager execution"),
    ],
)
def test_each_check_flags_the_script_that_breaks_it(tmp_path: Path, defect: str, check: str, verdict: str, exit_code: int, detail: str) -> None:
    outcome, _ = _rehearse(REHEARSE / "custom_loop.py", "v2-8", tmp_path, "--", "--defect", *defect.split(), "--steps", "3")
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found[check]["verdict"] == verdict, found
    assert detail in found[check]["detail"]
    assert outcome["rehearsal"]["steps"] == 3  # the script ran to its end: a rehearsal observes, it does not stop the run
    assert (outcome["exit_code"], outcome["result"], outcome["failure"]) == (exit_code, "failed" if exit_code else "succeeded", None)
    others = {name: c["verdict"] for name, c in found.items() if name != check}
    assert "failed" not in others.values(), others  # one defect, one finding


def test_an_uneven_evaluation_batch_runs_padded_under_tf_keras(tmp_path: Path) -> None:
    # evaluate() on batch(1, drop_remainder=True) over 8 replicas: one replica gets the example, seven get none;
    # TPUStrategy pads them, and the rehearsal runs the evaluation to its end instead of failing the launch.
    outcome, _ = _rehearse(REHEARSE / "uneven_eval.py", "v2-8", tmp_path, "--keras", "tf-keras")
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), outcome
    assert 0 <= _printed(outcome, "uneven_eval")["accuracy"] <= 1  # all 12 one-example batches evaluated
    verdicts = _verdicts(outcome)
    assert verdicts.pop("batch split") == "warning" and set(verdicts.values()) == {"ok"}, _verdicts(outcome)
    found = {c["check"]: c["detail"] for c in outcome["rehearsal"]["checks"]}
    assert found["batch split"].startswith("global batch 1 does not split evenly across 8 replicas: TPUStrategy pads")


def test_keras_3_reducing_an_uneven_first_batch_fails_as_on_a_tpu_and_the_cause_says_why(tmp_path: Path) -> None:
    # Keras 3's evaluate reduces its first batch across the replicas (strategy.reduce, before any step); TPUStrategy
    # does that with add_n outside its program (tpu_strategy.py TPUExtended._reduce_to), as MirroredStrategy does here:
    # shapes [1, 4] and [0, 4] fail on both. The padded batch itself is only a warning.
    outcome, _ = _rehearse(REHEARSE / "uneven_eval.py", "v2-8", tmp_path, "--keras", "keras3")
    cause = outcome["failure"]["cause"]["summary"]
    assert outcome["exit_code"] == 1
    assert cause.startswith("the rehearsal's reduce check failed (strategy.reduce was given per-replica values of shapes [1, 4] and [0, 4]"), cause
    assert "then uncaught Python exception: InvalidArgumentError" in cause
    assert _verdicts(outcome)["batch split"] == "warning"
    assert outcome["rehearsal"]["steps"] == 4  # fit on its even batch ran; evaluate stopped where a TPU stops


def test_tpu_embeddings_stop_in_one_line_and_the_report_says_what_was_not_rehearsed(tmp_path: Path) -> None:
    # The TPUEmbedding API's own training loop: enqueue, dequeue and apply_gradients work the TPU's embedding
    # hardware; TensorFlow's CPU mode raises "not created under a TPUStrategy" there. The layers that pick a path
    # read the stand-in's hardware feature, which says this machine has no embedding accelerator.
    outcome, stderr = _rehearse(REHEARSE / "tpu_embedding.py", "v2-8", tmp_path)
    assert outcome["exit_code"] == 1
    assert _printed(outcome, "tpu_embedding") == {"script": "tpu_embedding", "embedding_feature": "UNSUPPORTED"}
    log = (Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log").read_text()
    assert "tpuctl: error: --rehearse does not rehearse TPU embeddings: TPUEmbedding.enqueue() works the TPU's embedding hardware" in log
    assert "Traceback" not in log and "Traceback" not in stderr
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["TPU embeddings"]["verdict"] == "not checked"
    assert found["TPU embeddings"]["detail"].startswith("tf.tpu.experimental.embedding.TPUEmbedding: a TPU looks up and updates")


def test_a_script_that_skips_the_report_is_told_nothing_was_checked(tmp_path: Path) -> None:
    outcome, stderr = _rehearse(REHEARSE / "custom_loop.py", "v2-8", tmp_path, "--", "--steps", "1", "--hard-exit")
    assert (outcome["exit_code"], outcome["rehearsal"]) == (0, None)
    assert "the rehearsal wrote no report" in stderr and "nothing was checked" in stderr and "os._exit()" in stderr


# --- TPUEstimator (TensorFlow 2.15 with tensorflow-estimator, through --python) -------------------------------


def _rehearse_tf215(script: Path, accelerator: str, tmp_path: Path, *args: str) -> tuple[Any, str]:
    from tests.integration.compat_env import tf215_env

    worker = tf215_env()  # a skip saying how to build it, or a failure where CI requires it
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_TPU_ADDR", "TPU_NAME")}
    result = run_tpuctl(
        "launch", str(script), "--rehearse", accelerator, "--python", str(worker.python), "--json",
        "--log-dir", str(tmp_path / "logs"), *args, env=env, timeout=240,
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def _printed(outcome: Any, script: str) -> dict[str, Any]:
    """The JSON line the script printed, read back from the worker's log."""
    log = Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"script": "' + script)]
    assert lines, log.read_text()[-3000:]
    return lines[-1]


def test_a_tpu_estimator_script_trains_and_evaluates_and_the_report_says_what_was_not_rehearsed(tmp_path: Path) -> None:
    # TPUClusterResolver(tpu='') with no TPU_NAME stopped it at once ("Please provide a TPU Name to connect to"),
    # and CrossShardOptimizer's CrossReplicaSum has no CPU kernel.
    model_dir = tmp_path / "model"
    outcome, stderr = _rehearse_tf215(REHEARSE / "tpu_estimator.py", "v2-8", tmp_path, "--model-dir", str(model_dir))
    assert outcome["exit_code"] == 0, (outcome, stderr[-3000:])
    seen = _printed(outcome, "tpu_estimator")
    assert seen["global_step"] == 20 and 0 <= seen["accuracy"] <= 1, seen  # trained to max_steps, then evaluated
    assert seen["latest_checkpoint"] == str(model_dir / "model.ckpt-20")
    assert (seen["input_fn_batch"], seen["model_fn_batch"]) == ([64], [64])  # use_tpu=False hands out the global batch
    assert seen["master"] == "grpc://rehearsal:8470"
    rehearsal = outcome["rehearsal"]
    assert (rehearsal["global_batch"], rehearsal["per_replica_batch"], rehearsal["steps"]) == (64, 8, 20)
    found = {c["check"]: c for c in rehearsal["checks"]}
    assert {name: c["verdict"] for name, c in found.items()} == {
        "batch split": "ok", "static shapes": "ok", "XLA ops": "ok", "float64": "ok",
        "TPUEstimator train": "ok", "TPUEstimator eval": "ok", "iterations_per_loop": "ok", "TPU program": "not checked",
    }
    # What the TPU would hand out, from TPUEstimator's own context told the slice's metadata.
    assert "params['batch_size'] 64 in input_fn and 8 in model_fn" in found["TPUEstimator train"]["detail"]
    assert found["iterations_per_loop"]["detail"].startswith("10 per loop on the TPU")
    not_rehearsed = found["TPU program"]["detail"]
    assert "use_tpu=False" in not_rehearsed and "not 8 shards of 8" in not_rehearsed and "cross-replica sum" in not_rehearsed


def test_tensorflow_s_own_tpu_estimator_guide_rehearses_and_tpu_estimator_s_own_checks_fail_a_slice_it_does_not_fit(
    tmp_path: Path,
) -> None:
    # guide/migrate/tpu_estimator.ipynb unchanged: train_batch_size=8 and eval_batch_size=8 on a v4-32's 16 replicas.
    outcome, _ = _rehearse_tf215(REHEARSE / "tpu_estimator_guide.py", "v4-32", tmp_path)
    assert "loss" in _printed(outcome, "tpu_estimator_guide")  # the script ran to its end: it trained and evaluated
    assert (outcome["exit_code"], outcome["failure"]) == (1, None)  # the rehearsal's findings fail the launch
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["TPUEstimator train"]["verdict"] == "failed"
    assert found["TPUEstimator train"]["detail"].endswith("train batch size 8 must be divisible by number of replicas 16")
    assert found["TPUEstimator eval"]["detail"].endswith("eval batch size 8 must be divisible by number of replicas 16")
    assert outcome["rehearsal"]["steps"] == 1


def test_the_tpu_guides_custom_loop_with_a_lazily_built_adam_rehearses_under_keras_3(tmp_path: Path) -> None:
    # "Use TPUs", custom-loop section: Adam created in scope, built by its first apply_gradients inside strategy.run.
    # Keras 3 failed that step on the rehearsal's 8 replicas in one process; a TPU runs it.
    outcome, _ = _rehearse(REHEARSE / "tpu_guide_custom_loop.py", "v2-8", tmp_path)
    assert outcome["exit_code"] == 0, outcome
    log = (Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log").read_text()
    assert "tpuctl: Keras 3 on 8 replicas in one process: built Adam's variables in the strategy's scope before the first step" in log
    assert '{"replicas": 8, "steps": 8, "slots": 14}' in log  # Adam: iterations, learning rate, 2 moments x 6 weights
    assert outcome["rehearsal"]["steps"] == 8
    assert set(_verdicts(outcome).values()) == {"ok"}


def test_tpu_estimator_embeddings_train_on_the_cpu_and_their_sparse_ops_are_not_called_uncompilable(tmp_path: Path) -> None:
    # An EmbeddingConfigSpec's columns run on the CPU under use_tpu=False: sparse lookups and Adagrad's sparse
    # updates, ops with no XLA kernel. On a TPU they run on the embedding hardware, not in XLA: the op check failed
    # the step for them; it leaves them out and the TPU embeddings line says what was not rehearsed.
    outcome, stderr = _rehearse_tf215(REHEARSE / "tpu_estimator_embedding.py", "v2-8", tmp_path, "--model-dir", str(tmp_path / "model"))
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), (outcome, stderr[-3000:])
    assert _printed(outcome, "tpu_estimator_embedding")["global_step"] == 10
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["XLA ops"]["verdict"] == "ok", found["XLA ops"]
    assert found["TPU embeddings"]["verdict"] == "not checked"
    assert found["TPU embeddings"]["detail"].startswith("TPUEstimator's EmbeddingConfigSpec: a TPU looks up and updates")
    assert "ResourceSparseApplyAdagrad" in found["TPU embeddings"]["detail"] and "SparseSegmentMean" in found["TPU embeddings"]["detail"]
