"""TPU embeddings under `--rehearse`: the path a TPU of the rehearsed type takes, where it runs here, and where it stops.

TensorFlow has one mid-level API per kind of TPU embedding hardware, and layers
pick theirs by `strategy.extended.tpu_hardware_feature.embedding_feature`
(tensorflow-recommenders' tfrs/layers/embedding/tpu_embedding_layer.py, keras-rs'
DistributedEmbedding): UNSUPPORTED, no embedding accelerator, builds
TPUEmbeddingV0 (tensorflow/python/tpu/tpu_embedding_v1.py), whose lookups are
gathers from tables replicated on every replica, inside the step on the
TensorCores; V1 builds TPUEmbedding (tpu_embedding_v2.py: `enqueue` sends the
host's ids to the embedding hardware, `dequeue` receives activations inside the
step, `apply_gradients` sends gradients back) and V2 TPUEmbeddingV2
(tpu_embedding_v3.py, on SparseCores). So the rehearsal's strategy answers what a
TPU of the rehearsed type answers, where a source says it:

- v5e (v5litepod) has no embedding accelerator: "Each v5e chip contains one
  TensorCore" (https://cloud.google.com/tpu/docs/v5e), no SparseCore in its
  specifications, and v5e is not in OpenXLA's table of TPUs with SparseCores
  (https://openxla.org/xla/sparsecore: v4, v5p, Trillium). It answers
  UNSUPPORTED, and TPUEmbeddingV0 runs here for real: that path is all XLA ops
  in the step, checked as any other step.
- v4, v5p and v6e have SparseCores (OpenXLA's table: 4, 4 and 2 per chip; for v5p
  also https://cloud.google.com/tpu/docs/v5p, "Number of SparseCores per chip: 4"):
  whichever path a layer picks there runs on them, which no CPU runs. Reading the
  feature is answered UNSUPPORTED *in that path's place*, and said:
  the report's `TPU embeddings` line names what was not rehearsed and why, and that
  TPUEmbeddingV0's lookups on the TensorCores stood in for it, so the rest of the
  script (its dense layers, its input, its batch split) is rehearsed all the same.
- v2 and v3: no source tpuctl knows says which embedding feature they report; the
  same stand-in, said the same way with that reason.

Whatever a script builds itself: TPUEmbedding under the rehearsal's strategy is in
TensorFlow's CPU mode (it checks for the real TPUStrategy class), so its TPU calls
would raise TensorFlow's "not created under a TPUStrategy"; TPUEmbeddingV2 would
refuse to be built at all. The rehearsal stops there instead, in one line. A
TPUEstimator given an EmbeddingConfigSpec runs its embedding columns on the CPU
(estimator.py), whose sparse ops a TPU runs on its embedding hardware, not in XLA.
"""

from __future__ import annotations

import types
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf.tpu import topology_pb2
from tensorflow.python.distribute import tpu_strategy
from tensorflow.python.tpu import tpu_embedding_v1, tpu_embedding_v2, tpu_hardware_feature

from tpuctl.inputs.errors import FAILED, TpuctlError

# The op types of the CPU stand-ins for embedding lookups and updates (embedding_lookup_sparse, the sparse
# optimizer applies, sparse feature plumbing). On a TPU the embedding hardware does this work, not XLA.
SPARSE_EMBEDDING_OPS = frozenset(
    {
        "SparseSegmentMean", "SparseSegmentSum", "SparseSegmentSqrtN",
        "SparseSegmentMeanWithNumSegments", "SparseSegmentSumWithNumSegments", "SparseSegmentSqrtNWithNumSegments",
        "SparseSegmentMeanGrad", "SparseSegmentSumGrad", "SparseSegmentSqrtNGrad",
        "SparseSegmentMeanGradV2", "SparseSegmentSumGradV2", "SparseSegmentSqrtNGradV2",
        "SparseFillEmptyRows", "SparseReshape", "SparseSlice", "SparseToDense", "Unique", "UniqueV2",
        "ResourceSparseApplyAdagrad", "ResourceSparseApplyAdagradV2", "ResourceSparseApplyProximalAdagrad",
        "ResourceSparseApplyAdam", "ResourceSparseApplyFtrl", "ResourceSparseApplyFtrlV2",
        "ResourceSparseApplyGradientDescent", "ResourceSparseApplyMomentum",
    }
)  # fmt: skip
# What a TPU's embedding APIs do (and a TPUEstimator's EmbeddingConfigSpec), which the rehearsal cannot run.
ON_THE_HARDWARE = "a TPU looks up and updates these tables on its embedding hardware, outside the XLA program; the rehearsal has none"
V0 = "TPUEmbeddingV0"
_NO_ACCELERATOR = frozenset({"v5litepod"})  # sources in the module's docstring
_SPARSECORES = {"v4": 4, "v5p": 4, "v6e": 2}  # per chip
_TPU_ONLY = ("enqueue", "dequeue", "apply_gradients")


def _answer(generation: str) -> str | None:
    """Why the rehearsal cannot answer `embedding_feature` as a TPU of this generation would; None where it can. Short:
    the report shows a check's detail to 300 characters, and what stood in must fit too."""
    if generation in _NO_ACCELERATOR:
        return None
    if generation in _SPARSECORES:
        return f"a {generation} TPU looks tables up on its {_SPARSECORES[generation]} SparseCores per chip, which no CPU runs"
    return f"no source tpuctl knows says which embedding feature a {generation} TPU reports"


def _needs_hardware(generation: str) -> str:
    """Why an API that works embedding hardware (TPUEmbedding's calls, TPUEmbeddingV2) is not rehearsed here."""
    if generation in _NO_ACCELERATOR:
        return f"a {generation} TPU has no embedding accelerator, which it needs (TPUEmbeddingV0 is TensorFlow's API for such a TPU)"
    return ON_THE_HARDWARE


class _Feature(tpu_hardware_feature.HardwareFeature):  # type: ignore[misc]
    """TPUStrategy's `extended.tpu_hardware_feature` for the rehearsed generation.

    Where that TPU has no embedding accelerator it answers as TensorFlow does for one
    (UNSUPPORTED, no embedding devices); elsewhere it gives the same answer as a stand-in
    and says so: what a layer would build from the real answer needs hardware this CPU
    does not have, and stopping there would leave the rest of the script unrehearsed.
    """

    def __init__(self, generation: str, not_rehearsed: list[tuple[str, str]]) -> None:
        proto = topology_pb2.TPUHardwareFeature(embedding_feature=topology_pb2.TPUHardwareFeature.EmbeddingFeature.UNSUPPORTED)
        super().__init__(proto)
        self._why_not = _answer(generation)
        self._not_rehearsed = not_rehearsed

    @property
    def embedding_feature(self) -> Any:
        self._answerable("strategy.extended.tpu_hardware_feature.embedding_feature")
        return super().embedding_feature

    @property
    def num_embedding_devices_per_chip(self) -> int:
        self._answerable("strategy.extended.tpu_hardware_feature.num_embedding_devices_per_chip")
        found: int = super().num_embedding_devices_per_chip
        return found

    def _answerable(self, read: str) -> None:
        """Where the rehearsal cannot answer as the rehearsed TPU does, it answers UNSUPPORTED in its place and says so
        (once): the layer then builds TPUEmbeddingV0, which runs here, and the script goes on."""
        if self._why_not is not None and not any(what == read for what, _ in self._not_rehearsed):
            self._not_rehearsed.append((read, f"{self._why_not}; {V0}'s TensorCore lookups stood in (answered UNSUPPORTED)"))


def install(generation: str, not_rehearsed: list[tuple[str, str]], tensorcore: list[str], strategy_class: type) -> Any:
    """Put the embedding path of the rehearsed generation in place; return its `tpu_hardware_feature` for the strategy.

    `not_rehearsed` gets (what, why) for each embedding API the rehearsal cannot run,
    `tensorcore` each TPUEmbeddingV0 built (a path that runs here, in the step).
    """
    _tensorcore_lookups(strategy_class, tensorcore)
    _stop_on_the_hardware(_needs_hardware(generation), not_rehearsed)
    return _Feature(generation, not_rehearsed)


def _tensorcore_lookups(strategy_class: type, tensorcore: list[str]) -> None:
    """TPUEmbeddingV0 accepts the rehearsal's strategy as the TPUStrategy it stands for.

    Its constructor checks for TensorFlow's own TPUStrategy classes, and only there
    (tpu_embedding_v1.py); the rest is variables made in the strategy's scope and
    gathers in the step, which run here as on the TensorCores.
    """
    tpu_embedding_v1.tpu_strategy = types.SimpleNamespace(TPUStrategy=strategy_class, TPUStrategyV2=tpu_strategy.TPUStrategyV2)
    cls: Any = tpu_embedding_v1.TPUEmbeddingV0
    original_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        tensorcore.append(V0)

    cls.__init__ = __init__


def _stop_on_the_hardware(why: str, not_rehearsed: list[tuple[str, str]]) -> None:
    """TPUEmbedding is noted when built and stops at its first call that works the embedding hardware;
    TPUEmbeddingV2, which refuses any strategy but TPUStrategy's, stops when built."""
    v1: Any = tpu_embedding_v2.TPUEmbedding
    original_init = v1.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        not_rehearsed.append(("tf.tpu.experimental.embedding.TPUEmbedding", why))

    v1.__init__ = __init__
    for method in _TPU_ONLY:
        setattr(v1, method, _stopping(not_rehearsed, f"TPUEmbedding.{method}()", why))
    v2: Any = getattr(tf.tpu.experimental.embedding, "TPUEmbeddingV2", None)  # TensorFlow 2.16 and later
    if v2 is not None:
        v2.__init__ = _stopping(not_rehearsed, "tf.tpu.experimental.embedding.TPUEmbeddingV2", why)


def _stopping(not_rehearsed: list[tuple[str, str]], what: str, why: str) -> Any:
    def stop(self: Any, *args: Any, **kwargs: Any) -> None:
        _stop(not_rehearsed, what, why)

    return stop


def _stop(not_rehearsed: list[tuple[str, str]], what: str, why: str) -> None:
    not_rehearsed.append((what, why))
    raise TpuctlError(
        f"--rehearse does not rehearse TPU embeddings: {what}: {why}",
        hint="the report lists what was checked before this call; the embedding path itself needs a TPU",
        exit_code=FAILED,
    )
