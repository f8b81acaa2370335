"""A plain JAX training loop with each thing a TPU refuses or pays for, one after another: float64 under
jax_enable_x64, a batch whose length changes every step (a compile per step), a jax.debug.callback inside the jitted
step, and at last a batch that does not split over the mesh's devices (JAX refuses it, here as on the TPU)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

jax.config.update("jax_enable_x64", True)

mesh = jax.make_mesh((jax.device_count(),), ("data",))
batch = NamedSharding(mesh, P("data"))


@jax.jit
def step(w, x):
    jax.debug.callback(lambda loss: None, jnp.mean(x @ w))
    return w - 0.01 * jnp.mean(x, axis=0)[:, None]


w = jnp.zeros((4, 1), dtype=jnp.float64)
for n in range(1, 6):  # n * devices rows: splits evenly, but a new shape each step
    w = step(w, jax.device_put(np.ones((n * jax.device_count(), 4)), batch))
jax.device_put(np.ones((jax.device_count() + 2, 4)), batch)  # the last, uneven batch
