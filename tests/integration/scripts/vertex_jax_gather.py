"""Plain JAX across the replicas of a Vertex-shaped job: `jax.distributed.initialize()` with no argument (its cluster from
what tpuctl's runtime read out of CLUSTER_SPEC), then one cross-process collective: every process's index, gathered."""

import jax
import numpy as np
from jax.experimental import multihost_utils

jax.distributed.initialize()
gathered = multihost_utils.process_allgather(np.array([jax.process_index()]))
print(f"process {jax.process_index()} of {jax.process_count()}: gathered {sorted(int(i) for i in np.ravel(gathered))}", flush=True)
