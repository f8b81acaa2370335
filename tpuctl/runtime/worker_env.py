"""The worker's view of its launch, read from the environment without TensorFlow."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from functools import lru_cache

from tpuctl.cluster import ClusterSpec, Task, parse_tf_config

MULTI_WORKER = "multi-worker-mirrored"


@dataclass(frozen=True)
class WorkerEnv:
    cluster: ClusterSpec | None
    task: Task
    strategy: str
    scope: bool
    keras: str

    @property
    def is_chief(self) -> bool:
        return self.cluster is None or self.cluster.is_chief(self.task)

    @property
    def num_workers(self) -> int:
        return 1 if self.cluster is None else max(1, self.cluster.num_workers)

    def strategy_kind(self) -> str:
        """The strategy to build, decided as far as possible before TensorFlow loads.

        `auto` narrows to `tpu` or multi-worker here; on one worker without a
        TPU it stays `auto` and `strategies.build` picks by GPU count.
        """
        if self.strategy != "auto":
            return self.strategy
        if tpu_present():
            return "tpu"
        if self.num_workers > 1:
            return MULTI_WORKER
        return "auto"


def tpu_present() -> bool:
    """A TPU VM exposes its chips as /dev/accel* (v2-v4) or /dev/vfio/* (v5e and later)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


@lru_cache(maxsize=1)
def current() -> WorkerEnv:
    raw = os.environ.get("TF_CONFIG", "").strip()
    cluster, task = parse_tf_config(raw) if raw else (None, Task("worker", 0))
    return WorkerEnv(
        cluster=cluster,
        task=task,
        strategy=os.environ.get("TPUCTL_STRATEGY", "auto"),
        scope=os.environ.get("TPUCTL_SCOPE", "1") != "0",
        keras=os.environ.get("TPUCTL_KERAS", "auto"),
    )
