"""Plain JAX over every process: `jax.distributed.initialize()` with no argument, a global array from each process's
own rows, a shard_map'd sum over the mesh's data axis (each device's partial sum, then psum)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

jax.distributed.initialize()
mesh = Mesh(np.array(jax.devices()), ("data",))
rows = np.arange(4, dtype=np.float32) + 100 * jax.process_index()
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("data")), rows)


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=PartitionSpec("data"), out_specs=PartitionSpec())
def total(block):
    return jax.lax.psum(jnp.sum(block), "data")


print(f"process {jax.process_index()} of {jax.process_count()}: {jax.device_count()} devices, total {float(total(batch)):g}", flush=True)
