"""The worker's view of its launch, read from the environment without TensorFlow."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import ClusterSpec, Task, parse_tf_config

MULTI_WORKER = contract.MULTI_WORKER
PARAMETER_SERVER = contract.PARAMETER_SERVER
REHEARSE = "rehearse"  # the strategy kind of a --rehearse worker: the rehearsal's TPUStrategy


@dataclass(frozen=True)
class WorkerEnv:
    cluster: ClusterSpec | None
    task: Task
    strategy: str
    scope: bool
    keras: str
    communication: str = "auto"  # MultiWorkerMirrored collectives
    devices: tuple[str, ...] = ()  # Mirrored: which devices, all when empty
    simulate_devices: int = 0  # split the CPU into this many logical devices first
    rehearse: str | None = None  # a TPU type rehearsed on CPU (runtime/rehearsal/)

    @property
    def is_server(self) -> bool:
        """Under parameter-server training only the chief runs the script; workers and ps serve."""
        return self.strategy == PARAMETER_SERVER and self.task.type in ("worker", "ps")

    @property
    def is_chief(self) -> bool:
        return self.cluster is None or self.cluster.is_chief(self.task)

    @property
    def num_workers(self) -> int:
        return 1 if self.cluster is None else max(1, self.cluster.num_workers)

    def strategy_kind(self, tpu_here: bool | None = None) -> str:
        """The strategy to build, decided as far as possible before TensorFlow loads.

        `auto` narrows to `tpu`, multi-worker, or (with simulated devices)
        mirrored here; on one worker without a TPU it stays `auto` and
        `strategies.build` picks by GPU count.
        """
        if self.rehearse:
            return REHEARSE
        if self.strategy != "auto":
            return self.strategy
        if tpu_present() if tpu_here is None else tpu_here:
            return "tpu"
        if self.num_workers > 1:
            return MULTI_WORKER
        if self.simulate_devices > 1:
            return "mirrored"
        return "auto"


def tpu_present(dev: Path = Path("/dev")) -> bool:
    """A TPU VM exposes its chips as /dev/accel* (v2-v4) or /dev/vfio/N (v5e and later)."""
    return any(dev.glob("accel*")) or any(p.name.isdigit() for p in dev.glob("vfio/*"))


def cluster_from_env() -> tuple[ClusterSpec | None, Task]:
    """The cluster and this worker's task: TF_CONFIG, else Vertex AI's CLUSTER_SPEC, else one worker.

    TF_CONFIG wins where both are set (Vertex AI sets both for TensorFlow): it is
    what TensorFlow itself reads. A cluster found only in CLUSTER_SPEC is written
    to TF_CONFIG, so that MultiWorkerMirroredStrategy, ParameterServerStrategy
    and the user's script (TFConfigClusterResolver) see the same cluster.
    """
    raw = os.environ.get("TF_CONFIG", "").strip()
    if raw:
        return parse_tf_config(raw)
    if os.environ.get("CLUSTER_SPEC", "").strip():
        from tpuctl.runtime import vertex_env  # only on Vertex AI: other workers never load it

        cluster, task = vertex_env.parse_cluster_spec(os.environ["CLUSTER_SPEC"].strip())
        if cluster is not None:
            os.environ["TF_CONFIG"] = cluster.tf_config_json(task)
        return cluster, task
    return None, Task("worker", 0)


@lru_cache(maxsize=1)
def current() -> WorkerEnv:
    cluster, task = cluster_from_env()
    return WorkerEnv(
        cluster=cluster,
        task=task,
        strategy=contract.strategy(os.environ),
        scope=contract.scope(os.environ),
        keras=contract.keras(os.environ),
        communication=contract.communication(os.environ),
        devices=contract.devices(os.environ),
        simulate_devices=contract.simulate_devices(os.environ),
        rehearse=contract.rehearse(os.environ),
    )
