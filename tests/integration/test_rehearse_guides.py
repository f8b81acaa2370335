"""`launch --rehearse` on TensorFlow's own TPU guides and tensorflow/tpu's models: TPUEstimator (TF 2.15 with
tensorflow-estimator, through `--runtime tpu-vm-tf-2.15.1-pjrt`), its embeddings, ResNet's double-transposed input, the
TPU guide's custom loop under Keras 3, and a Colab tutorial's Keras 2 fit under TensorFlow 2.15."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.rehearsal import REHEARSE, TF215_IMAGE, printed, rehearse, rehearse_tf215, verdicts
from tpuctl.launch import rehearsal_report

pytestmark = pytest.mark.tf


def test_a_tpu_estimator_script_trains_and_evaluates_and_the_report_says_what_was_not_rehearsed(tmp_path: Path) -> None:
    # TPUClusterResolver(tpu='') with no TPU_NAME stopped it at once ("Please provide a TPU Name to connect to"),
    # and CrossShardOptimizer's CrossReplicaSum has no CPU kernel.
    model_dir = tmp_path / "model"
    outcome, stderr = rehearse_tf215(REHEARSE / "tpu_estimator.py", "v2-8", tmp_path, "--model-dir", str(model_dir))
    assert outcome["exit_code"] == 0, (outcome, stderr[-3000:])
    seen = printed(outcome, "tpu_estimator")
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

def test_tensorflow_s_own_tpu_estimator_guide_rehearses_whole_and_counts_both_parts_steps(tmp_path: Path) -> None:
    # guide/migrate/tpu_estimator.ipynb unchanged: TPUEstimator (train_batch_size=8, one step), then the same model in
    # Keras under TPUStrategy (fit: 5 epochs of 10 steps). The report said "steps: 1", TPUEstimator's alone. A v2-8:
    # 8 replicas take both batches whole (a v4-32's 16, which TPUEstimator refuses, cost twice the Keras tracing).
    outcome, _ = rehearse_tf215(REHEARSE / "tpu_estimator_guide.py", "v2-8", tmp_path)
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), outcome
    assert "loss" in printed(outcome, "tpu_estimator_guide")["keras"]  # the script ran to its end: both parts trained and evaluated
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert "params['batch_size'] 8 in input_fn and 1 in model_fn" in found["TPUEstimator train"]["detail"]
    assert found["TPUEstimator eval"]["verdict"] == "ok"
    # Every train step of the run: TPUEstimator's one and Keras' 50; no one speed for the two.
    assert (outcome["rehearsal"]["steps"], outcome["rehearsal"]["seconds_per_step"]) == (1 + 5 * 10, None)


def test_tensorflow_tpu_s_resnet_with_its_double_transposed_input_is_read_by_tpu_estimator_s_batch_on_a_slice_it_does_not_fit(
    tmp_path: Path,
) -> None:
    # tensorflow/tpu's ResNet with transpose_input: input_fn flattens each batch of images to one dimension (HWCN,
    # reshape [-1]) and model_fn works the image size out of the shapes in float64. The report read the flattened
    # dimension as the batch ("batch: 9216 global", "ok batch split") and warned of float64 that XLA folds to a
    # constant, next to TPUEstimator's own refusal of a train_batch_size of 12 on the slice. A v4-32: 16 replicas on
    # 4 hosts (TPUEstimator itself runs on one CPU here, whatever the slice).
    outcome, stderr = rehearse_tf215(REHEARSE / "resnet_transpose.py", "v4-32", tmp_path, "--", "--num_cores", "16")
    assert (outcome["exit_code"], outcome["failure"]) == (1, None), (outcome, stderr[-3000:])
    seen = printed(outcome, "resnet_transpose")
    assert seen == {"script": "resnet_transpose", "global_step": 2, "input_fn_batch": [12, 12]}  # trained, then evaluated
    rehearsal = outcome["rehearsal"]
    assert (rehearsal["global_batch"], rehearsal["per_replica_batch"]) == (12, None)  # TPUEstimator's train_batch_size
    found = {c["check"]: c for c in rehearsal["checks"]}
    assert {name: c["verdict"] for name, c in found.items()} == {
        "batch split": "not checked", "static shapes": "ok", "XLA ops": "ok", "float64": "ok", "checkpoints": "not checked",
        "TPUEstimator train": "failed", "TPUEstimator eval": "failed", "iterations_per_loop": "ok", "TPU program": "not checked",
    }
    assert found["batch split"]["detail"].startswith("TPUEstimator splits its train_batch_size 12 over the 16 replicas itself")
    assert found["TPUEstimator train"]["detail"].endswith("train batch size 12 must be divisible by number of replicas 16")
    assert found["TPUEstimator eval"]["detail"].endswith("eval batch size 12 must be divisible by number of replicas 16")


def test_the_tpu_guides_custom_loop_with_a_lazily_built_adam_rehearses_under_keras_3(tmp_path: Path) -> None:
    # "Use TPUs", custom-loop section: Adam created in scope, built by its first apply_gradients inside strategy.run.
    # Keras 3 failed that step on the rehearsal's replicas in one process; a TPU runs it. A v5e-4's 4 replicas: any
    # count above one meets the failure, and each replica's step is traced on its own (a v2-8's 8 cost twice that).
    outcome, _ = rehearse(REHEARSE / "tpu_guide_custom_loop.py", "v5litepod-4", tmp_path)
    assert outcome["exit_code"] == 0, outcome
    log = (Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log").read_text()
    assert "tpuctl: Keras 3 on 4 replicas in one process: built Adam's variables in the strategy's scope before the first step" in log
    assert '{"replicas": 4, "steps": 8, "slots": 14}' in log  # Adam: iterations, learning rate, 2 moments x 6 weights
    assert outcome["rehearsal"]["steps"] == 8
    assert set(verdicts(outcome).values()) == {"ok"}

def test_tpu_estimator_embeddings_train_on_the_cpu_and_their_sparse_ops_are_not_called_uncompilable(tmp_path: Path) -> None:
    # An EmbeddingConfigSpec's columns run on the CPU under use_tpu=False: sparse lookups and Adagrad's sparse
    # updates, ops with no XLA kernel. On a TPU they run on the embedding hardware, not in XLA: the op check failed
    # the step for them; it leaves them out and the TPU embeddings line says what was not rehearsed.
    outcome, stderr = rehearse_tf215(REHEARSE / "tpu_estimator_embedding.py", "v2-8", tmp_path, "--model-dir", str(tmp_path / "model"))
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), (outcome, stderr[-3000:])
    assert printed(outcome, "tpu_estimator_embedding")["global_step"] == 10
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["XLA ops"]["verdict"] == "ok", found["XLA ops"]
    assert found["TPU embeddings"]["verdict"] == "not checked"
    assert found["TPU embeddings"]["detail"].startswith("TPUEstimator's EmbeddingConfigSpec: a TPU looks up and updates")
    assert "ResourceSparseApplyAdagrad" in found["TPU embeddings"]["detail"] and "SparseSegmentMean" in found["TPU embeddings"]["detail"]


def test_a_colab_tutorials_keras_fit_rehearses_under_the_tpu_images_tensorflow_2_15_and_keras_2(tmp_path: Path) -> None:
    # The laptop has TensorFlow 2.21 with Keras 3; a TPU VM made with tpu-vm-tf-2.15.1-pjrt runs 2.15 with its own Keras 2.
    # The verdict is about the TPU's: the report says so in its first line.
    outcome, stderr = rehearse_tf215(REHEARSE / "colab_fit.py", "v2-8", tmp_path)
    assert outcome["exit_code"] == 0, (outcome, stderr[-3000:])
    rehearsal = outcome["rehearsal"]
    assert rehearsal["keras"].startswith("2.15.") and rehearsal["steps"] == 2 * (256 // 64)
    assert set(verdicts(outcome).values()) == {"ok"}
    first = f"rehearsal of v2-8: 8 replicas on TensorFlow {rehearsal['tensorflow']} (Keras {rehearsal['keras']}), as on {TF215_IMAGE}; rehearsed as"
    assert rehearsal_report.render(rehearsal)[0].startswith(first)  # the console's words (--json prints the outcome instead)
