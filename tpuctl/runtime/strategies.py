"""Build the distribution strategy a worker trains under. Imports TensorFlow."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import script_scan, tpu_connect
from tpuctl.runtime.worker_env import MULTI_WORKER, PARAMETER_SERVER, REHEARSE, WorkerEnv

_COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}


def simulate_devices(count: int) -> None:
    """Split the CPU into `count` logical devices; must run before TensorFlow initialises.

    MirroredStrategy then has `count` replicas: a laptop rehearsal of an
    N-core TPU's batch split (FIELD-NOTES: "Virtual devices").
    """
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * count)
    _untuned_replica_pipelines()


def _untuned_replica_pipelines() -> None:
    """Turn tf.data autotuning off in the small pipeline MirroredStrategy adds per replica, which has nothing to tune.

    Each replica is fed by its own pipeline (multi_device_iterator_ops._create_device_dataset:
    a generator over the script's pipeline and a fixed-size prefetch). With autotuning on,
    TensorFlow gives each one a model thread (root_dataset.cc EnsureModelThreadStarted) whose
    sleep between optimisations doubles (model.cc OptimizeLoop: 10 ms, 20 ms, ... 20 s seen),
    and destroying the iterator waited that sleep out (TF_CPP_VMODULE=model=2 shows the wait end
    as the teardown ends): measured with 8 simulated CPUs in plain TensorFlow 2.21, each new
    epoch's iterators (a Keras fit makes them every epoch) idled 8-38 s at teardown, and
    0.3-0.6 s with these pipelines untuned. The script's own pipeline stays autotuned, as on a
    TPU host. A TensorFlow without that function keeps its own behaviour.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as replica_feed

    make = getattr(replica_feed, "_create_device_dataset", None)
    if make is None or getattr(make, "tpuctl_untuned", False):
        return
    options = tf.data.Options()
    options.autotune.enabled = False

    def untuned(*args: Any, **kwargs: Any) -> Any:
        return make(*args, **kwargs).with_options(options)

    untuned.tpuctl_untuned = True  # type: ignore[attr-defined]
    replica_feed._create_device_dataset = untuned


def build(kind: str, env: WorkerEnv, tpu: Any = None) -> Any:
    """The strategy of `kind`; `tpu`: the TPUClusterResolver already connected (tpu_connect.connect), if any."""
    if kind == MULTI_WORKER:
        options = tf.distribute.experimental.CommunicationOptions(implementation=_COMMUNICATION[env.communication])
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(env.devices) or None)
    if kind == "one-device":
        device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if kind == "tpu":
        resolver = tpu or tpu_connect.connect(tpu_connect.target_from_env(), tpu_connect.timeout_from_env())
        return tf.distribute.TPUStrategy(resolver)
    if kind == REHEARSE:
        from tpuctl.runtime import rehearsal

        assert env.rehearse is not None
        return rehearsal.install(env.rehearse, os.environ.get(contract.REHEARSAL_REPORT), simulate_devices)
    if kind == PARAMETER_SERVER:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    if kind == "auto":
        if len(tf.config.list_logical_devices("GPU")) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    raise TpuctlError(f"unknown strategy {kind!r}")


def serve(env: WorkerEnv) -> Any:
    """A parameter-server cluster's worker or ps task: a gRPC server the chief drives."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.Server(
        resolver.cluster_spec(), job_name=env.task.type, task_index=env.task.index, protocol="grpc", start=True
    )


# Internal class names users never typed, by the names they did.
_PUBLIC_NAMES = {
    "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
    "_CollectiveAllReduceStrategyExperimental": "MultiWorkerMirroredStrategy",
    "_DefaultDistributionStrategy": "default strategy",
    "_DefaultDistributionStrategyV1": "default strategy",
    "ParameterServerStrategyV2": "ParameterServerStrategy",
}


def public_name(name: str) -> str:
    """The name a script constructs a strategy class by: MultiWorkerMirroredStrategy, not CollectiveAllReduceStrategy."""
    return _PUBLIC_NAMES.get(name) or script_scan.public_name(name)


def describe(strategy: Any) -> str:
    """One line: which strategy, how many replicas, on which devices."""
    if strategy is tf.distribute.get_strategy():
        # The default strategy places ops itself and has no worker_devices of its own.
        devices = ", ".join(d.name for d in tf.config.list_logical_devices() if d.device_type != "TPU_SYSTEM")
    else:
        listed = list(getattr(strategy.extended, "worker_devices", ()))
        # A rehearsal of a large slice has hundreds: the first and the last say which.
        shown = listed if len(listed) <= 4 else [listed[0], "...", f"{listed[-1]} ({len(listed)} devices)"]
        devices = ", ".join(shown) or "the cluster's workers"
    return f"{public_name(type(strategy).__name__)}, {strategy.num_replicas_in_sync} replica(s) in sync, devices: {devices}"
