"""TPUEstimator scripts (TensorFlow <= 2.15 with tensorflow-estimator) under `--rehearse`.

A TPUEstimator with use_tpu=True asks the TPU for its system metadata over a
session to the resolver's master, then compiles model_fn into a TPU program
(tpu.rewrite over every core, fed by infeed/outfeed queues): ops that have
no CPU kernel, so that program cannot run here on any number of virtual CPUs.
TPUEstimator's own way to run the same code without a TPU is use_tpu=False
(input_fn and model_fn on the CPU, params['batch_size'] the global batch), so
that is what a rehearsal runs: the script trains and evaluates for real, once
per step, on one CPU. What can still be told about the TPU run is told by
TPUEstimator's own code and by watching the script's:

- TPUEstimator's configuration checks for each mode (num_shards, batch sizes
  divisible by the replicas, evaluation on one host), run against the slice's
  metadata, with the batch sizes input_fn and model_fn would get on the TPU;
- the datasets input_fn returns (batch split, static shapes);
- the op types model_fn adds to the graph (XLA kernels, float64), with
  resource variables, as tpu.rewrite makes them on the TPU;
- iterations_per_loop, and steps counted by a session hook.

What was not rehearsed (the sharded program, infeed, the compile) is said in
the report. tensorflow-estimator is loaded lazily by TensorFlow: nothing here
runs unless the script reaches TPUEstimator.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import tensorflow as tf
from tensorflow.python.tpu import tpu_function
from tensorflow.python.tpu.ops import tpu_ops
from tensorflow.python.util import tf_decorator

from tpuctl.runtime import after_import
from tpuctl.runtime.rehearsal import checks as rehearsal_checks
from tpuctl.runtime.rehearsal import embedding
from tpuctl.runtime.rehearsal.checks import FAILED, NOT_CHECKED, OK, verdict

MODULE = "tensorflow_estimator.python.estimator.tpu.tpu_estimator"
_VALIDATED_MODES = ("train", "eval", "infer")  # tf.estimator.ModeKeys: TRAIN, EVAL, PREDICT


@dataclass
class Observed:
    """What a rehearsal saw of the script's TPUEstimators, for the report."""

    replicas: int
    hosts: int
    constructed: int = 0
    cpu_only: int = 0  # constructed with use_tpu=False by the script itself
    iterations: set[str] = field(default_factory=set)  # iterations_per_loop as given: 10, or '30s'
    modes: dict[str, dict[str, str]] = field(default_factory=dict)  # one verdict per mode validated
    global_batches: list[int] = field(default_factory=list)  # train_batch_size of each estimator (the checks' estimator_batches)
    cross_replica_sums: int = 0
    steps: int = 0
    first_step_at: float | None = None
    last_step_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def step_done(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.steps += 1
            if self.first_step_at is None:
                self.first_step_at = now
            self.last_step_at = now

    def seconds_per_step(self) -> float | None:
        if self.steps < 2 or self.first_step_at is None or self.last_step_at is None:
            return None
        return (self.last_step_at - self.first_step_at) / (self.steps - 1)

    def verdicts(self) -> list[dict[str, str]]:
        if not self.constructed:
            return []
        found = [self.modes[mode] for mode in _VALIDATED_MODES if mode in self.modes]
        if self.cpu_only:
            found.append(verdict("TPUEstimator", NOT_CHECKED, "the script built TPUEstimator(use_tpu=False): it runs on the host CPU, on a TPU too"))
        if self.iterations:
            shown = ", ".join(sorted(self.iterations))
            found.append(
                verdict(
                    "iterations_per_loop",
                    OK,
                    f"{shown} per loop on the TPU (one session.run runs the loop on the device); rehearsed one step per session.run",
                )
            )
        batches = sorted(set(self.global_batches))
        batch = f"the global batch ({', '.join(str(b) for b in batches)})" if batches else "the global batch"
        shards = f"{self.replicas} shards" + (f" of {batches[0] // self.replicas}" if len(batches) == 1 and batches[0] % self.replicas == 0 else "")
        summed = " (CrossShardOptimizer's cross-replica sum is a sum over that one shard here)" if self.cross_replica_sums else ""
        found.append(
            verdict(
                "TPU program",
                NOT_CHECKED,
                f"TPUEstimator ran with use_tpu=False, as it runs without a TPU: model_fn saw {batch} on one CPU, "
                f"not {shards}{summed}; the sharded program, infeed/outfeed and XLA's compile of model_fn "
                "for the TPU were not rehearsed",
            )
        )
        return found


def install(checks: rehearsal_checks.Checks, replicas: int, hosts: int) -> Observed:
    """Watch for tensorflow-estimator's TPUEstimator; the returned record fills as the script uses it."""
    observed = Observed(replicas, hosts, global_batches=checks.estimator_batches)
    after_import.when_imported(MODULE, functools.partial(_patch, checks, observed))
    return observed


def _patch(checks: rehearsal_checks.Checks, observed: Observed, estimator_module: ModuleType) -> None:
    module: Any = estimator_module
    _run_locally(module.tpu_config.RunConfig)
    _run_on_cpu(module.TPUEstimator, module.tpu_context, checks, observed)
    _tpu_variables_in_model_fn(module._ModelFnWrapper, checks)
    _one_shard_sum(observed)


def _run_locally(run_config: Any) -> None:
    """RunConfig(cluster=resolver) / master=...: the rehearsal's resolver reaches nothing, so sessions stay in-process.

    Given a cluster, RunConfig puts the resolver's master and cluster_def in the
    session config, and every session would dial that address. The script's
    resolver is kept as `config.cluster`.
    """
    original = run_config.__init__

    def __init__(self: Any, tpu_config: Any = None, evaluation_master: Any = None, master: Any = None, cluster: Any = None, **kwargs: Any) -> None:
        original(self, tpu_config=tpu_config, **kwargs)
        self._cluster = cluster

    run_config.__init__ = __init__


def _run_on_cpu(estimator: Any, tpu_context: Any, checks: rehearsal_checks.Checks, observed: Observed) -> None:
    """TPUEstimator(use_tpu=True) constructs as it would for the TPU, then runs on the CPU as use_tpu=False does.

    Its constructor's own checks run unchanged (a missing train_batch_size fails
    here as on the TPU). The context it made for the TPU is kept to run the
    checks TPUEstimator makes there when each mode starts; the one it runs with
    is use_tpu=False's, the only thing that differs between the two.
    """
    original_init, original_input, original_train = estimator.__init__, estimator._call_input_fn, estimator.train

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        observed.constructed += 1
        observed.iterations.add(str(self.config.tpu_config.iterations_per_loop))
        on_tpu = self._ctx
        if not on_tpu._use_tpu:
            observed.cpu_only += 1  # the script asked for the CPU itself
            return
        _tell_the_slice(on_tpu, self.config, observed)
        self._tpuctl_on_tpu = on_tpu
        self._ctx = tpu_context._get_tpu_context(
            self.config, on_tpu._train_batch_size, on_tpu._eval_batch_size, on_tpu._predict_batch_size, False,
            on_tpu._eval_on_tpu, on_tpu._embedding_config_spec,
        )
        if on_tpu._train_batch_size:
            observed.global_batches.append(int(on_tpu._train_batch_size))
        if on_tpu._embedding_config_spec is not None:
            checks.embeddings.append(("TPUEstimator's EmbeddingConfigSpec", embedding.ON_THE_HARDWARE))

    def _call_input_fn(self: Any, input_fn: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        on_tpu = getattr(self, "_tpuctl_on_tpu", None)
        if on_tpu is not None and mode in _VALIDATED_MODES and mode not in observed.modes:
            observed.modes[mode] = _validate(on_tpu, mode, observed.replicas)
        given = original_input(self, input_fn, mode, *args, **kwargs)
        if mode != "infer":  # TPUEstimator pads a partial predict batch itself
            checks.estimator_dataset(given)
        return given

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original_train).bind(self, *args, **kwargs)
        bound.arguments["hooks"] = [*(bound.arguments.get("hooks") or []), _step_hook(observed)]
        return original_train(*bound.args, **bound.kwargs)

    estimator.__init__, estimator._call_input_fn, estimator.train = __init__, _call_input_fn, train


def _tell_the_slice(context: Any, config: Any, observed: Observed) -> None:
    """Give TPUEstimator's TPU context the slice's metadata, which it would ask the TPU for over a session."""
    metadata = tf.tpu.experimental.TPUSystemMetadata(
        num_cores=observed.replicas, num_hosts=observed.hosts, num_of_cores_per_host=observed.replicas // observed.hosts,
        topology=None, devices=[],
    )
    for master in {config.master, config.evaluation_master}:
        context._lazy_tpu_system_metadata_dict[master] = metadata


def _validate(context: Any, mode: str, replicas: int) -> dict[str, str]:
    """One mode's verdict: what TPUEstimator would raise on the TPU, or the batch sizes it would hand out there."""
    name = f"TPUEstimator {'predict' if mode == 'infer' else mode}"
    try:
        with context.with_mode(mode) as on_tpu:
            if on_tpu.is_running_on_cpu():  # checks the configuration when the mode runs on the TPU
                return verdict(name, OK, "runs on the host CPU on the TPU too (eval_on_tpu=False)")
            per_input, per_model, total = on_tpu.batch_size_for_input_fn, on_tpu.batch_size_for_model_fn, on_tpu.global_batch_size
    except (ValueError, RuntimeError) as err:
        return verdict(name, FAILED, f"TPUEstimator would raise on the TPU: {str(err).splitlines()[0]}")
    except Exception as err:  # noqa: BLE001 - TPUEstimator internals this rehearsal did not foresee: say so, run on
        return verdict(name, NOT_CHECKED, f"TPUEstimator's own checks could not run here ({type(err).__name__}: {err})")
    return verdict(
        name,
        OK,
        f"TPUEstimator's own checks pass on {replicas} replicas: global batch {total}, "
        f"params['batch_size'] {per_input} in input_fn and {per_model} in model_fn there",
    )


def _step_hook(observed: Observed) -> Any:
    class StepHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
        """Counts train steps: with use_tpu=False, one session.run is one step."""

        def after_run(self, run_context: Any, run_values: Any) -> None:
            observed.step_done()

    return StepHook()


def _tpu_variables_in_model_fn(wrapper: Any, checks: rehearsal_checks.Checks) -> None:
    """model_fn runs with resource variables, as tpu.rewrite runs it on the TPU, and its ops are read for the checks.

    Only model_fn's own call: the eval metric_fn and hooks run on the host on a TPU too.
    """
    original = wrapper.__init__

    def __init__(self: Any, model_fn: Any, *args: Any, **kwargs: Any) -> None:
        def on_tpu(**given: Any) -> Any:
            scope = tf.compat.v1.get_variable_scope()
            before = scope.use_resource
            scope.set_use_resource(True)
            checks.placement()
            try:
                return checks.graph_ops(lambda: model_fn(**given))
            finally:
                scope.set_use_resource(before)

        # A TFDecorator: TPUEstimator reads model_fn's parameters (labels, mode, config, params) through it.
        original(self, tf_decorator.make_decorator(model_fn, on_tpu), *args, **kwargs)

    wrapper.__init__ = __init__


def _one_shard_sum(observed: Observed) -> None:
    """cross_replica_sum outside a TPU shard context is a sum over one shard: the value itself.

    TensorFlow already treats that case as one shard (its group assignment is
    [[0]]); only the CrossReplicaSum op has no CPU kernel, so CrossShardOptimizer
    could not apply a gradient here.
    """
    original = tpu_ops.cross_replica_sum

    def cross_replica_sum(x: Any, group_assignment: Any = None, name: Any = None) -> Any:
        if tpu_function.get_tpu_context().number_of_shards not in (None, 1):
            return original(x, group_assignment, name=name)
        observed.cross_replica_sums += 1
        return tf.identity(x, name=name)

    tpu_ops.cross_replica_sum = cross_replica_sum
    tf.compat.v1.tpu.cross_replica_sum = cross_replica_sum
