"""`launch --rehearse`: each check against the script that breaks it, and verdicts that say only what a TPU does
(an uneven batch padded, a Keras 3 first-batch reduce, no partial batch from a dataset that never ends, no float64
where XLA folds it to a constant, TPU embeddings on the path the rehearsed TPU takes or said not rehearsed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.rehearsal import REHEARSE, printed, rehearse, verdicts

pytestmark = pytest.mark.tf


# Defects whose findings are warnings, on checks that read different things (the dataset's batch, the step's dtypes;
# the dataset's static shape, the step's ops), share one run: each test's assertions are the same, none of them
# fails another check. The defects that fail a check run alone, as two failed checks would be two findings.
SHARED_RUNS = (("uneven-batch", "float64", "endless-batch"), ("partial-batch", "host-op --soft-placement", "folded-float64"))


@pytest.fixture(scope="module")
def defect_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """The rehearsal of custom_loop.py carrying a defect (and the one it shares a run with), launched once."""
    outcomes: dict[tuple[str, ...], Any] = {}

    def run(defect: str) -> Any:
        defects = next((group for group in SHARED_RUNS if defect in group), (defect,))
        if defects not in outcomes:
            argv = [arg for each in defects for arg in ("--defect", *each.split())]
            tmp_path = tmp_path_factory.mktemp("defects")
            outcomes[defects], _ = rehearse(REHEARSE / "custom_loop.py", "v2-8", tmp_path, "--", *argv, "--steps", "3")
        return outcomes[defects]

    return run


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
        # .repeat().batch() without drop_remainder: tf.data's cardinality is INFINITE, there is no last, partial batch
        # (and the batch is still read, by TensorFlow's own compute_batch_size: "global batch 131" above).
        ("endless-batch", "static shapes", "ok", 0, "never end (tf.data cardinality INFINITE"),
        # Inside tf.function soft placement is off unless the script turns it on: the TPU bridge refuses the op
        # ("isn't compilable for TPU device"); turned on, automatic outside compilation runs it on the host.
        ("host-op", "XLA ops", "failed", 1, "no XLA kernel for PyFunc: without soft device placement"),
        ("host-op --soft-placement", "XLA ops", "warning", 0, "no XLA kernel for PyFunc: soft device placement is on"),
        # TPU kernels are registered for DT_DOUBLE (tensorflow/core/tpu/tpu_defs.h): compiled, slow.
        ("float64", "float64", "warning", 0, "the step computes in float64"),
        # float64 from a static dimension and a NumPy constant: constants in the compiled program (XLA folds them).
        ("folded-float64", "float64", "ok", 0, "no float64 in the step"),
        # TPUStrategy.run refuses a plain Python function eagerly (tpu_strategy.py: validate_run_function).
        ("eager-step", "tf.function", "failed", 1, "TPUStrategy.run(fn, ...) does not support pure eager execution"),
    ],
)
def test_each_check_flags_the_script_that_breaks_it(
    defect_runs: Callable[[str], Any], defect: str, check: str, verdict: str, exit_code: int, detail: str
) -> None:
    outcome = defect_runs(defect)
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found[check]["verdict"] == verdict, found
    assert detail in found[check]["detail"]
    assert outcome["rehearsal"]["steps"] == 3  # the script ran to its end: a rehearsal observes, it does not stop the run
    assert (outcome["exit_code"], outcome["result"], outcome["failure"]) == (exit_code, "failed" if exit_code else "succeeded", None)
    others = {name: c["verdict"] for name, c in found.items() if name != check}
    assert "failed" not in others.values(), others  # one defect, one finding (a shared run's other is a warning)

def test_an_uneven_evaluation_batch_runs_padded_under_tf_keras(tmp_path: Path) -> None:
    # evaluate() on batch(1, drop_remainder=True) over a v5e-4's 4 replicas: one replica gets the example, three get
    # none; TPUStrategy pads them, and the rehearsal runs the evaluation to its end instead of failing the launch.
    # (4 replicas, not a v2-8's 8: each replica's step is traced on its own, and any uneven split makes the point.)
    outcome, _ = rehearse(REHEARSE / "uneven_eval.py", "v5litepod-4", tmp_path, "--keras", "tf-keras")
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), outcome
    assert 0 <= printed(outcome, "uneven_eval")["accuracy"] <= 1  # all 12 one-example batches evaluated
    seen = verdicts(outcome)
    assert seen.pop("batch split") == "warning" and set(seen.values()) == {"ok"}, verdicts(outcome)
    found = {c["check"]: c["detail"] for c in outcome["rehearsal"]["checks"]}
    assert found["batch split"].startswith("global batch 1 does not split evenly across 4 replicas: TPUStrategy pads")

def test_keras_3_reducing_an_uneven_first_batch_fails_as_on_a_tpu_and_the_cause_says_why(tmp_path: Path) -> None:
    # Keras 3's evaluate reduces its first batch across the replicas (strategy.reduce, before any step); TPUStrategy
    # does that with add_n outside its program (tpu_strategy.py TPUExtended._reduce_to), as MirroredStrategy does here:
    # shapes [1, 4] and [0, 4] fail on both. The padded batch itself is only a warning.
    outcome, _ = rehearse(REHEARSE / "uneven_eval.py", "v5litepod-4", tmp_path, "--keras", "keras3")  # 4 replicas, as above
    cause = outcome["failure"]["cause"]["summary"]
    assert outcome["exit_code"] == 1
    assert cause.startswith("the rehearsal's reduce check failed (strategy.reduce was given per-replica values of shapes [1, 4] and [0, 4]"), cause
    assert "then uncaught Python exception: InvalidArgumentError" in cause
    assert verdicts(outcome)["batch split"] == "warning"
    assert outcome["rehearsal"]["steps"] == 256 // (8 * 4)  # fit on its even batch ran; evaluate stopped where a TPU stops

def test_tpu_embeddings_stop_in_one_line_and_the_report_says_what_was_not_rehearsed(tmp_path: Path) -> None:
    # The TPUEmbedding API's own training loop: enqueue, dequeue and apply_gradients work the TPU's embedding
    # hardware; TensorFlow's CPU mode raises "not created under a TPUStrategy" there.
    outcome, stderr = rehearse(REHEARSE / "tpu_embedding.py", "v2-8", tmp_path)
    assert outcome["exit_code"] == 1
    log = (Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log").read_text()
    assert "tpuctl: error: --rehearse does not rehearse TPU embeddings: TPUEmbedding.enqueue(): a TPU looks up and updates" in log
    assert "Traceback" not in log and "Traceback" not in stderr
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["TPU embeddings"]["verdict"] == "not checked"
    assert found["TPU embeddings"]["detail"].startswith("tf.tpu.experimental.embedding.TPUEmbedding: a TPU looks up and updates")


def test_a_tensorflow_recommenders_layer_takes_the_path_of_a_v5e_and_trains_its_tables_there(tmp_path: Path) -> None:
    # tensorflow-recommenders picks its mid-level API by strategy.extended.tpu_hardware_feature.embedding_feature. The
    # rehearsal said UNSUPPORTED (no embedding hardware) for every type, and TPUEmbeddingV0 refused its strategy with a
    # raw RuntimeError. A v5e has no embedding accelerator: V0, whose lookups are XLA ops in the step, runs for real.
    outcome, _ = rehearse(REHEARSE / "tfrs_embedding.py", "v5litepod-4", tmp_path, "--keras", "tf-keras")
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), outcome
    seen = printed(outcome, "tfrs_embedding")
    assert seen == {"script": "tfrs_embedding", "mid_level_api": "TPUEmbeddingV0", "tables_moved": {"items": True, "users": True}}
    assert set(verdicts(outcome).values()) == {"ok"}, verdicts(outcome)
    found = {c["check"]: c["detail"] for c in outcome["rehearsal"]["checks"]}
    assert found["TPU embeddings"].startswith("TPUEmbeddingV0: its lookups run in the step on the TensorCores")
    assert outcome["rehearsal"]["steps"] == 4


def test_a_tensorflow_recommenders_layer_on_a_tpu_with_sparsecores_is_said_not_rehearsed_and_the_script_goes_on(tmp_path: Path) -> None:
    # A v4 looks embeddings up on its SparseCores: whichever API the layer picks from the real answer runs there, which
    # no CPU runs. The rehearsal answers UNSUPPORTED in that path's place and says so in the report; the layer builds
    # TPUEmbeddingV0 and the rest of the script is rehearsed (it answered UNSUPPORTED silently, and the layer died on
    # a RuntimeError).
    outcome, stderr = rehearse(REHEARSE / "tfrs_embedding.py", "v4-8", tmp_path, "--keras", "tf-keras")
    assert (outcome["exit_code"], outcome["failure"]) == (0, None), (outcome, stderr[-3000:])
    assert printed(outcome, "tfrs_embedding") == {"script": "tfrs_embedding", "mid_level_api": "TPUEmbeddingV0", "tables_moved": {"items": True, "users": True}}
    assert "Traceback" not in stderr
    found = {c["check"]: c for c in outcome["rehearsal"]["checks"]}
    assert found["TPU embeddings"]["verdict"] == "not checked"
    detail = found["TPU embeddings"]["detail"]
    assert detail == (
        "strategy.extended.tpu_hardware_feature.embedding_feature: a v4 TPU looks tables up on its 4 SparseCores per chip, "
        "which no CPU runs; TPUEmbeddingV0's TensorCore lookups stood in (answered UNSUPPORTED); that path was not rehearsed; "
        "their sparse CPU ops (Unique) were left out of the XLA check"  # on a v4 they run on the SparseCores, not in XLA
    )
    assert len(detail) <= 300  # the report shows that much of it
    others = {check: v for check, v in verdicts(outcome).items() if check != "TPU embeddings"}
    assert others and set(others.values()) == {"ok"}, others
    assert outcome["rehearsal"]["steps"] == 4
