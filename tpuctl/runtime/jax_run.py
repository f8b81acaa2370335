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
  answering from those same variables, present only where tpuctl wrote them
  (registering a cluster type is how JAX's maintainers answered the request for
  JAX_NUM_PROCESSES / JAX_PROCESS_ID variables: jax-ml/jax#11707);
- the check: JAX's `initialize` is watched, and a process that ends without
  having joined the cluster it was launched into (a script that never called
  it: each process trained alone on its own shard) fails instead of counting
  as finished. Entering and leaving `initialize` is told to the launcher, which
  names a process that never arrives (tpuctl/launch/process/joins.py).
"""

from __future__ import annotations

import os
import sys

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime import after_import, vertex_jax

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
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


def _tell(channel: int | None, word: bytes) -> None:
    if channel is not None:
        try:  # noqa: SIM105 - contextlib would be one more import before every script
            os.write(channel, word + b"\n")
        except OSError:
            pass  # the launcher is gone: the reaper ends this process


def _watch_initialize(module: ModuleType, channel: int | None) -> None:
    """jax._src.distributed, the moment it loads: before jax.distributed binds its `initialize` by name.
    The launcher hears when the script enters it and when it returns (tpuctl/launch/process/joins.py)."""
    original = getattr(module, "initialize", None)
    if original is None or not callable(original):
        return

    def initialize(*args: Any, **kwargs: Any) -> Any:
        _tell(channel, b"joining")
        result = original(*args, **kwargs)
        _tell(channel, b"joined")
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


def prepare(channel: int | None) -> None:
    """Before the script: devices to simulate, and the hooks on JAX's modules (none of which is imported here)."""
    vertex_jax.adopt(os.environ)  # on Vertex AI the cluster comes as CLUSTER_SPEC: first, as everything below reads it
    simulate = contract.simulate_devices(os.environ)
    if simulate > 1:
        simulate_devices(simulate)
    after_import.when_imported("jax._src.distributed", lambda module: _watch_initialize(module, channel))
    after_import.when_imported("jax._src.clusters", _add_cluster)


def not_joined(name: str, environ: Mapping[str, str]) -> str | None:
    """Why this process's run is a failure though the script returned: it did not form the cluster it was launched as."""
    found = jax_cluster.cluster_of(environ)
    count = found[1] if found is not None else contract.num_workers(environ)
    if count <= 1:
        return None
    joined = _joined[-1] if _joined else _formed_by_backend()
    if joined is None:
        return ALONE.format(name=name, count=count)
    if joined != count:
        return OTHER_COUNT.format(name=name, joined=joined, count=count)
    return None


def _formed_by_backend() -> int | None:
    """The process count of a cluster formed without initialize(): on a TPU slice the TPU backend joins the hosts
    itself (Cloud TPU's "Run JAX code on TPU slices" runs pmap over every host's chips without the call). Asked only
    of a backend the script already started (jax._src.xla_bridge's `_backends`); one process is no cluster."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    if not getattr(bridge, "_backends", None):
        return None
    try:
        count = bridge.process_count()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a backend that cannot say: no cluster seen
        return None
    return count if isinstance(count, int) and count > 1 else None


def leave(code: object) -> None:
    """End a process whose script failed, at once where it joined a cluster: Python's exit would run JAX's shutdown,
    which waits (shutdown_timeout_seconds, 300 s by default: jax/_src/distributed.py) at a barrier for peers that are
    blocked in a collective with this process, and the launch would learn of the failure only then, as a SIGABRT of
    JAX's own. What the script printed is flushed first; its atexit handlers do not run (the run has failed)."""
    status = 0 if code is None else code if isinstance(code, int) else 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
    distributed = sys.modules.get("jax._src.distributed")
    if status and getattr(getattr(distributed, "global_state", None), "client", None) is not None:
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 - contextlib would be one more import before every script
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed or broken stream: nothing more to save
        os._exit(status)
    sys.exit(status)


def run(channel: int | None, script: str, args: list[str], run_script: Callable[[str, list[str]], None], say: Callable[[str], None]) -> None:
    prepare(channel)
    rehearsed = contract.rehearse(os.environ)
    if rehearsed:  # --rehearse: what a TPU would refuse, watched as the script loads JAX (runtime/jax_rehearsal/)
        from tpuctl.runtime.jax_rehearsal import watch

        watch.install(rehearsed, script)
    if channel is not None:
        os.write(channel, b"ready\n")
    run_script(script, args)
    name = f"process {os.environ.get(contract.WORKER_INDEX, '0')}"
    why = not_joined(name, os.environ)
    if why is not None:
        say(f"error: {why}")
        sys.exit(1)
