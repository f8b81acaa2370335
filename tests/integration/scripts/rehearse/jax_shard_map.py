"""Plain JAX data parallelism with shard_map, as JAX's "Introduction to parallel programming" writes it
(https://docs.jax.dev/en/latest/sharded-computation.html): a mesh over every device, the batch split on its first
axis, a jitted step whose gradients are averaged with psum. Clean: float32, fixed shapes, no host callbacks."""

import json
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((jax.device_count(),), ("data",))
batch = NamedSharding(mesh, P("data"))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
def step(w, x, y):
    grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    grad = jax.lax.pmean(grad, "data")
    return w - 0.1 * grad


rng = np.random.default_rng(0)
w = jnp.zeros((4, 1))
for _ in range(5):
    x = jax.device_put(rng.random((32, 4), dtype=np.float32), batch)
    y = jax.device_put(rng.random((32, 1), dtype=np.float32), batch)
    w = step(w, x, y)
print(json.dumps({"script": "jax_shard_map", "devices": jax.device_count(), "tensorflow": "tensorflow" in sys.modules}))
