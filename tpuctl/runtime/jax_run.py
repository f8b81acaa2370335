"""A JAX run's worker: the script alone, told its cluster, and checked to have joined it.

Nothing of TensorFlow, Keras or JAX is imported here before the script: the
script's own `os.environ["KERAS_BACKEND"] = "jax"` must be read by the Keras it
imports (FIELD-NOTES, 2026-12-07: a TensorFlow imported first settles Keras on
TensorFlow). What tpuctl adds happens as the script's own imports load
(after_import.py):

- the cluster: `keras.distribution.initialize()` reads the KERAS_DISTRIBUTION_*
  variables the plan wrote (tpuctl/cluster/jax_cluster.py); a plain
  `jax.distributed.initialize()` reads only JAX_COORDINATOR_ADDRESS and detects
  the rest from the clusters JAX knows (jax/_src/clusters/cluster.py: Slurm,
  Open MPI, Cloud TPU, Kubernetes...), so one more is put first in JAX's list,
  answering from those same variables, present only where tpuctl wrote them;
- the check: JAX's `initialize` is watched, and a process that ends without
  having joined the cluster it was launched into (a script that never called
  it: each process trained alone on its own shard) fails instead of counting
  as finished.
"""

from __future__ import annotations

import os
import sys

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime import after_import

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

FORCE_DEVICES = "--xla_force_host_platform_device_count"
ALONE = (
    "{name} of {count} ended without joining the others: the script never called keras.distribution.initialize() "
    "(or jax.distributed.initialize()), so each process trained alone; call it before building the model (docs/jax.md)"
)
OTHER_COUNT = "{name} joined a cluster of {joined} process(es), not the {count} tpuctl launched (docs/jax.md)"

_joined: list[int] = []  # the process count of each initialize() that returned


def simulate_devices(count: int) -> None:
    """--simulate-devices N: N CPU devices in this process, as XLA_FLAGS tells XLA's host platform (kept: the user's other flags)."""
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(FORCE_DEVICES + "=")]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{FORCE_DEVICES}={count}"])


def _watch_initialize(module: ModuleType) -> None:
    """jax._src.distributed, the moment it loads: before jax.distributed binds its `initialize` by name."""
    original = getattr(module, "initialize", None)
    if original is None or not callable(original):
        return

    def initialize(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        state = getattr(module, "global_state", None)
        count = getattr(state, "num_processes", None)
        _joined.append(count if isinstance(count, int) else -1)
        return result

    initialize.__wrapped__ = original  # type: ignore[attr-defined]
    initialize.__doc__ = original.__doc__
    initialize.__name__ = getattr(original, "__name__", "initialize")
    setattr(module, "initialize", initialize)  # noqa: B010 - the module is JAX's, typed as any module


def _add_cluster(module: ModuleType) -> None:
    """jax._src.clusters, the moment it loads: tpuctl's variables first among the clusters JAX detects."""
    base = getattr(module, "ClusterEnv", None)
    found = jax_cluster.cluster_of(os.environ)
    if base is None or found is None:
        return
    coordinator, count, index = found

    class TpuctlCluster(base):  # type: ignore[misc, valid-type]
        """The cluster tpuctl launched, from KERAS_DISTRIBUTION_* (the same values Keras reads)."""

        opt_in_only_method = False
        name = "tpuctl"

        @classmethod
        def is_env_present(cls) -> bool:
            return jax_cluster.cluster_of(os.environ) is not None

        @classmethod
        def get_coordinator_address(cls, *args: Any, **kwargs: Any) -> str:
            return coordinator

        @classmethod
        def get_process_count(cls) -> int:
            return count

        @classmethod
        def get_process_id(cls) -> int:
            return index

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return None  # every device of this process stays visible (a GPU split is CUDA_VISIBLE_DEVICES')

    kinds = getattr(base, "_cluster_types", None)
    if isinstance(kinds, list) and TpuctlCluster in kinds:  # __init_subclass__ appended it last; JAX asks in order
        kinds.remove(TpuctlCluster)
        kinds.insert(0, TpuctlCluster)


def prepare() -> None:
    """Before the script: devices to simulate, and the hooks on JAX's modules (none of which is imported here)."""
    simulate = contract.simulate_devices(os.environ)
    if simulate > 1:
        simulate_devices(simulate)
    after_import.when_imported("jax._src.distributed", _watch_initialize)
    after_import.when_imported("jax._src.clusters", _add_cluster)


def not_joined(name: str, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """Why this process's run is a failure though the script returned: it did not form the cluster it was launched as."""
    found = jax_cluster.cluster_of(environ)
    count = found[1] if found is not None else int(environ.get(contract.NUM_WORKERS, "1") or "1")
    if count <= 1:
        return None
    if not _joined:
        return ALONE.format(name=name, count=count)
    if _joined[-1] != count:
        return OTHER_COUNT.format(name=name, joined=_joined[-1], count=count)
    return None


def run(channel: int | None, script: str, args: list[str], run_script: Callable[[str, list[str]], None], say: Callable[[str], None]) -> None:
    prepare()
    rehearsed = contract.rehearse(os.environ)
    if rehearsed:  # --rehearse: what a TPU would refuse, watched as the script loads JAX (runtime/jax_rehearsal/)
        from tpuctl.runtime import jax_rehearsal

        jax_rehearsal.install(rehearsed, script)
    if channel is not None:
        os.write(channel, b"ready\n")
    run_script(script, args)
    name = f"process {os.environ.get(contract.WORKER_INDEX, '0')}"
    why = not_joined(name, os.environ)
    if why is not None:
        say(f"error: {why}")
        sys.exit(1)
