"""A JAX run's worker on Vertex AI: its cluster, from Vertex's CLUSTER_SPEC, in the variables Keras and JAX read.

Vertex tells every replica of a CustomJob its place in CLUSTER_SPEC (worker-pool names, and a TF_CONFIG
for TensorFlow); `keras.distribution.initialize()` reads KERAS_DISTRIBUTION_*, and tpuctl's cluster for a
plain `jax.distributed.initialize()` reads the same (tpuctl/runtime/jax_run.py). The translation is
tpuctl/runtime/vertex_env.py's `jax_environ`, imported only where CLUSTER_SPEC is set: a worker anywhere
else pays nothing for it (that module and its parsers cost some 45 ms to import).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import MutableMapping

CLUSTER_SPEC = "CLUSTER_SPEC"


def adopt(environ: MutableMapping[str, str]) -> None:
    """On Vertex AI (CLUSTER_SPEC set), write this replica's cluster into `environ`; elsewhere leave it alone."""
    raw = environ.get(CLUSTER_SPEC, "").strip()
    if not raw:
        return
    from tpuctl.runtime import vertex_env

    environ.update(vertex_env.jax_environ(raw))
