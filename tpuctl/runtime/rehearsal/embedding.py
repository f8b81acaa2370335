"""TPU embeddings under `--rehearse`: what the rehearsal can say about them, and where it stops.

A TPU runs embedding lookups and their updates on its embedding hardware, outside
the XLA program of the step (tensorflow/python/tpu/tpu_embedding_v2.py: `enqueue`
sends the host's sparse features to it, `dequeue` receives activations inside the
step, `apply_gradients` sends gradients back). A CPU has no such hardware, and
the rehearsal has no stand-in for it:

- TensorFlow's TPUEmbedding built under the rehearsal's strategy is in its CPU
  mode (it checks for the real TPUStrategy class), where enqueue, dequeue and
  apply_gradients raise TensorFlow's RuntimeError "... not created under a
  TPUStrategy". The rehearsal stops there instead, in one line that says why.
- TPUEstimator given an EmbeddingConfigSpec runs its embedding columns on the
  CPU (use_tpu=False, as every TPUEstimator rehearsal does): sparse lookups and
  sparse optimizer updates, whose ops have no XLA kernel. On a TPU those ops are
  not in the XLA program, so the op check leaves them out and says so.
- Layers that read `strategy.extended.tpu_hardware_feature` to pick their path
  (tensorflow-recommenders' and keras-rs' TPU embedding layers) read that this
  machine has no embedding accelerator: they take their path for a TPU without one.
"""

from __future__ import annotations

from typing import Any

from tensorflow.core.protobuf.tpu import topology_pb2
from tensorflow.python.tpu import tpu_embedding_v2, tpu_hardware_feature

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
_TPU_ONLY = ("enqueue", "dequeue", "apply_gradients")


def hardware_feature() -> Any:
    """What the rehearsal's strategy answers for `extended.tpu_hardware_feature`: no embedding accelerator here."""
    proto = topology_pb2.TPUHardwareFeature(embedding_feature=topology_pb2.TPUHardwareFeature.EmbeddingFeature.UNSUPPORTED)
    return tpu_hardware_feature.HardwareFeature(proto)


def install(seen: list[str]) -> None:
    """Note each TPUEmbedding the script builds in `seen`; stop at the first call that needs the embedding hardware."""
    cls: Any = tpu_embedding_v2.TPUEmbedding
    original_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        seen.append("tf.tpu.experimental.embedding.TPUEmbedding")

    cls.__init__ = __init__
    for method in _TPU_ONLY:
        setattr(cls, method, _stop(method))


def _stop(method: str) -> Any:
    def stop(self: Any, *args: Any, **kwargs: Any) -> None:
        raise TpuctlError(
            f"--rehearse does not rehearse TPU embeddings: TPUEmbedding.{method}() works the TPU's embedding hardware, "
            "which this CPU rehearsal has no stand-in for",
            hint="the report lists what was checked before this call; the embedding path itself needs a TPU",
            exit_code=FAILED,
        )

    return stop
