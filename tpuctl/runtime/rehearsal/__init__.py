"""`--rehearse ACCELERATOR`: a TPU script, unchanged, on this machine's CPU with the TPU's replica count.

TPU code fails on its first line without a TPU, or hangs (FIELD-NOTES: a grpc://
address nobody answers). During a rehearsal TensorFlow's TPU entry points are
stand-ins that answer at once: TPUClusterResolver (any address form, also
`.connect()`), experimental_connect_to_cluster/host, initialize_tpu_system and
shutdown_tpu_system, and TPUStrategy itself, which is a MirroredStrategy over as
many virtual CPUs as the TPU has replicas (tpuctl.tpu.accelerators.replicas), its
`extended` answering the host counts and `tpu_hardware_feature` as TPUStrategy's
does on the rehearsed type of TPU (embedding.py). So the
batch split, per-replica batches, steps_per_execution, dataset sharding and
checkpoints run as they would on the TPU, and what a TPU would refuse is
recorded on the way (tpuctl/runtime/rehearsal/checks.py) and written as JSON for
the launcher's report when the script ends.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.autograph.core import ag_ctx
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.distribute.cluster_resolver import cluster_resolver as resolver_lib

from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime.rehearsal import checks as rehearsal_checks
from tpuctl.runtime.rehearsal import embedding
from tpuctl.runtime.rehearsal import estimator as rehearsal_estimator
from tpuctl.tpu import accelerators

# The shape of tf.tpu.experimental.TPUSystemMetadata, which scripts read for core counts.
_Metadata = namedtuple("_Metadata", ["num_cores", "num_hosts", "num_of_cores_per_host", "topology", "devices"])
_ADDRESS = "rehearsal:8470"  # what the stand-in resolver says it reached; never dialled
SAMPLE_EVERY_S = 0.05


class Rehearsal:
    """One rehearsal: the accelerator it stands in for, the strategy, and what was observed."""

    def __init__(self, accelerator: str, report_path: str | None) -> None:
        self.shape = accelerators.shape_of(accelerator)
        self.replicas = accelerators.replicas(self.shape)
        self.report_path = report_path
        self.checks = rehearsal_checks.Checks(self.replicas)
        self.strategy: Any = None
        self.hardware_feature: Any = None  # the rehearsed TPU's embedding hardware, as TPUStrategy's extended says it
        self.estimator = rehearsal_estimator.install(self.checks, self.replicas, self.shape.hosts)
        self._samples: list[tuple[float, int]] = []

    # --- the report -------------------------------------------------------------------------

    def sample_steps(self) -> None:
        """The train-step counter, now and then: steps run and seconds per step, without touching the step itself."""
        while True:
            time.sleep(SAMPLE_EVERY_S)
            self._sample()

    def _sample(self) -> None:
        counter = getattr(self.strategy, "tpuctl_steps", None)
        if counter is None:
            return
        try:
            # Every replica counts each step it runs, and every replica runs every step: the first one's count is the
            # run's. One read per sample, not one per replica (8 to 256 eager reads, 20 times a second, for the whole run).
            count = int(counter.values[0].numpy())
        except Exception:  # noqa: BLE001 - TensorFlow shutting down under us: keep the last sample
            return
        if not self._samples or count != self._samples[-1][1]:
            self._samples.append((time.monotonic(), count))

    def steps(self) -> tuple[int, float | None]:
        """Train steps run, and CPU seconds per step between the first and the last observed step.

        A TPUEstimator's steps are counted by a session hook, the strategy's inside its
        step: a script may run both (TensorFlow's TPUEstimator migration guide trains
        with TPUEstimator, then with Keras under TPUStrategy), and the run's steps are
        both counts; their seconds per step differ, so none is given for the two together.
        """
        strategy_steps, per_step = self._strategy_steps()
        if not self.estimator.steps:
            return strategy_steps, per_step
        if not strategy_steps:
            return self.estimator.steps, self.estimator.seconds_per_step()
        return self.estimator.steps + strategy_steps, None

    def _strategy_steps(self) -> tuple[int, float | None]:
        self._sample()
        if not self._samples:
            return 0, None
        moving = [s for s in self._samples if s[1] > 0]
        total = self._samples[-1][1]
        if len(moving) < 2:
            return total, None
        (t0, c0), (t1, c1) = moving[0], moving[-1]
        return total, (t1 - t0) / (c1 - c0)

    def report(self) -> dict[str, Any]:
        steps, per_step = self.steps()
        shape = self.shape
        return {
            "accelerator": shape.accelerator_type,
            "tensorflow": tf.__version__,
            "keras": _keras_version(),
            "replicas": self.replicas,
            "hosts": shape.hosts,
            "rehearsed_as": _rehearsed_as(shape.hosts),
            "global_batch": self.checks.global_batch,
            "per_replica_batch": self.checks.per_replica_batch,
            "steps": steps,
            "seconds_per_step": None if per_step is None else round(per_step, 4),
            "checks": self.checks.verdicts(multi_host=shape.hosts > 1, model_dir=contract.model_dir(os.environ))
            + self.estimator.verdicts(),
        }

    def write_report(self) -> None:
        if not self.report_path:
            return
        try:
            report = self.report()
        except Exception as err:  # noqa: BLE001 - at exit, a fault in tpuctl's own checks: say so in one line, not a traceback
            print(f"tpuctl: warning: the rehearsal report could not be made ({type(err).__name__}: {err}); no checks to report", flush=True)
            return
        try:
            with open(self.report_path, "w", encoding="utf-8") as out:
                json.dump(report, out)
        except OSError as err:
            print(f"tpuctl: warning: cannot write the rehearsal report {self.report_path}: {err.strerror or err}", flush=True)


def _keras_version() -> str | None:
    """The version of the Keras that tf.keras was in this run (Keras 3, tf-keras, or TensorFlow 2.15's own Keras 2);
    None where the script never loaded one (asking would import it now, seconds at exit)."""
    if "keras" not in sys.modules and "tf_keras" not in sys.modules:
        return None
    try:
        version = getattr(tf.keras, "__version__", None)  # Keras 3 and tf-keras say it
    except Exception:  # noqa: BLE001 - a lazy loader failing at exit: the report goes on without it
        return None
    if version is None:  # TensorFlow 2.15's tf.keras is keras.api._v2.keras, which has none: its package's
        version = getattr(sys.modules.get("keras"), "__version__", None)
    return None if version is None else str(version)


def _rehearsed_as(hosts: int) -> str:
    if hosts == 1:
        return "one process, one virtual CPU per replica"
    return (
        f"one process, one virtual CPU per replica, standing in for all {hosts} hosts: "
        "per-host input pipelines and collectives between hosts are not rehearsed"
    )


def install(accelerator: str, report_path: str | None, simulate_devices: Callable[[int], None]) -> Any:
    """Split the CPU, put the TPU stand-ins in place, and return the rehearsal's TPUStrategy; before TensorFlow initialises.

    `simulate_devices` splits the CPU (strategies.py's, passed in by strategies.build, which imports this module)."""
    rehearsal = Rehearsal(accelerator, report_path)
    # Colab-era scripts read the TPU's address from here, unguarded: 'grpc://' + os.environ['COLAB_TPU_ADDR'].
    os.environ.setdefault("COLAB_TPU_ADDR", _ADDRESS)
    simulate_devices(rehearsal.replicas)
    rehearsal.checks.xla_available = rehearsal_checks.register_xla_kernels()
    strategy_class = _strategy_class(rehearsal)
    rehearsal.hardware_feature = embedding.install(
        rehearsal.shape.generation, rehearsal.checks.embeddings, rehearsal.checks.tensorcore_embeddings, strategy_class
    )
    resolver_class = _resolver_class(rehearsal)
    _patch(strategy_class, resolver_class, rehearsal)
    rehearsal.strategy = strategy_class()
    _one_step_per_execution_in_keras3(rehearsal.checks)
    atexit.register(rehearsal.write_report)
    threading.Thread(target=rehearsal.sample_steps, name="tpuctl-rehearsal-steps", daemon=True).start()
    return rehearsal.strategy


def _resolver_class(rehearsal: Rehearsal) -> type:
    replicas, shape = rehearsal.replicas, rehearsal.shape

    class TPUClusterResolver(resolver_lib.ClusterResolver):  # type: ignore[misc]
        """Takes every argument TensorFlow's does (a name, `local`, grpc://, none) and reaches nothing."""

        def __init__(self, tpu: Any = None, zone: Any = None, project: Any = None, job_name: str = "worker", **_: Any) -> None:
            self.tpu = tpu
            self.task_type = job_name
            self.task_id = 0
            self.rpc_layer = "grpc"

        @classmethod
        def connect(cls, tpu: Any = None, zone: Any = None, project: Any = None) -> TPUClusterResolver:
            return cls(tpu, zone, project)

        def master(self, task_type: Any = None, task_id: Any = None, rpc_layer: Any = None) -> str:
            return f"grpc://{_ADDRESS}"

        def get_master(self) -> str:
            return self.master()

        def cluster_spec(self) -> tf.train.ClusterSpec:
            return tf.train.ClusterSpec({"worker": [_ADDRESS] * shape.hosts})

        def num_accelerators(self, task_type: Any = None, task_id: Any = None, config_proto: Any = None) -> dict[str, int]:
            return {"TPU": replicas // shape.hosts}

        def get_tpu_system_metadata(self) -> Any:
            return _metadata(rehearsal)

        def get_job_name(self) -> str:
            return self.task_type

    return TPUClusterResolver


def _metadata(rehearsal: Rehearsal) -> Any:
    devices = tf.config.list_logical_devices("CPU")[: rehearsal.replicas]
    hosts = rehearsal.shape.hosts
    return _Metadata(rehearsal.replicas, hosts, rehearsal.replicas // hosts, None, devices)


def _strategy_class(rehearsal: Rehearsal) -> type:
    replicas, checks = rehearsal.replicas, rehearsal.checks

    class TPUStrategy(tf.distribute.MirroredStrategy):  # type: ignore[misc]
        """MirroredStrategy over the virtual CPUs, named and shaped as TPUStrategy for the script and Keras.

        Keras reads the class name (its TPU reductions); the extended object gains the
        host counts TPUStrategy's has.
        """

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            # One per process, as a TPU can be initialised once: the script's TPUStrategy(resolver) is the runtime's.
            return rehearsal.strategy if rehearsal.strategy is not None else super().__new__(cls)

        def __init__(self, tpu_cluster_resolver: Any = None, experimental_device_assignment: Any = None, **_: Any) -> None:
            if self is rehearsal.strategy:
                return
            super().__init__(devices=[f"/cpu:{i}" for i in range(replicas)])
            self.extended.num_hosts = 1
            self.extended.num_replicas_per_host = replicas
            self.extended.tpu_hardware_feature = rehearsal.hardware_feature
            with self.scope():
                # One count per replica per train step (the sampler reads the first), never synchronised during the step.
                self.tpuctl_steps = tf.Variable(
                    0,
                    dtype=tf.int64,
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM,
                    name="tpuctl_rehearsal_steps",
                )

        def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
            checks.dataset(dataset, per_replica=False)
            return super().experimental_distribute_dataset(dataset, options)

        def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
            def each_pipeline(context: Any) -> Any:
                dataset = dataset_fn(context)
                checks.dataset(dataset, per_replica=True)
                return dataset

            return super().distribute_datasets_from_function(each_pipeline, options)

        def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
            converted = autograph.tf_convert(fn, ag_ctx.control_status_ctx())
            training = rehearsal_checks.is_train_step(fn)
            counter = self.tpuctl_steps
            eager = tf.executing_eagerly()
            checks.run_called(fn, eager, options)

            @rehearsal_checks.not_converted
            def replica_step(*args: Any, **kwargs: Any) -> Any:
                if training:
                    counter.assign_add(1)
                if eager:
                    return converted(*args, **kwargs)
                return checks.step_ops(fn, lambda: converted(*args, **kwargs))

            return super().run(replica_step, args, kwargs, options)

        def reduce(self, reduce_op: Any, value: Any, axis: Any) -> Any:
            if axis is None:  # with an axis, each replica's values are summed along it first
                checks.reduced(value)
            return super().reduce(reduce_op, value, axis)

    TPUStrategy.__qualname__ = "TPUStrategy"
    return TPUStrategy


def _patch(strategy_class: type, resolver_class: type, rehearsal: Rehearsal) -> None:
    """Put the stand-ins where scripts find TensorFlow's TPU entry points."""
    for module in (tf.distribute, getattr(tf.compat.v2, "distribute", tf.distribute)):
        module.TPUStrategy = strategy_class
        module.experimental.TPUStrategy = strategy_class
        module.cluster_resolver.TPUClusterResolver = resolver_class
    # tf.compat.v1's is another module: TPUEstimator code (and the TPUEstimator guide) find the resolver there.
    tf.compat.v1.distribute.cluster_resolver.TPUClusterResolver = resolver_class

    def reach(*_: Any, **__: Any) -> None:
        return None

    def initialize(*_: Any, **__: Any) -> Any:
        return _metadata(rehearsal)

    tf.config.experimental_connect_to_cluster = reach
    tf.config.experimental_connect_to_host = reach
    tf.tpu.experimental.initialize_tpu_system = initialize
    tf.tpu.experimental.shutdown_tpu_system = reach
    listed = tf.config.list_logical_devices

    def list_logical_devices(device_type: str | None = None) -> list[Any]:
        # "TPU" devices are the rehearsal's virtual CPUs: scripts count them (`len(...)`) to size batches.
        found: list[Any] = listed("CPU")[: rehearsal.replicas] if device_type == "TPU" else listed(device_type)
        return found

    tf.config.list_logical_devices = list_logical_devices
    tf.compat.v1.config.list_logical_devices = list_logical_devices


def _one_step_per_execution_in_keras3(checks: rehearsal_checks.Checks) -> None:
    """Keras 3 loops steps_per_execution steps in a tf.cond around strategy.run, which MirroredStrategy cannot
    run (a TensorFlow limit: sync points inside control flow; measured "You must feed a value for placeholder").
    A TPU compiles that loop whole, so here the steps run one call each, as many, and the report says so."""
    keras = tf.keras
    if not str(getattr(keras, "__version__", "")).startswith("3."):
        return  # tf-keras runs steps_per_execution under MirroredStrategy as it is
    original = keras.Model.compile

    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = original(self, *args, **kwargs)
        asked = int(getattr(self, "steps_per_execution", 1) or 1)
        checks.steps_per_execution(asked)
        if asked > 1:
            self.steps_per_execution = 1
        return done

    keras.Model.compile = compile
