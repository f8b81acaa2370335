"""Build the distribution strategy a worker trains under. Imports TensorFlow."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlparse

import tensorflow as tf

from tpuctl.errors import FAILED, TpuctlError

# How long a grpc:// TPU address may take to accept a TCP connection. TF itself
# waits forever on an unreachable one (FIELD-NOTES), so we look first.
TPU_CONNECT_TIMEOUT_S = 10.0


def build(kind: str) -> Any:
    if kind == "multi-worker-mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy()
    if kind == "one-device":
        device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if kind == "tpu":
        return _tpu_strategy(os.environ.get("TPU_NAME", "local"))
    if kind == "auto":
        if len(tf.config.list_logical_devices("GPU")) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    raise TpuctlError(f"unknown strategy {kind!r}")


def _tpu_strategy(name: str) -> Any:
    if name.startswith("grpc://"):
        _check_reachable(name)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (tf.errors.NotFoundError, tf.errors.UnavailableError) as err:
        raise TpuctlError(
            f"no TPU found for TPUClusterResolver(tpu={name!r}): {err.message.splitlines()[0]}",
            hint="run on a TPU VM, or set TPU_NAME to the TPU's name or grpc:// address",
            exit_code=FAILED,
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def _check_reachable(address: str) -> None:
    parsed = urlparse(address)
    try:
        with socket.create_connection((parsed.hostname or "", parsed.port or 8470), timeout=TPU_CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise TpuctlError(
            f"TPU at {address} is not reachable: {err}", hint="is the TPU READY and its port open?", exit_code=FAILED
        ) from None


# Internal class names users never typed, by the names they did.
_PUBLIC_NAMES = {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy", "_DefaultDistributionStrategy": "default strategy"}


def describe(strategy: Any) -> str:
    """One line: which strategy, how many replicas, on which devices."""
    if strategy is tf.distribute.get_strategy():
        # The default strategy places ops itself and has no worker_devices of its own.
        devices = ", ".join(d.name for d in tf.config.list_logical_devices() if d.device_type != "TPU_SYSTEM")
    else:
        devices = ", ".join(strategy.extended.worker_devices)
    name = type(strategy).__name__
    return f"{_PUBLIC_NAMES.get(name, name)}, {strategy.num_replicas_in_sync} replica(s) in sync, devices: {devices}"
