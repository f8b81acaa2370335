"""A JAX run's cluster, in the variables Keras 3 and JAX read: what TF_CONFIG is to TensorFlow.

Read from their source (keras 3.15, jax 0.10), not guessed:
- `keras.distribution.initialize()` with no argument reads KERAS_DISTRIBUTION_JOB_ADDRESSES (every
  process's host:port, comma-separated; the first is the coordinator and their count must equal the
  number of processes), KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID
  (keras/src/distribution/distribution_lib.py `initialize`; keras/src/backend/jax/distribution_lib.py
  passes them to `jax.distributed.initialize`).
- `jax.distributed.initialize()` reads JAX_COORDINATOR_ADDRESS itself, and JAX_COORDINATOR_BIND_ADDRESS
  for where the coordinator listens (default `[::]:PORT`, every interface: a local run binds loopback
  only); the process count and id it takes from a cluster it detects (jax/_src/distributed.py,
  jax/_src/clusters/cluster.py): tpuctl's runtime adds one that reads the Keras variables above
  (tpuctl/runtime/jax_run.py), so a plain JAX script needs no argument either.
On a TPU VM slice JAX finds the hosts itself (jax/_src/clusters/cloud_tpu_cluster.py: the metadata
server's worker list): tpuctl writes none of these there and starts every host's process together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

JOB_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
COORDINATOR_BIND_ADDRESS = "JAX_COORDINATOR_BIND_ADDRESS"
BACKEND = "KERAS_BACKEND"
# Every variable a process's cluster is told in: --env may not set them (one of the two would be lost).
WRITTEN = (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID, COORDINATOR_ADDRESS, COORDINATOR_BIND_ADDRESS)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def process_env(addresses: Sequence[str], process_id: int) -> dict[str, str]:
    """Process `process_id`'s variables; process 0 is the coordinator, on the port tpuctl reserved for it."""
    coordinator = addresses[0]
    host, _, port = coordinator.rpartition(":")
    env = {
        JOB_ADDRESSES: ",".join(addresses),
        NUM_PROCESSES: str(len(addresses)),
        PROCESS_ID: str(process_id),
        COORDINATOR_ADDRESS: coordinator,
    }
    if host in LOOPBACK_HOSTS:  # JAX's default binds every interface; a local run's coordinator answers this machine only
        env[COORDINATOR_BIND_ADDRESS] = f"{host}:{port}"
    return env


def cluster_of(environ: Mapping[str, str]) -> tuple[str, int, int] | None:
    """(coordinator, processes, this process's id) as tpuctl wrote them; None where they are absent or not tpuctl's shape."""
    addresses = [a for a in environ.get(JOB_ADDRESSES, "").split(",") if a]
    count, index = environ.get(NUM_PROCESSES, ""), environ.get(PROCESS_ID, "")
    if not addresses or not (count.isascii() and count.isdigit() and index.isascii() and index.isdigit()):
        return None
    if len(count) > 6 or len(index) > 6 or int(count) != len(addresses) or not int(index) < int(count):
        return None
    return addresses[0], int(count), int(index)
